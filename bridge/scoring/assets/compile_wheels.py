"""rgbridge's bytecode fill, run by a container of its own (bridge/scoring/images/sets/bytecode.py).

    python compile_wheels.py STORE CACHE LIST

LIST has one line per cached distribution: ``fill<TAB>key<TAB>path`` names a wheel of the host's
package cache (``path`` under CACHE, mounted read-only) and its key (``name-version``, normalised
as bytecode.py does), ``keep<TAB>key<TAB>`` a distribution the cache holds. For each key to fill
not yet in STORE, the wheel's Python files are read from the zip (never installed, never run),
compiled by this interpreter (the one the sets run) into hash-checked ``.pyc`` files laid out as
in site-packages (``pkg/__pycache__/mod.cpython-311.pyc``), and the folder renamed to
``STORE/key`` once whole. A hash-checked file is used at import only when the source next to it
hashes to the same value, so a file that does not match what a set installed is never used
(PEP 552). Entries of STORE that LIST does not name (their wheels left the cache) are removed,
once older than ``SETTLE_SECONDS``: the store follows the package cache.

Nothing of a package's runs here: a wheel is read as a zip, its sources parsed and compiled.
"""

from __future__ import annotations

import compileall
import os
import py_compile
import re
import secrets
import shutil
import sys
import time
import zipfile
from pathlib import Path

KEY = re.compile(r"^[a-z0-9_]+-[A-Za-z0-9.+!_]+$")
#: the most Python source read out of one wheel (a wheel past it is left without bytecode)
MAX_SOURCE_BYTES = 256 << 20
#: an entry (or a fill's unfinished folder) younger than this is never removed: another fill may
#: have just made it for a wheel this fill's list does not know yet
SETTLE_SECONDS = 600


def site_path(member: str) -> str | None:
    """Where a wheel member lands relative to site-packages; None when outside it or unsafe."""
    if "\\" in member or member.startswith("/") or not member.endswith(".py"):
        return None
    parts = member.split("/")
    if parts[0].endswith(".data"):
        if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
            return None
        parts = parts[2:]
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    return "/".join(parts)


def fill(store: Path, cache: Path, key: str, wheel: str) -> str:
    dest = store / key
    if dest.exists():
        return "present"
    path = (cache / wheel).resolve()
    if not path.is_relative_to(cache.resolve()) or not path.is_file():
        return "no wheel"
    work = store / f".tmp-{key}-{secrets.token_hex(4)}"
    work.mkdir()
    try:
        total = 0
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                rel = site_path(info.filename)
                if rel is None or info.is_dir():
                    continue
                total += info.file_size
                if total > MAX_SOURCE_BYTES:
                    return "too large"
                target = work / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
        compileall.compile_dir(
            str(work),
            quiet=2,
            workers=1,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
        for source in work.rglob("*.py"):
            source.unlink()
        os.rename(work, dest)
        return "compiled"
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        return f"failed: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(store: Path, cache: Path, listing: Path) -> int:
    keep: set[str] = set()
    wanted: list[tuple[str, str]] = []
    for line in listing.read_text(encoding="utf-8").splitlines():
        kind, _, rest = line.partition("\t")
        key, _, wheel = rest.partition("\t")
        if not KEY.match(key):
            continue
        keep.add(key)
        if kind == "fill" and wheel:
            wanted.append((key, wheel))
    now = time.time()
    for entry in store.iterdir():
        stale = entry.name.startswith(".tmp-") or (entry.name not in keep and KEY.match(entry.name))
        try:
            old = now - entry.lstat().st_mtime > SETTLE_SECONDS
        except OSError:
            continue
        if stale and old:
            shutil.rmtree(entry, ignore_errors=True)
    for key, wheel in wanted:
        print(f"RGBRIDGE_BYTECODE {key} {fill(store, cache, key, wheel)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
