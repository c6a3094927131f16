"""A workspace held open as a directory fd from the moment it is checked.

Checking a path and then using it by name races an agent that swaps a folder on that path for a
symlink in between (issue 8, opening 5: a session started on an outside folder). Here the
workspace is opened once, every component from `/` with O_DIRECTORY|O_NOFOLLOW (missing ones
created the same way), the bridge writes its seed files through that fd, and `still_at` tells
whether the path still leads, symlink-free, to the same directory (st_dev, st_ino).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from bridge.errors import PathError
from bridge.fs.walk import DIR_FLAGS, split_rel


def _walk(path: Path, *, create: bool) -> int:
    if not path.is_absolute():
        raise PathError(f"workspace {path} must be absolute")
    rel = str(path).strip("/")
    top = os.open("/", DIR_FLAGS)
    try:
        return descend(top, split_rel(rel) if rel else [], create=create)
    finally:
        os.close(top)


def open_workspace(path: Path, *, create: bool = True) -> int:
    """An O_DIRECTORY fd of `path`, no component of which may be a symlink; PathError otherwise."""
    try:
        return _walk(Path(path), create=create)
    except ValueError as exc:
        raise PathError(f"workspace {path} is not a directory path ({exc})") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathError(
                f"workspace {path}: a folder on the path is a symlink or not a directory "
                "(it may have changed while the session was starting)"
            ) from None
        raise PathError(f"workspace {path}: {exc.strerror or exc}") from None


def identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def identity_at(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the folder `path` leads to without following symlinks, or None."""
    try:
        fd = _walk(Path(path), create=False)
    except (OSError, ValueError, PathError):
        return None
    try:
        return identity(fd)
    finally:
        os.close(fd)


def still_at(fd: int, path: Path) -> bool:
    """Whether `path`, walked without following symlinks, is still the directory held by `fd`."""
    return identity_at(path) == identity(fd)


def is_empty(fd: int, ignored: frozenset[str] | set[str]) -> bool:
    return all(name in ignored for name in os.listdir(fd))


def descend(dir_fd: int, names: list[str], *, create: bool = True) -> int:
    """A new fd of `names` below `dir_fd` (missing folders created when `create`), each opened
    O_DIRECTORY|O_NOFOLLOW: a symlink anywhere fails with ELOOP/ENOTDIR instead of being followed."""
    fd = os.dup(dir_fd)
    try:
        for name in names:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass  # existing (or created meanwhile): the O_NOFOLLOW open decides
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_new(dir_fd: int, rel: str, data: bytes, *, mode: int = 0o644) -> bool:
    """Create `rel` below `dir_fd` (parents too) without following any symlink; False if it exists."""
    parts = split_rel(rel)
    fd = descend(dir_fd, parts[:-1])
    try:
        try:
            out = os.open(
                parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd
            )
        except FileExistsError:
            return False
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
        return True
    finally:
        os.close(fd)


def replace_file(dir_fd: int, rel: str, data: bytes) -> None:
    """Write `rel` below `dir_fd` atomically (temp + rename in the same held folder)."""
    parts = split_rel(rel)
    tmp = f".{parts[-1]}.{os.getpid()}.tmp"
    fd = descend(dir_fd, parts[:-1])
    try:
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        if not write_new(fd, tmp, data):
            raise PathError(f"cannot write {rel}: its temporary file exists")
        os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
