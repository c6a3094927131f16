"""Workspace recorder: watchdog events -> settled, content-hashed file events + shadow git commits.

Design (anchors §5.5):
- ONE inotify instance with non-recursive watches placed by us on allowed directories only
  (`_SelectiveInotifyEmitter`); excluded directories (node_modules, .venv, .git, ...) are never
  watched. New/moved-in directories get watches (and a walk that simulates creates for what is
  already inside) from the emitter thread itself, as early as possible.
- The observer's handler only enqueues `(monotonic ts, type, src, dest, is_dir)`.
- A worker thread settles per path (no event for `settle_seconds`), reads with a stat before and
  after, stores the exact bytes as a git blob, and logs an event only when the content hash (or
  mode) differs from the recorder's manifest, so duplicate and simulated events are harmless.
  `closed(p)` and `moved(dest=p)` mean "p has new content"; a 0-byte read after a plain modify
  is a suspected truncate-then-write and is re-read after another settle delay.
- Temp/backup names (vim, JetBrains, emacs, `*.tmp.<pid>`) go to the optional raw debug log only.
- Because inotify can drop events (queue overflow, the mkdir race), every checkpoint and the seal
  reconcile a fresh scan against the recorded manifest and log `"synthetic": true` events for
  each difference, followed by a `reconcile` record with counts.
- ENOSPC/EMFILE while placing watches -> watchdog `PollingEmitter` on the root (with a listdir
  that prunes excluded dirs) and `degraded` is set; a deleted root is logged and the recorder
  falls back to periodic rescans.

File events: `file_created|file_modified|file_deleted` with `path`, and `sha256`, `size`, `mode`
(git octal string, e.g. "100755") where applicable; `file_moved` with `path` (source), `dest`.
Oversized files are logged with `"oversized": true` and no sha256, and are not committed.
"""

from __future__ import annotations

import errno
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter
from watchdog.observers.inotify_c import inotify_rm_watch
from watchdog.observers.polling import PollingEmitter

from bridge.errors import RecordingError
from bridge.fs.hashing import (
    EXCLUDED_DIRS,
    METADATA_DIR,
    SENTINEL_REL,
    is_excluded_dir,
    is_ignored_file,
    walk_files,
)
from bridge.recording.events import EventLog
from bridge.recording.manifest import (
    DEFAULT_MAX_FILE_BYTES,
    Change,
    FileEntry,
    Manifest,
    Oversized,
    diff,
    read_entry,
    scan,
    stable_scan,
)
from bridge.recording.store import ShadowStore, StoreMismatch

# Only what changes content; no IN_OPEN/IN_ACCESS/IN_CLOSE_NOWRITE, so our own reads are silent.
_EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileClosedEvent,
]
_LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE, errno.ENOMEM)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commit: str
    tree_hash: str
    changes: list[Change]  # vs the previous checkpoint
    reconciled: int = 0  # synthetic events emitted by this checkpoint's reconciliation
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Seal:
    commit: str
    tree_hash: str
    manifest: Manifest
    stable: bool
    seconds: float
    reconciled: int = 0
    left_out: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Pending:
    last: float
    kind: str
    suspect: int = 0
    unstable: int = 0


# ---------------------------------------------------------------------------------------------
# watchdog side


