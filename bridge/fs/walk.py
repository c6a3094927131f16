"""Open paths beneath a root one component at a time, never following a symlink.

A workspace belongs to the agent: any directory on a path can be swapped for a symlink between
the moment the recorder was told about it and the moment it reads (`mv e e2 && ln -s /etc e`).
Resolving `root/e/shadow` with a plain `open()` would then read /etc/shadow. Here every
intermediate component is opened with O_DIRECTORY|O_NOFOLLOW relative to its parent's fd, so a
symlink anywhere on the way makes the lookup fail (ELOOP/ENOTDIR) instead of leaving the root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from bridge.errors import PathError
from bridge.fs.relpath import rel_parts

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split_rel(rel: str) -> list[str]:
    """Components of a relative POSIX path (bridge/fs/relpath.py rules); ValueError when unclean."""
    try:
        return rel_parts(rel)
    except PathError as exc:
        raise ValueError(str(exc)) from None


@contextmanager
def open_parent(root: str | os.PathLike[str], rel: str) -> Iterator[tuple[int, str]]:
    """(fd of the directory holding `rel`, last component); every directory is opened O_NOFOLLOW.

    Raises OSError (ELOOP/ENOTDIR/ENOENT) when any component on the way is not a real directory.
    """
    parts = split_rel(rel)
    fd = os.open(os.fspath(root), _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd, parts[-1]
    finally:
        os.close(fd)
