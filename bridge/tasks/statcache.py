"""Facts read from task files, remembered by the files' stat signatures.

While a session is open the task's golden folders are watched (bridge/sessions/contamination.py) and any
open of a file there is evidence against the session, whoever opened it. Loading a catalog reads
the golden tests (content hash, static test ids, imports): a second bridge process, or
`rgbridge tasks list` run while an agent works, would mark the session contaminated. So those
facts are cached under the cache folder keyed by each file's (path, size, mtime, ctime, inode):
`stat` opens nothing, and a changed file changes its signature, so the value is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar, cast

T = TypeVar("T")


def _root() -> Path | None:
    from bridge.locations import cache_dir

    try:
        path = cache_dir() / "task-facts"
        path.mkdir(parents=True, exist_ok=True)
        return path
    except OSError:
        return None


def signature(kind: str, extra: str, files: Iterable[Path]) -> str | None:
    """Key of a fact over these files, or None when one cannot be stat'ed."""
    h = hashlib.sha256(f"{kind}\0{extra}".encode())
    for path in sorted(files):
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        h.update(
            f"\0{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}".encode(
                "utf-8", "surrogateescape"
            )
        )
    return h.hexdigest()


def remembered(kind: str, extra: str, files: Iterable[Path], compute: Callable[[], T]) -> T:
    """`compute()` once per stat signature of `files`; the JSON-able value is cached on disk."""
    key = signature(kind, extra, list(files))
    root = _root()
    if key is None or root is None:
        return compute()
    path = root / f"{key}.json"
    try:
        return cast(T, json.loads(path.read_text(encoding="utf-8"))["value"])  # what compute() returned
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = compute()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"kind": kind, "value": value}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
    return value


def tree_files(root: Path) -> list[Path]:
    """Every file under `root`, found by listing and stat only (no file is opened)."""
    return sorted(p for p in Path(root).rglob("*") if p.is_file())
