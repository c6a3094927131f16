"""Packing a folder as tar members, read through the safe walker (the other half of the one tar
helper, bridge/fs/tarball.py, which unpacks).

A folder is listed with `bridge/fs/walk.py` (every folder entered fd-relative with O_NOFOLLOW, a
link stored as a link and never followed) and each file is read the same way, so a folder
swapped for a link between listing and reading is never read through. Owners, mtimes and modes
are whatever the caller stamps: a caller that hashes its archive gets the same bytes for the
same tree. File contents are streamed, never held whole.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Literal

from bridge.fs import walk as _walk
from bridge.fs.ignore import EXCLUDED_DIRS

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

Kind = Literal["dir", "file", "link", "special"]


@dataclass(frozen=True)
class Entry:
    """One thing found under a folder: its POSIX path relative to the folder and its kind."""

    rel: str
    kind: Kind
    mode: int  # permission bits
    size: int = 0
    mtime: int = 0
    linkname: str = ""


def _kind(mode: int) -> Kind:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "link" if stat.S_ISLNK(mode) else "special"


def list_tree(
    root: str | os.PathLike[str],
    *,
    ignore: bool = True,
    exclude: Iterable[str] = (),
    skip: Callable[[str], bool] | None = None,
    skipped: dict[str, str] | None = None,
) -> list[Entry]:
    """Folders, files, links and special files under `root`, sorted by path bytes (a folder
    before what it holds), listed through `walk_files_at`: no link followed, no folder entered
    through a link. `ignore`: the recorder's ignore rules (bridge/fs/ignore.py); `exclude`:
    folder names pruned wherever they are; `skip(name)`: further names left out (a folder with
    what it holds). Unreadable or too deep subtrees are named in `skipped`; what vanishes while
    it is listed is left out."""
    names = frozenset(exclude) | (EXCLUDED_DIRS if ignore else frozenset())
    root = os.path.realpath(root)  # the caller's own folder: a link there is followed, as os.walk did
    out: list[Entry] = []
    pruned: set[str] = set()
    for rel, entry, dir_fd in _walk.walk_files_at(root, names, skipped, dirs=True, ignore=ignore, specials=True):
        if pruned and any(rel.startswith(p) for p in pruned):
            continue
        if skip is not None and skip(entry.name):
            pruned.add(rel + "/")
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            kind = _kind(st.st_mode)
            link = os.readlink(entry.name, dir_fd=dir_fd) if kind == "link" else ""
        except OSError:  # gone since it was listed
            continue
        size = st.st_size if kind == "file" else 0
        out.append(Entry(rel, kind, stat.S_IMODE(st.st_mode), size, int(st.st_mtime), link))
    out.sort(key=lambda e: e.rel.encode("utf-8", "surrogateescape"))
    return out


@dataclass(frozen=True)
class Stamp:
    """How packed members are stamped: owners, a fixed mtime (None: the file's own) and the
    permission bits of each kind (None: the file's own)."""

    uid: int = 0
    gid: int = 0
    mtime: int | None = 0
    dir_mode: Callable[[int], int] | None = None
    file_mode: Callable[[int], int] | None = None


class _Exact:
    """A file object read as exactly `size` bytes: cut if it grew, zero-padded if it shrank
    since its size was taken (the tar header is already written)."""

    def __init__(self, fh: IO[bytes], size: int) -> None:
        self.fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(want) if want else b""
        data += b"\0" * (want - len(data))
        self.left -= want
        return data


@contextmanager
def _open_file(root: str | os.PathLike[str], rel: str) -> Iterator[tuple[IO[bytes], int]]:
    """A regular file below `root` opened with no link followed on the way, and its size."""
    with _walk.open_parent(root, rel) as (dir_fd, name):
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", rel)
        yield fh, st.st_size


def add_entries(
    tar: tarfile.TarFile,
    root: str | os.PathLike[str],
    entries: Iterable[Entry],
    *,
    prefix: str = "",
    stamp: Stamp = Stamp(),
) -> list[str]:
    """`entries` of `root` into `tar` under `prefix`: folders, links (as links) and files read
    through the safe walker (at most the size listed). Special files are not packed. Returns
    the files that could not be read (vanished, or swapped for a link) and were left out."""
    missed: list[str] = []
    root = os.path.realpath(root)  # as list_tree: only the caller's root is resolved
    for entry in entries:
        if entry.kind == "special":
            continue
        info = tarfile.TarInfo(f"{prefix}/{entry.rel}" if prefix else entry.rel)
        info.uid, info.gid, info.uname, info.gname = stamp.uid, stamp.gid, "", ""
        info.mtime = entry.mtime if stamp.mtime is None else stamp.mtime
        info.mode = entry.mode
        if entry.kind == "dir":
            info.type = tarfile.DIRTYPE
            info.mode = stamp.dir_mode(entry.mode) if stamp.dir_mode else entry.mode
            tar.addfile(info)
        elif entry.kind == "link":
            info.type, info.linkname = tarfile.SYMTYPE, entry.linkname
            tar.addfile(info)
        else:
            info.mode = stamp.file_mode(entry.mode) if stamp.file_mode else entry.mode
            try:
                with _open_file(root, entry.rel) as (fh, size):
                    info.size = min(size, entry.size)
                    tar.addfile(info, _Exact(fh, info.size))
            except (OSError, ValueError):
                missed.append(entry.rel)
    return missed


def dir_member(name: str, *, mode: int = 0o755, stamp: Stamp = Stamp()) -> tarfile.TarInfo:
    """A folder member (the top folder an archive's entries go under)."""
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    info.uid, info.gid, info.uname, info.gname = stamp.uid, stamp.gid, "", ""
    info.mtime = stamp.mtime or 0
    return info
