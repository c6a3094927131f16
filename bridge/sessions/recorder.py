"""Workspace recorder: watchdog events -> settled, content-hashed file events + shadow git commits.

Design (anchors §5.5), one module per stage:
- bridge/sessions/watch.py: one selective inotify instance (or polling) whose handler only
  enqueues `(monotonic ts, type, src, dest, is_dir)`.
- bridge/sessions/settling.py: a worker thread (here) drains the queue; each path settles before
  it is read, stored as a git blob and logged when its content differs from the record.
- bridge/sessions/recorded.py: the log of record and its reconciliation against a fresh scan.
- bridge/sessions/checkpoints.py: commits to the shadow store (automatic checkpoints, the seal).
- Temp/backup names (vim, JetBrains, emacs, `*.tmp.<pid>`) go to the optional raw debug log only.
- ENOSPC/EMFILE while placing watches -> polling on the root and `degraded` is set; a dead
  inotify reader switches to polling too; a deleted root is logged and the recorder falls back to
  periodic rescans.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError
from bridge.fs.hashing import SENTINEL_REL
from bridge.recording.events import EventLog
from bridge.recording.manifest import Manifest, diff, stable_scan
from bridge.recording.store import ShadowStore
from bridge.sessions.checkpoints import Checkpoint, Committer, Seal
from bridge.sessions.recorded import RecordedFiles
from bridge.sessions.settings import RecorderSettings
from bridge.sessions.settling import Settler, workspace_rel
from bridge.sessions.watch import LIMIT_ERRNOS, Watcher


class Recorder:
    def __init__(
        self,
        workspace: Path,
        *,
        event_log: EventLog,
        store: ShadowStore,
        settings: RecorderSettings | None = None,
        on_sentinel: Callable[[], None] | None = None,
        raw_log: Path | None = None,
        baseline: Manifest | None = None,
    ) -> None:
        """`raw_log`: the optional debug log of every raw watch event; `baseline`: what was
        recorded before this recorder (a re-attached session)."""
        settings = settings if settings is not None else RecorderSettings()
        self.root = Path(workspace).resolve()
        self._root_s = str(self.root)
        self.log = event_log
        self.store = store
        self.settle = settings.settle_seconds
        self.exclude = frozenset(settings.exclude)
        self.on_sentinel = on_sentinel
        #: called once when the recorder stops (the session is no longer open), even if it never started
        self.stop_hooks: list[Callable[[], None]] = []
        self.force_polling = settings.force_polling
        self.max_file_bytes = min(settings.max_file_bytes, store.max_file_bytes)
        self.auto_checkpoint = settings.auto_checkpoint
        self.checkpoint_quiet = settings.checkpoint_quiet
        self.checkpoint_interval = settings.checkpoint_interval
        self.checkpoint_max_interval = settings.checkpoint_max_interval
        self.poll_interval = settings.poll_interval
        self._raw_path = raw_log
        # What was recorded before this recorder (a re-attached session): the start checkpoint
        # reconciles the disk against it, so changes made while nothing recorded are logged.
        self._baseline = baseline
        self._raw: Any = None

        self.mode: str = "polling" if self.force_polling else "inotify"
        self.degraded: str | None = None

        self._q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._recorded = RecordedFiles(event_log)
        self._settler = Settler(
            self._root_s,
            exclude=self.exclude,
            settle=self.settle,
            max_file_bytes=self.max_file_bytes,
            store=store,
            recorded=self._recorded,
        )
        self._last_event = time.monotonic()
        self._commits = Committer(
            self.root,
            log=event_log,
            store=store,
            recorded=self._recorded,
            exclude=self.exclude,
            max_file_bytes=self.max_file_bytes,
        )
        self._rescan_every: float | None = None
        self._last_rescan = time.monotonic()
        self._sentinel_fired = False
        self._watch = Watcher(self._root_s, self.exclude, put=self._enqueue, on_error=self._emitter_error)
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()
        self._started = False

    # ---- public API ---------------------------------------------------------------------

    @property
    def files_changed(self) -> int:
        """Distinct paths with at least one logged change since start."""
        return len(self._recorded.changed)

    def manifest(self) -> Manifest:
        """A copy of the recorder's current (recorded) manifest."""
        with self._lock:
            return Manifest(dict(self._recorded.files), dict(self._recorded.oversized))

    def watched_dirs(self) -> set[str]:
        """Relative paths of directories with a kernel watch ("" = the root); empty when polling."""
        return self._watch.watched_dirs() if self.mode == "inotify" else set()

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
                self._watch.start_inotify()
                self.mode = "inotify"
            except OSError as exc:
                if exc.errno not in LIMIT_ERRNOS:
                    raise
                self._degrade(f"inotify: {exc.strerror or exc}", log_now=False)
                self._start_polling()
        with self._lock:
            if self._baseline is not None:
                base = self._baseline
                self._commits.last_files = dict(base.files)
            else:
                base = self._commits.scan(previous=None)
            self._recorded.adopt(base)
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
        self._watch.stop()
        if self._worker is not None:
            self._worker.join(timeout=30)
        with self._lock:
            self._drain_queue()
            self._settler.process_due(force=True)
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self.log.append(
            "recorder_stopped", files_changed=self.files_changed, events_logged=self._recorded.events_logged
        )
        self.log.sync()
        self._started = False

    def flush(self) -> int:
        """Log every write made before this call, now: settle pending paths at once and reconcile
        the record against a fresh scan (the settle window and a watch event still on its way
        would otherwise hide a write for a moment). Commits nothing; logs a `reconcile` record
        only when the scan found something. Returns the synthetic events logged."""
        with self._lock:
            if not self._started:
                return 0
            self._drain_queue()
            self._settler.process_due(force=True)
            fresh = self._commits.scan()
            if not diff(self._recorded.files, fresh.files) and fresh.oversized == self._recorded.oversized:
                return 0
            return self._recorded.reconcile(fresh)

    def checkpoint(self, reason: str = "manual") -> Checkpoint:
        """Settle pending paths now, reconcile against a fresh scan, commit the result."""
        with self._lock:
            self._drain_queue()
            self._settler.process_due(force=True)
            fresh = self._commits.scan()
            return self._commits.commit(fresh, reason)[0]

    def seal(self, quiet_seconds: float = 1.0, max_wait: float = 30.0, *, tag: str | None = None) -> Seal:
        """Quiet period, stat-checked stable scan, reconciliation, commit (anchors §5.4)."""
        t0 = time.monotonic()
        deadline = t0 + max_wait
        quiet_ok = False
        while True:
            now = time.monotonic()
            with self._lock:
                busy = self._settler.busy() or not self._q.empty()
            if not busy and now - self._last_event >= quiet_seconds:
                quiet_ok = True
                break
            if now >= deadline:
                break
            time.sleep(0.02)
        with self._lock:
            self._drain_queue()
            self._settler.process_due(force=True)
            remaining = max(0.5, deadline - time.monotonic())
            ss = stable_scan(
                self.root,
                max_wait=remaining,
                max_file_bytes=self.max_file_bytes,
                previous=Manifest(self._recorded.files, self._recorded.oversized),
                exclude=self.exclude,
                on_content=self.store.put_blob,
            )
            ckpt, res = self._commits.commit(ss.manifest, "seal", extra={"stable": quiet_ok and ss.stable})
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

    # ---- observers ----------------------------------------------------------------------

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        self._last_event = item[0]
        self._q.put(item)

    def _emitter_error(self, exc: OSError) -> None:
        self._q.put((time.monotonic(), "__error__", f"inotify: {exc.strerror or exc}", "", False))

    def _start_polling(self) -> None:
        self._watch.start_polling(self.poll_interval)
        self.mode = "polling"

    def _degrade(self, reason: str, *, log_now: bool = True) -> None:
        self.degraded = reason if self.degraded is None else f"{self.degraded}; {reason}"
        if log_now:
            self.log.append("recorder_degraded", reason=reason, mode=self.mode)

    def _switch_to_polling(self, reason: str) -> None:
        self._watch.close()
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
                    self._settler.process_due()
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
            if self._settler.busy():
                return max(0.01, min(0.1, self.settle / 3))
        return 0.25

    def _health(self) -> None:
        if self.mode == "inotify" and self._watch.reader_died():
            if not self._stopping.is_set():
                self._switch_to_polling("inotify reader stopped")
        if self._rescan_every is not None and time.monotonic() - self._last_rescan >= self._rescan_every:
            self._last_rescan = time.monotonic()
            fresh = self._commits.scan()
            if self._recorded.reconcile(fresh):
                self._recorded.dirty = True

    def _maybe_checkpoint(self, now: float) -> None:
        if not (self.auto_checkpoint and self._recorded.dirty) or self._settler.busy():
            return
        since = now - self._commits.last_at
        quiet = now - self._last_event
        if (
            quiet >= self.checkpoint_quiet and since >= self.checkpoint_interval
        ) or since >= self.checkpoint_max_interval:
            fresh = self._commits.scan()
            self._commits.commit(fresh, "auto")

    def _drain_queue(self) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            self._ingest(item)
        if self._raw is not None:
            self._raw.flush()

    def _ingest(self, item: tuple[Any, ...]) -> None:
        mono, kind, src, dest, is_dir = item
        if self._raw is not None:
            self._raw.write(f"{mono:.6f}\t{kind}\t{'d' if is_dir else 'f'}\t{src}\t{dest}\n")
        if kind == "__error__":
            if self.mode == "inotify":
                self._switch_to_polling(src)
            return
        if is_dir and kind == "deleted" and src == self._root_s:
            self._watch.close()
            self.mode = "polling"
            self._rescan_every = self.poll_interval
            self._degrade("workspace root deleted")
            return
        srel, drel = workspace_rel(self._root_s, src), workspace_rel(self._root_s, dest)
        for r in (srel, drel):
            if r == SENTINEL_REL:
                self._check_sentinel()
        self._settler.ingest(kind, srel, drel, is_dir, mono)

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
