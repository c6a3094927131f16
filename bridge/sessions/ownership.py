"""Which process holds a session: an exclusive `flock` on `<recording>/owner.lock`, taken before
the session's log is opened and kept while the session is live in this process.

The kernel drops the lock when its holder exits, however it exits, so a crashed server never
leaves a session that looks held, and a recycled pid never makes a dead owner look alive (a pid
file can do neither). `owner.pid` is still written beside it, for people reading the folder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

from bridge.errors import SessionError
from bridge.recording.integrity import OWNER_LOCK as LOCK_NAME
from bridge.recording.integrity import OWNER_PID as PID_NAME

# recordings this process holds (realpath → lock): a second flock from this process on another
# descriptor of the same file would block against our own lock
_held: dict[str, OwnerLock] = {}
_held_guard = threading.Lock()


def _open_lock(recording_dir: Path, flags: int) -> int:
    # never through a symlink: the lock file is created in the recording folder itself
    return os.open(recording_dir / LOCK_NAME, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


class OwnerLock:
    """This process's hold on one recording folder."""

    def __init__(self, recording_dir: Path, fd: int) -> None:
        self.dir = recording_dir
        self._fd: int | None = fd

    @classmethod
    def take(cls, recording_dir: Path) -> OwnerLock | None:
        """Hold the recording, or None when another process (or this one) holds it already."""
        key = os.path.realpath(recording_dir)
        with _held_guard:
            if key in _held:
                return None
            try:
                fd = _open_lock(recording_dir, os.O_RDWR | os.O_CREAT)
            except OSError as exc:
                raise SessionError(f"{recording_dir}: cannot open {LOCK_NAME}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return None
                raise SessionError(f"{recording_dir}: cannot lock {LOCK_NAME}: {exc.strerror or exc}") from None
            lock = cls(recording_dir, fd)
            _held[key] = lock
        try:
            (recording_dir / PID_NAME).write_text(str(os.getpid()), encoding="ascii")
        except OSError:
            pass  # informational only
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the recording up (idempotent)."""
        with _held_guard:
            if self._fd is None:
                return
            try:
                if (self.dir / PID_NAME).read_text(encoding="ascii").strip() == str(os.getpid()):
                    (self.dir / PID_NAME).unlink()
            except (OSError, ValueError):
                pass
            _held.pop(os.path.realpath(self.dir), None)
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the flock


def held_elsewhere(recording_dir: Path) -> bool:
    """Whether another live process holds the recording (probed without taking it)."""
    with _held_guard:
        if os.path.realpath(recording_dir) in _held:
            return False
    try:
        fd = _open_lock(recording_dir, os.O_RDONLY)
    except OSError:
        return False  # no lock file: never held by a bridge that locks
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # also drops the shared lock if it was taken
    return False
