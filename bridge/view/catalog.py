"""What the view serves: the folders named on the command line (and the output folders directly
inside them), each a run, an `evaluate` or `score` output, a recording, or a run still going
(`run.json` and `attempts/` without a report yet), under a stable id; and the only paths the view
ever reads, confined to the served folders and the recordings folders their runs name.

Reports, rows and recordings are untrusted: a path a report names is followed only when it
resolves inside a served root and holds the recording of the session the row names; a symlink
or `..` that leads outside leads nowhere (bridge/fs/paths.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.agents.run.options import RUN_FILE  # the options of a run, written before any attempt
from bridge.errors import BridgeError, PathError, RecordingError
from bridge.fs.paths import confine
from bridge.reports.targets import KINDS

#: most output folders one served folder contributes (a folder of many runs or recordings)
MAX_CHILDREN = 500
#: most bytes the view reads of one recorded file
MAX_FILE_BYTES = 8 * 1024 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_TASK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Item:
    """One served output folder."""

    id: str
    path: Path  # resolved
    kind: str  # "run" | "live" | "score" | "recording"


@dataclass
class Catalog:
    items: list[Item]
    roots: list[Path] = field(default_factory=list)  # every path read lies under one of these

    def get(self, item_id: str) -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise RecordingError(f"no served folder with id {item_id[:80]!r}")


def _is_live(path: Path) -> bool:
    return (path / RUN_FILE).is_file() and (path / "attempts").is_dir()


def kind_of(path: Path) -> str | None:
    """The kind of output folder `path` is, as `rgbridge report` tells them apart, or "live"."""
    for kind, test, _ in KINDS:
        if test(path):
            return kind
    return "live" if _is_live(path) else None


def item_id(path: Path) -> str:
    """A short id that stays the same for the same folder: its name and a hash of its path."""
    digest = hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{_UNSAFE.sub('_', path.name)[:40] or 'folder'}-{digest}"


def run_options(path: Path) -> dict[str, Any]:
    """A run folder's `run.json` (its options), or {} when it has none or it is unreadable."""
    data = read_json(path, RUN_FILE)
    return data if isinstance(data, dict) else {}


def discover(folders: list[Path]) -> Catalog:
    """The served items of `folders`; a folder that is no output folder contributes the output
    folders directly inside it (symlinked children are skipped)."""
    items: dict[str, Item] = {}
    roots: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            raise RecordingError(f"{folder}: no such folder")
        root = folder.resolve(strict=True)
        roots.append(root)
        kind = kind_of(root)
        found = [(root, kind)] if kind else []
        if not kind:
            for child in sorted(root.iterdir())[:MAX_CHILDREN]:
                if child.is_dir() and not child.is_symlink():
                    child_kind = kind_of(child)
                    if child_kind:
                        found.append((child, child_kind))
        for path, k in found:
            items.setdefault(item_id(path), Item(item_id(path), path, k))
    for item in items.values():
        rec = run_options(item.path).get("recordings")
        if item.kind in ("run", "live") and isinstance(rec, str) and os.path.isabs(rec) and Path(rec).is_dir():
            roots.append(Path(rec).resolve())
    if not items:
        raise RecordingError(
            "nothing to view: expected run or evaluate folders (report_<run_id>.json or run.json), "
            "score outputs (result.json) or recordings (session.json), or folders holding them"
        )
    return Catalog(sorted(items.values(), key=lambda i: (i.path.name, i.id)), roots)


def inside(catalog: Catalog, path: Path) -> Path | None:
    """`path` resolved, if it lies inside a served root (symlinks followed, then checked)."""
    for root in catalog.roots:
        try:
            return confine(root, path)
        except (PathError, OSError):
            continue
    return None


def read_bytes(root: Path, rel: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of `root/rel` (at most `limit`) if it is a regular file inside `root` reached
    without following a symlink at its last component; None otherwise."""
    try:
        path = confine(root, rel)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (PathError, OSError):
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device would block or never end
            return None
        return fh.read(limit)


def read_json(root: Path, rel: str) -> Any:
    data = read_bytes(root, rel)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def attempt_dir(run: Path, task: str, number: int) -> Path | None:
    """`attempts/<task>/a<k>` of a run folder, for a task name of the run's own shape."""
    if not _TASK.fullmatch(task) or ".." in task:
        return None
    try:
        return confine(run, f"attempts/{task}/a{number}")
    except (PathError, OSError):
        return None


def recording_of(catalog: Catalog, entry: dict[str, Any]) -> Path | None:
    """The recording a row names, if it lies inside a served root and is the recording of the
    session the row names."""
    from bridge.recording.reader import load_meta

    run = entry.get("run")
    if not isinstance(run, dict) or not isinstance(run.get("recording"), str):
        return None
    rec = inside(catalog, Path(run["recording"]))
    try:
        if rec is None or not (rec / "session.json").is_file() or load_meta(rec).session_id != run.get("session_id"):
            return None
    except (OSError, BridgeError):
        return None
    return rec
