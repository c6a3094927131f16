"""The recorder's watchdog side: which directories are watched, and a handler that only enqueues.

- ONE inotify instance with non-recursive watches placed by us on allowed directories only
  (`SelectiveInotifyEmitter`); excluded directories (node_modules, .venv, .git, ...) are never
  watched. New/moved-in directories get watches (and a walk that simulates creates for what is
  already inside) from the emitter thread itself, as early as possible.
- The observer's handler only enqueues `(monotonic ts, type, src, dest, is_dir)`.
- The fallback is watchdog's `PollingEmitter` on the root, with a listdir that prunes excluded
  dirs (`Watcher.start_polling`); the recorder (bridge/sessions/recorder.py) decides when.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from functools import partial
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

from bridge.fs.hashing import METADATA_DIR
from bridge.fs.ignore import is_excluded_dir

# Only what changes content; no IN_OPEN/IN_ACCESS/IN_CLOSE_NOWRITE, so our own reads are silent.
EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileClosedEvent,
]
#: errors of placing a watch that mean "out of watches": the recorder falls back to polling
LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE, errno.ENOMEM)


class SelectiveInotifyEmitter(InotifyEmitter):
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
                if exc.errno in LIMIT_ERRNOS:
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


class QueueingHandler(FileSystemEventHandler):
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


class Watcher:
    """One watchdog observer over a workspace root: selective inotify, or polling.

    Every event goes to `put` as `(monotonic ts, type, src, dest, is_dir)`; an error while placing
    watches from the emitter thread goes to `on_error`.
    """

    def __init__(
        self,
        root: str,
        exclude: frozenset[str],
        *,
        put: Callable[[tuple[float, str, str, str, bool]], None],
        on_error: Callable[[OSError], None],
    ) -> None:
        self._root_s = root
        self.exclude = exclude
        self._put = put
        self._on_error = on_error
        self._observer: BaseObserver | None = None
        self._emitter: SelectiveInotifyEmitter | None = None

    def allow_dir(self, path: str) -> bool:
        if path == self._root_s:
            return True
        if not path.startswith(self._root_s + os.sep):
            return False
        parts = path[len(self._root_s) + 1 :].split(os.sep)
        if parts == [METADATA_DIR]:
            return True  # watched only for the SUBMIT sentinel
        return not any(is_excluded_dir(p, self.exclude) for p in parts)

    def watched_dirs(self) -> set[str]:
        """Relative paths of directories with a kernel watch ("" = the root); empty without inotify."""
        if self._emitter is None:
            return set()
        out = set()
        for p in self._emitter.watched_paths():
            out.add("" if p == self._root_s else os.path.relpath(p, self._root_s).replace(os.sep, "/"))
        return out

    def reader_died(self) -> bool:
        """True when an inotify emitter is held but its reader thread has stopped."""
        return self._emitter is not None and not self._emitter.reader_alive()

    def start_inotify(self) -> None:
        """Watch with one selective inotify instance; OSError (e.g. LIMIT_ERRNOS) when it cannot."""
        emitter_cls = partial(SelectiveInotifyEmitter, allow_dir=self.allow_dir, on_error=self._on_error)
        obs = BaseObserver(emitter_cls, timeout=0.2)  # type: ignore[arg-type]
        obs.schedule(QueueingHandler(self._put), self._root_s, recursive=False, event_filter=EVENT_FILTER)
        try:
            obs.start()
        except OSError:
            obs.stop()
            raise
        self._observer = obs
        self._emitter = next(iter(obs.emitters))  # type: ignore[assignment]

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

    def start_polling(self, interval: float) -> None:
        emitter_cls = partial(PollingEmitter, stat=os.lstat, listdir=self._listdir)
        obs = BaseObserver(emitter_cls, timeout=interval)  # type: ignore[arg-type]
        obs.schedule(QueueingHandler(self._put), self._root_s, recursive=True)
        obs.start()
        self._observer = obs
        self._emitter = None

    def stop(self) -> None:
        """Stop the observer thread. A stopped inotify emitter stays held: its dead reader is what
        `reader_died` reports."""
        obs, self._observer = self._observer, None
        if obs is not None:
            obs.stop()
            if obs.is_alive():
                obs.join(timeout=10)

    def close(self) -> None:
        """Stop and let go of inotify: nothing watches until a `start_*`."""
        self.stop()
        self._emitter = None
