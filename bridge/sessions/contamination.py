"""Contamination detection: opens of a task's golden tests or solution while its session is open.

An agent with a shell can read anything the user can, including the task folder next to the
recordings. That cannot be prevented from inside the bridge (see README, "Threat model"), but it
can be seen: while a session is open, inotify watches the task's golden folders (tests, solution,
the task-root test extras; for a dataset task the whole upstream repository folder, which is the
reference implementation) and every file open or read there becomes a `golden_access` event.
A session with such an event is reported `contaminated: true` with the events as evidence.

inotify cannot tell who opened a file, so the bridge must not read those folders itself while a
session is open: `held_golden` reads what scoring needs into memory before the watch starts, and
the session's scoring process gets it through a pipe (bridge/sessions/score_process.py); no copy of a
golden file is ever written where the agent's user could read it.
"""

from __future__ import annotations

import errno
import fnmatch
import io
import os
import select
import shutil
import struct
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bridge.fs.tarball import unpack
from bridge.fs.tarpack import Stamp, add_entries, list_tree
from bridge.recording.events import read_events
from bridge.sessions.linux import (
    IN_ACCESS,
    IN_CREATE,
    IN_DONT_FOLLOW,
    IN_EXCL_UNLINK,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_OPEN,
    IN_Q_OVERFLOW,
    inotify_add_watch,
    inotify_init,
)
from bridge.tasks.model import Task

_MASK = IN_ACCESS | IN_OPEN | IN_CREATE | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
_EVENT = struct.Struct("iIII")
_S = TypeVar("_S")

#: golden trees with more directories than this are watched partially (recorded as a warning)
MAX_WATCHED_DIRS = 4000
#: one event per (path, kind); beyond this many distinct ones a single summary event is written
MAX_RECORDED = 200
_SKIP_DIRS = frozenset({"__pycache__", ".git", "node_modules", "target", ".venv", "venv"})

EVENT = "golden_access"
WARNING_EVENT = "golden_watch_warning"


# ----------------------------------------------------------------------------- what is golden


@dataclass(frozen=True)
class GoldenSet:
    """Folders to watch: `trees` recursively; `roots` only for the listed file names."""

    trees: tuple[Path, ...]
    roots: dict[Path, frozenset[str]]
    #: files inside a watched tree the agent is given anyway (README, seed files): never evidence
    allowed: frozenset[Path]


def golden_set(task: Task) -> GoldenSet:
    """The task's golden tests and solution folders (dataset task: its whole upstream folder)."""
    allowed = frozenset({task.readme_path, *task.seed_files.values()})
    extras = {p for p in task.test_extras.values() if p not in allowed}
    if task.source == "dataset":
        # repo/<Task>/ is the original repository: tests and reference implementation alike.
        return GoldenSet(trees=(task.root,), roots={}, allowed=allowed)
    trees = [task.tests_dir] + ([task.solution_dir] if task.solution_dir else [])
    roots: dict[Path, set[str]] = {}
    for path in extras:
        if not any(path.is_relative_to(t) for t in trees):
            roots.setdefault(path.parent, set()).add(path.name)
    return GoldenSet(trees=tuple(trees), roots={k: frozenset(v) for k, v in roots.items()}, allowed=allowed)


# ----------------------------------------------------------------------------- held in memory

#: what earlier versions staged golden copies as, in the temp folder (swept at start-up)
LEFTOVER_PREFIX = "rgbridge-golden-"
_IGNORED = ("__pycache__", "*.pyc", "*.class")


def _add_tree(tar: tarfile.TarFile, source: Path, arcname: str) -> None:
    """`source` into `tar` under `arcname` through the one tar helper (bridge/fs/tarball.py):
    symlinks as links, never followed (as copytree did), owners and mtimes as on disk."""
    entries = list_tree(source, ignore=False, skip=_ignored)
    add_entries(tar, source, entries, prefix=arcname, stamp=Stamp(mtime=None))


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in _IGNORED)


