"""The Linux-only system calls of the session layer, in one place, with one fallback: every call
raises `Unsupported` (an OSError) when the platform is not Linux or the kernel refuses it, and
its caller records the gap and goes on (no golden watch, a plain 0700 scratch folder).

- `not_dumpable`: `prctl(PR_SET_DUMPABLE, 0)`, so other processes of the user cannot open this
  one's `/proc/<pid>/mem`, `fd/` or `root/` (the server and the scoring process hold golden files);
- `mount_private_tmpfs`: a private mount namespace (`unshare`, in a user namespace when not root)
  with a tmpfs over a folder, seen by no other process (bridge/sessions/score_process.py);
- `inotify_init`, `inotify_add_watch`: the golden-folder watch (bridge/sessions/contamination.py).

Calls go through ctypes to the C library, as prctl(2), unshare(2), mount(2) and inotify(7)
document them; the constants are those of the kernel's headers.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import sys
import threading
from pathlib import Path

# linux/sched.h, linux/mount.h, linux/prctl.h
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
_MNT_DETACH = 0x2
_PR_SET_DUMPABLE = 4

# inotify(7) (linux/inotify.h)
IN_ACCESS = 0x00000001
IN_OPEN = 0x00000020
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000


class Unsupported(OSError):
    """A Linux-only call is not available here: not Linux, or the kernel refused it."""


def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise Unsupported(f"Linux-only (platform {sys.platform})")
    return _load_libc()


@functools.cache  # one handle on the C library per process
def _load_libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise Unsupported(err, f"{what}: {os.strerror(err)}")
    return result


def not_dumpable() -> None:
    """Other processes of this user can no longer read this one's memory or open its fds (best
    effort: nothing happens where the call is not available)."""
    with contextlib.suppress(OSError, AttributeError):
        _check(_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl")


def mount_private_tmpfs(folder: Path) -> None:
    """Move this process into a private mount namespace and mount a 0700 tmpfs on `folder`:
    what is written there is seen by this process and its children only, and is gone when they
    end. Needs a single-threaded process (unshare(2)); root, or unprivileged user namespaces."""
    libc = _libc()
    if threading.active_count() != 1:
        raise Unsupported("the process is not single-threaded")
    if libc.unshare(_CLONE_NEWNS) != 0:  # root (CAP_SYS_ADMIN); else an unprivileged user namespace
        uid, gid = os.getuid(), os.getgid()
        _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
        try:
            Path("/proc/self/setgroups").write_text("deny", encoding="ascii")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1", encoding="ascii")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1", encoding="ascii")
        except OSError as exc:
            raise Unsupported(exc.errno, f"user namespace id maps: {exc.strerror}") from exc
    # nothing mounted from here on propagates back to the host's namespace
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0700"), "mount")


def unmount(folder: Path) -> None:
    """Detach what is mounted on `folder` (best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().umount2(os.fsencode(folder), _MNT_DETACH)


def inotify_init() -> int:
    """A new non-blocking, close-on-exec inotify descriptor."""
    return _check(_libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC), "inotify_init1")


def inotify_add_watch(fd: int, folder: Path, mask: int) -> int:
    """A watch on `folder` for `mask`; OSError with the call's errno when it fails."""
    wd = _libc().inotify_add_watch(fd, os.fsencode(folder), mask)
    if wd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(folder))
    return int(wd)