class _SelectiveInotifyEmitter(InotifyEmitter):
    """InotifyEmitter whose single inotify instance watches only the directories we allow.

    Relies on watchdog 6.x internals (`InotifyBuffer._inotify`, `Inotify._wd_for_path`); the
    dependency is pinned to 6.x for that reason.
    """

    def __init__(
        self,
        event_queue: Any,
        watch: Any,
        *,
        timeout: float,
        event_filter: list[type[FileSystemEvent]] | None = None,
        allow_dir: Callable[[str], bool],
        on_error: Callable[[OSError], None],
    ) -> None:
        super().__init__(event_queue, watch, timeout=timeout, event_filter=event_filter)
        self._allow_dir = allow_dir
        self._on_error = on_error

    # the raw watchdog Inotify object (one fd, many watch descriptors)
    def _ino(self) -> Any:
        buf = self._inotify
        return None if buf is None else buf._inotify

    def watched_paths(self) -> list[str]:
        ino = self._ino()
        if ino is None:
            return []
        with ino._lock:
            return [os.fsdecode(p) for p, wd in ino._wd_for_path.items() if wd >= 0]

    def reader_alive(self) -> bool:
        return self._inotify is not None and self._inotify.is_alive()

    def on_thread_start(self) -> None:
        super().on_thread_start()
        try:
            self._add_tree(self.watch.path, simulate=False)
        except OSError:
            self.on_thread_stop()
            raise

    def _add_tree(self, top: str, *, simulate: bool) -> None:
        ino = self._ino()
        if ino is None:
            return
        stack = [top]
        while stack:
            d = stack.pop()
            try:
                ino.add_watch(os.fsencode(d))
            except OSError as exc:
                if exc.errno in _LIMIT_ERRNOS:
                    raise
                continue  # vanished or unreadable: reconciliation covers it
            try:
                with os.scandir(d) as it:
                    entries = list(it)
            except OSError:
                continue
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    if self._allow_dir(entry.path):
                        stack.append(entry.path)
                        if simulate:
                            super().queue_event(DirCreatedEvent(entry.path))
                elif simulate:
                    super().queue_event(FileCreatedEvent(entry.path))

    def _forget_tree(self, top: str) -> None:
        """Drop kernel watches at or under `top` (dir moved out or renamed to an excluded name)."""
        ino = self._ino()
        if ino is None:
            return
        tb = os.fsencode(top)
        with ino._lock:
            wds = [wd for p, wd in ino._wd_for_path.items() if wd >= 0 and (p == tb or p.startswith(tb + b"/"))]
            # Leave the maps alone: the kernel's IN_IGNORED makes watchdog clean them up.
            for wd in wds:
                inotify_rm_watch(ino.fd, wd)

    def _remap_children(self, src: str, dest: str) -> None:
        """watchdog remaps only the moved directory's own watch in non-recursive mode."""
        ino = self._ino()
        if ino is None:
            return
        sb, db = os.fsencode(src), os.fsencode(dest)
        with ino._lock:
            for p in [p for p in ino._wd_for_path if p.startswith(sb + b"/")]:
                wd = ino._wd_for_path.pop(p)
                newp = db + p[len(sb) :]
                ino._wd_for_path[newp] = wd
                ino._path_for_wd[wd] = newp

    def queue_event(self, event: FileSystemEvent) -> None:
        super().queue_event(event)
        try:
            if isinstance(event, DirMovedEvent):
                src, dest = os.fsdecode(event.src_path), os.fsdecode(event.dest_path)
                self._remap_children(src, dest)
                if self._allow_dir(dest):
                    self._add_tree(dest, simulate=True)
                else:
                    self._forget_tree(dest)
            elif isinstance(event, DirCreatedEvent):
                path = os.fsdecode(event.src_path)
                if self._allow_dir(path):
                    self._add_tree(path, simulate=True)
            elif isinstance(event, DirDeletedEvent):
                path = os.fsdecode(event.src_path)
                if path != self.watch.path:
                    self._forget_tree(path)
        except OSError as exc:
            self._on_error(exc)


class _Handler(FileSystemEventHandler):
    """Runs on the observer thread: enqueue only."""

    def __init__(self, put: Callable[[tuple[float, str, str, str, bool]], None]) -> None:
        self._put = put

    def dispatch(self, event: FileSystemEvent) -> None:
        et = event.event_type
        if et in ("opened", "closed_no_write") or (event.is_directory and et == "modified"):
            return
        self._put(
            (time.monotonic(), et, os.fsdecode(event.src_path), os.fsdecode(event.dest_path or ""), event.is_directory)
        )


# ---------------------------------------------------------------------------------------------
# recorder