def golden_archive(task: Task) -> bytes:
    """What scoring needs of the task's golden folders (tests, solution, test extras) as an
    uncompressed tar held in memory: `tests/`, `solution/`, `extras/<name>`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_tree(tar, task.tests_dir, "tests")
        if task.solution_dir is not None:
            _add_tree(tar, task.solution_dir, "solution")
        for name, source in sorted(task.test_extras.items()):
            tar.add(source, arcname=f"extras/{name}", recursive=False)
    return buf.getvalue()


def unpack_golden(task: Task, archive: bytes, dest: Path) -> Task:
    """The Task that scores from `archive` (`golden_archive`) unpacked into `dest`: a folder
    only the scoring process can reach (bridge/sessions/score_process.py). The one tar helper
    refuses absolute paths, escapes, links out and devices (bridge/fs/tarball.py)."""
    unpack(io.BytesIO(archive), dest, links=True, fresh=False)
    solution = dest / "solution" if task.solution_dir is not None else None
    extras = {name: dest / "extras" / name for name in task.test_extras}
    return task.model_copy(update={"tests_dir": dest / "tests", "solution_dir": solution, "test_extras": extras})


_held: dict[tuple[Path, str], bytes] = {}
_held_lock = threading.Lock()


def held_golden(task: Task) -> bytes:
    """The process-wide in-memory golden archive of `task` (read on first use, never written
    to disk): read when a session opens, before its watch starts, so a later scoring job of
    this process never re-reads the originals while another session's watch is on."""
    key = (task.root, task.content_hash)
    with _held_lock:
        if key not in _held:
            _held[key] = golden_archive(task)
        return _held[key]


def sweep_leftovers(temp_dir: Path | None = None) -> list[Path]:
    """Remove golden copies earlier versions staged in the temp folder (`rgbridge-golden-*`),
    which a killed process left readable for good; the removed folders."""
    root = Path(temp_dir or tempfile.gettempdir())
    removed = []
    try:
        entries = [p for p in root.iterdir() if p.name.startswith(LEFTOVER_PREFIX)]
    except OSError:
        return []
    for path in entries:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


# ----------------------------------------------------------------------------- the watch


@dataclass
class _Watch:
    path: Path
    only: frozenset[str] | None  # None: every file in the folder counts


