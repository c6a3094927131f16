"""Disk used by the attempt's folders, polled: the `workspace_bytes` limit.

Every folder is opened relative to its parent with O_NOFOLLOW (bridge/fs/walk.py's flags): a
symlink planted by the agent is counted as the link, never followed out of the attempt. Blocks
allocated are counted (a sparse file costs what it holds), hard links once.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from bridge.fs.walk import DIR_FLAGS, MAX_DEPTH

POLL_SECONDS = 1.5


def _usage_at(fd: int, seen: set[tuple[int, int]], depth: int) -> int:
    total = 0
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
            try:
                sub = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                total += _usage_at(sub, seen, depth + 1)
            finally:
                os.close(sub)
    return total


def disk_usage(roots: Iterable[Path]) -> int:
    """Bytes allocated under `roots` together (symlinks not followed, hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in roots:
        try:
            fd = os.open(root, DIR_FLAGS)
        except OSError:
            continue
        try:
            total += _usage_at(fd, seen, 0)
        finally:
            os.close(fd)
    return total


class DiskWatch:
    """A thread that measures `roots` every POLL_SECONDS (longer for a tree slow to walk) and
    sets `hit` past `limit` bytes."""

    def __init__(self, roots: Iterable[Path], limit: int) -> None:
        self.roots = tuple(roots)
        self.limit = limit
        self.hit = threading.Event()
        self.used = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rgbridge-disk-watch")

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.used = disk_usage(self.roots)
            if self.used > self.limit:
                self.hit.set()
                return
            # a large tree (node_modules) is walked less often: at most a fifth of the time
            self._stop.wait(max(POLL_SECONDS, 4 * (time.monotonic() - started)))