class Recorder:
    def __init__(
        self,
        workspace: Path,
        *,
        event_log: EventLog,
        store: ShadowStore,
        settle_seconds: float = 0.3,
        exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
        on_sentinel: Callable[[], None] | None = None,
        force_polling: bool = False,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        auto_checkpoint: bool = True,
        checkpoint_quiet: float = 1.0,
        checkpoint_interval: float = 5.0,
        checkpoint_max_interval: float = 60.0,
        poll_interval: float = 1.0,
        raw_log: Path | None = None,
        baseline: Manifest | None = None,
    ) -> None:
        self.root = Path(workspace).resolve()
        self._root_s = str(self.root)
        self.log = event_log
        self.store = store
        self.settle = settle_seconds
        self.exclude = frozenset(exclude)
        self.on_sentinel = on_sentinel
        #: called once when the recorder stops (the session is no longer open), even if it never started
        self.stop_hooks: list[Callable[[], None]] = []
        self.force_polling = force_polling
        self.max_file_bytes = min(max_file_bytes, store.max_file_bytes)
        self.auto_checkpoint = auto_checkpoint
        self.checkpoint_quiet = checkpoint_quiet
        self.checkpoint_interval = checkpoint_interval
        self.checkpoint_max_interval = checkpoint_max_interval
        self.poll_interval = poll_interval
        self._raw_path = raw_log
        # What was recorded before this recorder (a re-attached session): the start checkpoint
        # reconciles the disk against it, so changes made while nothing recorded are logged.
        self._baseline = baseline
        self._raw: Any = None

        self.mode: str = "polling" if force_polling else "inotify"
        self.degraded: str | None = None
        self.events_logged = 0
        self.synthetic_events = 0

        self._q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._files: dict[str, FileEntry] = {}
        self._oversized: dict[str, int] = {}
        self._pending: dict[str, _Pending] = {}
        self._dir_scans: dict[str, float] = {}
        self._moves: dict[str, str] = {}  # dest rel -> src rel
        self._changed: set[str] = set()
        self._last_event = time.monotonic()
        self._last_ckpt = time.monotonic()
        self._last_ckpt_files: dict[str, FileEntry] = {}
        self._dirty = False
        self._rescan_every: float | None = None
        self._last_rescan = time.monotonic()
        self._sentinel_fired = False
        self._observer: BaseObserver | None = None
        self._emitter: _SelectiveInotifyEmitter | None = None
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()
        self._started = False

    # ---- public API ---------------------------------------------------------------------

    @property
    def files_changed(self) -> int:
        """Distinct paths with at least one logged change since start."""
        return len(self._changed)

    def manifest(self) -> Manifest:
        """A copy of the recorder's current (recorded) manifest."""
        with self._lock:
            return Manifest(dict(self._files), dict(self._oversized))

    def watched_dirs(self) -> set[str]:
        """Relative paths of directories with a kernel watch ("" = the root); empty when polling."""
        if self._emitter is None or self.mode != "inotify":
            return set()
        out = set()
        for p in self._emitter.watched_paths():
            out.add("" if p == self._root_s else os.path.relpath(p, self._root_s).replace(os.sep, "/"))
        return out

    def sentinel_present(self) -> bool:
        return os.path.lexists(os.path.join(self._root_s, *SENTINEL_REL.split("/")))

    def start(self) -> Checkpoint:
        """Place watches, take the baseline manifest and commit it (reason "start")."""
        if self._started:
            raise RecordingError("recorder already started")
        if not self.root.is_dir():
            raise RecordingError(f"workspace is not a directory: {self.root}")
        if self._raw_path is not None:
            self._raw = open(self._raw_path, "a", encoding="utf-8", errors="surrogateescape")
        self._started = True
        # An existing sentinel is stale (left from an earlier run): it does not fire until re-created.
        self._sentinel_fired = self.sentinel_present()
        if self.force_polling:
            self._start_polling()
        else:
            try:
                self._start_inotify()
            except OSError as exc:
                if exc.errno not in _LIMIT_ERRNOS:
                    raise
                self._degrade(f"inotify: {exc.strerror or exc}", log_now=False)
                self._start_polling()
        with self._lock:
            if self._baseline is not None:
                base = self._baseline
                self._last_ckpt_files = dict(base.files)
            else:
                base = self._scan(previous=None)
            self._files = dict(base.files)
            self._oversized = dict(base.oversized)
        self.log.append(
            "recorder_started",
            mode=self.mode,
            files=len(base.files),
            watches=len(self.watched_dirs()),
            settle_seconds=self.settle,
        )
        if self.degraded:
            self.log.append("recorder_degraded", reason=self.degraded, mode=self.mode)
        ckpt = self.checkpoint("start")
        self._worker = threading.Thread(target=self._run, name="rgbridge-recorder", daemon=True)
        self._worker.start()
        return ckpt

    def stop(self) -> None:
        """Stop watching; pending paths are settled first. Does not commit."""
        hooks, self.stop_hooks = self.stop_hooks, []
        for hook in hooks:
            hook()
        if not self._started:
            return
        self._stopping.set()
        self._stop_observer()
        if self._worker is not None:
            self._worker.join(timeout=30)
        with self._lock:
            self._drain_queue()
            self._process_due(force=True)
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self.log.append("recorder_stopped", files_changed=self.files_changed, events_logged=self.events_logged)
        self.log.sync()
        self._started = False

    def checkpoint(self, reason: str = "manual") -> Checkpoint:
        """Settle pending paths now, reconcile against a fresh scan, commit the result."""
        with self._lock:
            self._drain_queue()
            self._process_due(force=True)
            fresh = self._scan()
            return self._commit_locked(fresh, reason)

    def seal(self, quiet_seconds: float = 1.0, max_wait: float = 30.0, *, tag: str | None = None) -> Seal:
        """Quiet period, stat-checked stable scan, reconciliation, commit (anchors §5.4)."""
        t0 = time.monotonic()
        deadline = t0 + max_wait
        quiet_ok = False
        while True:
            now = time.monotonic()
            with self._lock:
                busy = bool(self._pending or self._dir_scans) or not self._q.empty()
            if not busy and now - self._last_event >= quiet_seconds:
                quiet_ok = True
                break
            if now >= deadline:
                break
            time.sleep(0.02)
        with self._lock:
            self._drain_queue()
            self._process_due(force=True)
            remaining = max(0.5, deadline - time.monotonic())
            ss = stable_scan(
                self.root,
                max_wait=remaining,
                max_file_bytes=self.max_file_bytes,
                previous=Manifest(self._files, self._oversized),
                exclude=self.exclude,
                on_content=self.store.put_blob,
            )
            ckpt, res = self._commit_locked(ss.manifest, "seal", extra={"stable": quiet_ok and ss.stable}, full=True)
            # events that arrived during the scan were for content the scan already saw or will be
            # recorded afterwards; they do not change the sealed tree
            if tag:
                self.store.tag(ckpt.commit, tag)
            seconds = time.monotonic() - t0
            self.log.sync()
            return Seal(
                commit=ckpt.commit,
                tree_hash=ckpt.tree_hash,
                manifest=ss.manifest,
                stable=quiet_ok and ss.stable,
                seconds=seconds,
                reconciled=ckpt.reconciled,
                left_out=list(res.left_out),
            )

    def _scan(self, previous: Manifest | None | bool = True) -> Manifest:
        """Scan the workspace, re-hashing only what changed since the recorded manifest
        (`previous=True`) or everything (`previous=None`); new content goes into the store."""
        if previous is True:
            previous = Manifest(self._files, self._oversized)
        return scan(
            self.root,
            max_file_bytes=self.max_file_bytes,
            previous=previous or None,
            exclude=self.exclude,
            on_content=self.store.put_blob,
        )

    # ---- observers ----------------------------------------------------------------------

    def _allow_dir(self, path: str) -> bool:
        if path == self._root_s:
            return True
        if not path.startswith(self._root_s + os.sep):
            return False
        parts = path[len(self._root_s) + 1 :].split(os.sep)
        if parts == [METADATA_DIR]:
            return True  # watched only for the SUBMIT sentinel
        return not any(is_excluded_dir(p, self.exclude) for p in parts)

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        self._last_event = item[0]
        self._q.put(item)

    def _emitter_error(self, exc: OSError) -> None:
        self._q.put((time.monotonic(), "__error__", f"inotify: {exc.strerror or exc}", "", False))

    def _start_inotify(self) -> None:
        emitter_cls = partial(_SelectiveInotifyEmitter, allow_dir=self._allow_dir, on_error=self._emitter_error)
        obs = BaseObserver(emitter_cls, timeout=0.2)  # type: ignore[arg-type]
        obs.schedule(_Handler(self._enqueue), self._root_s, recursive=False, event_filter=_EVENT_FILTER)
        try:
            obs.start()
        except OSError:
            obs.stop()
            raise
        self._observer = obs
        self._emitter = next(iter(obs.emitters))  # type: ignore[assignment]
        self.mode = "inotify"

    def _listdir(self, path: str | None) -> Any:
        p = path or self._root_s
        at_root = p == self._root_s
        in_meta = p == os.path.join(self._root_s, METADATA_DIR)
        with os.scandir(p) as it:
            entries = list(it)
        out = []
        for e in entries:
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and (
                in_meta or (is_excluded_dir(e.name, self.exclude) and not (at_root and e.name == METADATA_DIR))
            ):
                continue
            out.append(e)
        return iter(out)

    def _start_polling(self) -> None:
        emitter_cls = partial(PollingEmitter, stat=os.lstat, listdir=self._listdir)
        obs = BaseObserver(emitter_cls, timeout=self.poll_interval)  # type: ignore[arg-type]
        obs.schedule(_Handler(self._enqueue), self._root_s, recursive=True)
        obs.start()
        self._observer = obs
        self._emitter = None
        self.mode = "polling"

    def _stop_observer(self) -> None:
        obs, self._observer = self._observer, None
        if obs is not None:
            obs.stop()
            if obs.is_alive():
                obs.join(timeout=10)

    def _degrade(self, reason: str, *, log_now: bool = True) -> None:
        self.degraded = reason if self.degraded is None else f"{self.degraded}; {reason}"
        if log_now:
            self.log.append("recorder_degraded", reason=reason, mode=self.mode)

    def _switch_to_polling(self, reason: str) -> None:
        self._stop_observer()
        self._emitter = None
        if self.root.is_dir():
            self._start_polling()
        else:
            self.mode = "polling"
            self._rescan_every = self.poll_interval
        self._degrade(reason)

    # ---- worker -------------------------------------------------------------------------

    def _run(self) -> None:
        health_at = time.monotonic()
        while not self._stopping.is_set():
            timeout = self._next_timeout()
            try:
                first: tuple[Any, ...] | None = self._q.get(timeout=timeout)
            except queue.Empty:
                first = None
            try:
                with self._lock:
                    if first is not None:
                        self._ingest(first)
                    self._drain_queue()
                    self._process_due()
                    now = time.monotonic()
                    if now - health_at >= 1.0:
                        health_at = now
                        self._health()
                    self._maybe_checkpoint(now)
            except Exception as exc:  # never let the worker die silently
                self.log.append("recorder_error", error=f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)

    def _next_timeout(self) -> float:
        with self._lock:
            if self._pending or self._dir_scans:
                return max(0.01, min(0.1, self.settle / 3))
        return 0.25

    def _health(self) -> None:
        if self.mode == "inotify" and self._emitter is not None and not self._emitter.reader_alive():
            if not self._stopping.is_set():
                self._switch_to_polling("inotify reader stopped")
        if self._rescan_every is not None and time.monotonic() - self._last_rescan >= self._rescan_every:
            self._last_rescan = time.monotonic()
            fresh = self._scan()
            if self._reconcile(fresh):
                self._dirty = True

    def _maybe_checkpoint(self, now: float) -> None:
        if not (self.auto_checkpoint and self._dirty) or self._pending or self._dir_scans:
            return
        since = now - self._last_ckpt
        quiet = now - self._last_event
        if (
            quiet >= self.checkpoint_quiet and since >= self.checkpoint_interval
        ) or since >= self.checkpoint_max_interval:
            fresh = self._scan()
            self._commit_locked(fresh, "auto")

    def _drain_queue(self) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            self._ingest(item)
        if self._raw is not None:
            self._raw.flush()

    def _rel(self, path: str) -> str | None:
        if not path or not path.startswith(self._root_s + os.sep):
            return None
        return path[len(self._root_s) + 1 :].replace(os.sep, "/")

    def _recorded_dir(self, rel: str) -> bool:
        return not any(is_excluded_dir(p, self.exclude) for p in rel.split("/"))

    def _recorded_file(self, rel: str | None) -> bool:
        if not rel:
            return False
        parts = rel.split("/")
        if any(is_excluded_dir(p, self.exclude) for p in parts[:-1]):
            return False
        return not is_ignored_file(parts[-1])

    def _ingest(self, item: tuple[Any, ...]) -> None:
        mono, kind, src, dest, is_dir = item
        if self._raw is not None:
            self._raw.write(f"{mono:.6f}\t{kind}\t{'d' if is_dir else 'f'}\t{src}\t{dest}\n")
        if kind == "__error__":
            if self.mode == "inotify":
                self._switch_to_polling(src)
            return
        if is_dir and kind == "deleted" and src == self._root_s:
            self._stop_observer()
            self._emitter = None
            self.mode = "polling"
            self._rescan_every = self.poll_interval
            self._degrade("workspace root deleted")
            return
        srel, drel = self._rel(src), self._rel(dest)
        for r in (srel, drel):
            if r == SENTINEL_REL:
                self._check_sentinel()
        if is_dir:
            if kind in ("created",) and srel and self._recorded_dir(srel):
                self._dir_scans[srel] = mono
            elif kind == "deleted" and srel:
                self._dir_gone(srel, mono)
            elif kind == "moved":
                if srel:
                    for child in self._under(srel):
                        if drel and self._recorded_dir(drel):
                            self._moves[drel + child[len(srel) :]] = child
                    self._dir_gone(srel, mono)
                if drel and self._recorded_dir(drel):
                    self._dir_scans[drel] = mono
            return
        if kind == "moved":
            self._touch(srel, mono, "moved_from")
            self._touch(drel, mono, "moved_to")
            if drel and srel and self._recorded_file(srel) and self._recorded_file(drel):
                self._moves[drel] = srel
        else:
            self._touch(srel, mono, kind)

    def _under(self, rel_dir: str) -> list[str]:
        prefix = rel_dir + "/"
        return [p for p in self._files if p.startswith(prefix)]

    def _dir_gone(self, rel_dir: str, mono: float) -> None:
        for p in self._under(rel_dir):
            self._touch(p, mono, "deleted")
        prefix = rel_dir + "/"
        for p in [p for p in self._oversized if p.startswith(prefix)]:
            self._touch(p, mono, "deleted")

    def _touch(self, rel: str | None, mono: float, kind: str) -> None:
        if not self._recorded_file(rel):
            return
        assert rel is not None
        pend = self._pending.get(rel)
        if pend is None:
            self._pending[rel] = _Pending(mono, kind)
        else:
            pend.last = max(pend.last, mono)
            pend.kind = kind

    def _check_sentinel(self) -> None:
        present = self.sentinel_present()
        if present and not self._sentinel_fired:
            self._sentinel_fired = True
            self.log.append("sentinel", path=SENTINEL_REL)
            if self.on_sentinel is not None:
                # own thread: the callback may well call seal(), which waits on this worker
                threading.Thread(target=self.on_sentinel, name="rgbridge-sentinel", daemon=True).start()
        elif not present:
            self._sentinel_fired = False

    def _process_due(self, *, force: bool = False) -> None:
        now = time.monotonic()
        for rel_dir, t in list(self._dir_scans.items()):
            if force or now - t >= self.settle:
                del self._dir_scans[rel_dir]
                self._scan_dir_into_pending(rel_dir, t)
        due = [p for p, pend in self._pending.items() if force or now - pend.last >= self.settle]
        due.sort(key=lambda p: (p not in self._moves, p))  # move destinations first
        for rel in due:
            pend = self._pending.pop(rel, None)
            if pend is not None:
                self._settle_path(rel, pend, force=force)

    def _scan_dir_into_pending(self, rel_dir: str, t: float) -> None:
        top = os.path.join(self._root_s, *rel_dir.split("/"))
        if os.path.islink(top):  # a directory swapped for a link: the link is the entry, never its target
            self._pending.setdefault(rel_dir, _Pending(t - self.settle, "created"))
            return
        for sub, _entry in walk_files(self._root_s, self.exclude, under=rel_dir):
            rel = f"{rel_dir}/{sub}"
            if rel not in self._pending:
                self._pending[rel] = _Pending(t - self.settle, "created")

    def _settle_path(self, rel: str, pend: _Pending, *, force: bool) -> None:
        now = time.monotonic()
        got = read_entry(rel, root=self._root_s, max_file_bytes=self.max_file_bytes)
        old = self._files.get(rel)
        if got is None:
            self._moves.pop(rel, None)
            if old is not None:
                del self._files[rel]
                self._log_file("file_deleted", rel, None)
            if self._oversized.pop(rel, None) is not None and old is None:
                self._log_file("file_deleted", rel, None)
            return
        if isinstance(got, Oversized):
            self._moves.pop(rel, None)
            if old is not None:
                del self._files[rel]
            if self._oversized.get(rel) != got.size:
                kind = "file_created" if old is None and rel not in self._oversized else "file_modified"
                self._oversized[rel] = got.size
                self._log_file(kind, rel, None, oversized=True, size=got.size)
            return
        entry, data, stable = got
        if not force:
            if not stable and pend.unstable < 5:
                pend.unstable += 1
                pend.last = now
                self._pending[rel] = pend
                return
            if entry.size == 0 and pend.kind == "modified" and old is not None and old.size > 0 and pend.suspect < 2:
                pend.suspect += 1  # suspected truncate-then-write: look again after another settle
                pend.last = now
                self._pending[rel] = pend
                return
        self.store.put_blob(entry.sha256, data)
        was_oversized = self._oversized.pop(rel, None) is not None
        src = self._moves.pop(rel, None)
        if old is not None and old.same_content(entry):
            self._files[rel] = entry  # stat refresh only
            return
        if (
            src is not None
            and old is None
            and src in self._files
            and self._files[src].same_content(entry)
            and not os.path.lexists(os.path.join(self._root_s, *src.split("/")))
        ):
            del self._files[src]
            self._pending.pop(src, None)
            self._files[rel] = entry
            self._changed.add(src)
            self._log_file("file_moved", src, entry, dest=rel)
            return
        self._files[rel] = entry
        self._log_file("file_created" if old is None and not was_oversized else "file_modified", rel, entry)

    def _log_file(
        self, type_: str, rel: str, entry: FileEntry | None, *, synthetic: bool = False, **extra: Any
    ) -> None:
        fields: dict[str, Any] = {"path": rel}
        if entry is not None:
            fields.update(sha256=entry.sha256, size=entry.size, mode=f"{entry.mode:o}")
        fields.update(extra)
        if synthetic:
            fields["synthetic"] = True
            self.synthetic_events += 1
        self.log.append(type_, **fields)
        self.events_logged += 1
        self._changed.add(rel)
        if "dest" in extra:
            self._changed.add(extra["dest"])
        self._dirty = True

    def _reconcile(self, fresh: Manifest) -> int:
        """Log synthetic events for every difference between the record and `fresh`; adopt it."""
        counts = {"created": 0, "modified": 0, "deleted": 0}
        for ch in diff(self._files, fresh.files):
            counts[ch.kind] += 1
            self._log_file(f"file_{ch.kind}", ch.path, ch.new, synthetic=True)
        for p, size in fresh.oversized.items():
            if self._oversized.get(p) != size and p not in self._files:
                self._log_file("file_modified" if p in self._oversized else "file_created", p, None,
                               synthetic=True, oversized=True, size=size)  # fmt: skip
        for p in set(self._oversized) - set(fresh.oversized) - set(fresh.files):
            self._log_file("file_deleted", p, None, synthetic=True)
        n = sum(counts.values())
        self.log.append("reconcile", files=len(fresh.files), synthetic=n, **counts)
        self._files = dict(fresh.files)
        self._oversized = dict(fresh.oversized)
        return n

    def _commit_locked(
        self, fresh: Manifest, reason: str, *, extra: dict[str, Any] | None = None, full: bool = False
    ) -> Any:
        reconciled = 0
        for attempt in range(4):
            reconciled += self._reconcile(fresh)
            try:
                res = self.store.commit_manifest(fresh, f"{reason}: {len(fresh.files)} files")
                break
            except StoreMismatch:
                if attempt == 3:
                    raise
                fresh = self._scan(previous=None)
        changes = diff(self._last_ckpt_files, fresh.files)
        self.log.append(
            "checkpoint",
            reason=reason,
            commit=res.commit,
            tree_hash=res.tree_hash,
            files=len(fresh.files),
            changes=len(changes),
            reconciled=reconciled,
            new_commit=res.created,
            left_out=res.left_out,
            **(extra or {}),
        )
        self.log.sync()
        self._last_ckpt_files = dict(fresh.files)
        self._last_ckpt = time.monotonic()
        self._dirty = False
        ckpt = Checkpoint(res.commit, res.tree_hash, changes, reconciled, reason)
        return (ckpt, res) if full else ckpt