@dataclass
class GoldenWatch:
    """An inotify watch on a GoldenSet; calls `report(path, kind)` once per (path, kind)."""

    golden: GoldenSet
    report: Callable[[str, str], None]
    warn: Callable[[str], None]
    _fd: int = -1
    _wds: dict[int, _Watch] = field(default_factory=dict)
    _by_path: dict[Path, int] = field(default_factory=dict)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _thread: threading.Thread | None = None
    _stop_r: int = -1
    _stop_w: int = -1
    _full_warned: bool = False

    def start(self) -> None:
        self._fd = inotify_init()  # Unsupported off Linux or without inotify: the caller records it
        for tree in self.golden.trees:
            self._add_tree(tree)
        for root, names in self.golden.roots.items():
            self._add(root, names)
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, name="golden-watch", daemon=True)
        self._thread.start()

    def _add(self, folder: Path, only: frozenset[str] | None) -> None:
        existing = self._by_path.get(folder)
        if existing is not None:
            prev = self._wds[existing].only
            self._wds[existing].only = None if prev is None or only is None else prev | only
            return
        if len(self._wds) >= MAX_WATCHED_DIRS:
            if not self._full_warned:
                self._full_warned = True
                self.warn(f"more than {MAX_WATCHED_DIRS} golden folders: the rest are not watched")
            return
        try:
            wd = inotify_add_watch(self._fd, folder, _MASK)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):  # vanished or not a folder: nothing to read there
                self.warn(f"cannot watch {folder}: {exc.strerror}")
            return
        self._wds[wd] = _Watch(folder, only)
        self._by_path[folder] = wd

    def _add_tree(self, tree: Path) -> None:
        for here, dirs, _files in os.walk(tree):  # os.walk never descends into directory symlinks
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            self._add(Path(here), None)

    def _loop(self) -> None:
        poller = select.poll()  # not select(): a busy server may hold fds above FD_SETSIZE
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._fd in ready:
                self._drain()
            if self._stop_r in ready:
                self._drain()  # whatever the kernel queued before the stop still counts
                return

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            offset = 0
            while offset + _EVENT.size <= len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, offset)
                raw = buf[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                self._handle(wd, mask, os.fsdecode(raw))

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self._emit("(event queue overflowed: too many accesses to list)", "overflow")
            return
        watch = self._wds.get(wd)
        if watch is None or mask & IN_IGNORED or not name:
            return
        path = watch.path / name
        if mask & IN_ISDIR:
            if mask & (IN_CREATE | IN_MOVED_TO) and watch.only is None and name not in _SKIP_DIRS:
                self._add_tree(path)
            return
        if watch.only is not None and name not in watch.only:
            return
        if path in self.golden.allowed:
            return
        if mask & IN_OPEN:
            self._emit(str(path), "open")
        if mask & IN_ACCESS:
            self._emit(str(path), "read")

    def _emit(self, path: str, kind: str) -> None:
        key = (path, kind)
        if key in self._seen:
            return
        self._seen.add(key)
        try:
            if len(self._seen) == MAX_RECORDED + 1:
                self.report("(more golden files accessed: not listed)", "more")
            elif len(self._seen) <= MAX_RECORDED:
                self.report(path, kind)
        except (OSError, ValueError):  # the event log is closed or its disk full: nothing to write to
            pass

    def stop(self) -> None:
        """Stop watching; accesses queued before this call are still reported."""
        if self._thread is None:
            return
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=10)
        self._thread = None
        for fd in (self._fd, self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd = self._stop_r = self._stop_w = -1


# ----------------------------------------------------------------------------- per session


def open_guard(session: Any) -> None:
    """Read what scoring needs of the golden folders into memory, then watch the originals
    until the session's recorder stops (submit, quit, server stop).

    Called by SessionManager when it starts a session's recorder, before the agent can act: no
    bridge read of the golden folders happens for this session once its watch is on."""
    held_golden(session.task)
    append = session.events.append
    gw = GoldenWatch(
        golden_set(session.task),
        report=lambda path, kind: append(EVENT, path=path, kind=kind),
        warn=lambda message: append(WARNING_EVENT, message=message),
    )
    try:
        gw.start()
    except OSError as exc:  # not Linux, or no inotify: the session runs, the gap is recorded
        append(WARNING_EVENT, message=f"golden files are not watched: {exc}")
        return
    session.recorder.stop_hooks.append(gw.stop)


# ----------------------------------------------------------------------------- reading it back


def evidence(rec_dir: Path | str) -> list[dict[str, Any]]:
    """The recording's golden_access events (path, kind, time), oldest first."""
    path = Path(rec_dir) / "events.jsonl"
    if not path.is_file():
        return []
    return [
        {"path": str(e.get("path")), "kind": str(e.get("kind")), "at": str(e.get("t"))}
        for e in read_events(path)
        if e.get("type") == EVENT
    ]


def contamination(rec_dir: Path | str) -> dict[str, Any]:
    """`{"contaminated": bool, "evidence": [...]}` for a recording."""
    found = evidence(rec_dir)
    return {"contaminated": bool(found), "evidence": found}


def annotate(status: _S, rec_dir: Path | str) -> _S:
    """A result status (get_result, `rgbridge submit`) with the recording's contamination set."""
    found = evidence(rec_dir)
    status.contaminated = bool(found)  # type: ignore[attr-defined]
    status.contamination = found  # type: ignore[attr-defined]
    return status


def mark_entries(entries: Iterable[dict[str, Any]], rec_dir: Path | str) -> None:
    """Add the recording's contamination to report entries (run table, HTML, exports)."""
    info = contamination(rec_dir)
    for entry in entries:
        entry["contaminated"] = info["contaminated"]
        if info["contaminated"]:
            entry["contamination"] = info["evidence"]
