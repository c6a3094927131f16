"""Open paths beneath a root one component at a time, never following a symlink.

A workspace belongs to the agent: any directory on a path can be swapped for a symlink between
the moment the recorder was told about it and the moment it reads (`mv e e2 && ln -s /etc e`).
Resolving `root/e/shadow` with a plain `open()` would then read /etc/shadow. Here every
intermediate component is opened with O_DIRECTORY|O_NOFOLLOW relative to its parent's fd, so a
symlink anywhere on the way makes the lookup fail (ELOOP/ENOTDIR) instead of leaving the root.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from bridge.errors import PathError
from bridge.fs.ignore import EXCLUDED_DIRS, is_excluded_dir, is_ignored_file
from bridge.fs.relpath import MAX_DIR_PATH_BYTES, rel_parts

#: deeper subtrees are skipped and reported (see walk_files)
MAX_DEPTH = 256

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
    fd = os.open(os.fspath(root), DIR_FLAGS)
    try:
        for name in parts[:-1]:
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd, parts[-1]
    finally:
        os.close(fd)


def _open_under(root: str | os.PathLike[str], under: str | None) -> int:
    """fd of `root/under`, every component opened O_NOFOLLOW (OSError when one is not a real dir)."""
    fd = os.open(os.fspath(root), DIR_FLAGS)
    if not under:
        return fd
    try:
        for name in split_rel(under):
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def walk_files_at(
    root: str | os.PathLike[str],
    exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
    skipped: dict[str, str] | None = None,
    *,
    under: str | None = None,
    dirs: bool = False,
    ignore: bool = True,
    specials: bool = False,
) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    """Yield (relative POSIX path, DirEntry, fd of its directory) for every recorded file or
    symlink under `root` (or `root/under`; paths are then relative to it).

    Every directory is opened relative to its parent's fd with O_NOFOLLOW at the moment it is
    entered, so a directory swapped for a symlink after it was listed is never entered (the
    swap makes the open fail; the subtree is left out). The DirEntry and the fd are valid until
    the consumer asks for the next item: read with `dir_fd=fd`, never by path. Excluded
    directories are pruned, ignored names skipped (bridge/fs/ignore.py), sockets, fifos and
    devices skipped. Subtrees too deep or too long for PATH_MAX, or unreadable, are left out and
    reported in `skipped` (relative dir -> reason). With `dirs`, directories are yielded too.
    Without `ignore`, nothing is pruned or skipped by name (only `exclude`'s folder names are):
    a folder brought back whole (bridge/fs/tarball.py). With `specials`, sockets, fifos and
    devices are yielded as well, for callers that name what they leave out.
    """
    try:
        fd = _open_under(root, under)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the root (or a component of `under`) is a symlink now
            return
        if skipped is not None:
            skipped[under or "."] = exc.strerror or type(exc).__name__
        return
    yield from _walk_dir(fd, "", exclude, skipped, _Yield(dirs, ignore, specials))


class _Yield:
    """What a walk yields besides recorded files (see walk_files_at)."""

    __slots__ = ("dirs", "ignore", "specials")

    def __init__(self, dirs: bool, ignore: bool, specials: bool) -> None:
        self.dirs, self.ignore, self.specials = dirs, ignore, specials


def _walk_dir(
    fd: int, rel_dir: str, exclude: frozenset[str] | set[str], skipped: dict[str, str] | None, what: _Yield
) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    try:
        try:
            with os.scandir(fd) as it:
                entries = list(it)
        except OSError as exc:  # EACCES...: report, never crash a submit
            if skipped is not None:
                skipped[rel_dir.rstrip("/") or "."] = exc.strerror or type(exc).__name__
            return
        for entry in entries:
            rel = f"{rel_dir}{entry.name}"
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and (what.specials or entry.is_file(follow_symlinks=False) or entry.is_symlink())
            except OSError:
                continue
            if is_dir:
                if entry.name in exclude or (what.ignore and is_excluded_dir(entry.name, exclude)):
                    continue
                sub_rel = rel + "/"
                if (
                    len(sub_rel.encode("utf-8", "surrogateescape")) > MAX_DIR_PATH_BYTES
                    or sub_rel.count("/") > MAX_DEPTH
                ):
                    if skipped is not None:
                        skipped[rel] = "path too long or too deep (limit PATH_MAX)"
                    continue
                try:
                    sub = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    if exc.errno != errno.ELOOP and skipped is not None:  # ELOOP: swapped for a link
                        skipped[rel] = exc.strerror or type(exc).__name__
                    continue
                if what.dirs:
                    yield rel, entry, fd
                yield from _walk_dir(sub, sub_rel, exclude, skipped, what)
                continue
            if is_file and not (what.ignore and is_ignored_file(entry.name)):
                yield rel, entry, fd
    finally:
        os.close(fd)


def read_at(dir_fd: int, name: str) -> bytes:
    """Content of a regular file `name` in `dir_fd`, never through a symlink."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        return fh.read()


def sha256_at(dir_fd: int, name: str) -> str:
    """SHA-256 of a regular file `name` in `dir_fd`, streamed, never through a symlink."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def copy_tree_at(
    src: str | os.PathLike[str], dest: str | os.PathLike[str], exclude: frozenset[str] | set[str] = EXCLUDED_DIRS
) -> int:
    """Copy the recorded files of `src` into a new folder `dest`; returns the number of files.

    Reads go through `walk_files_at` (fd-relative, O_NOFOLLOW): symlinks are copied as links and
    never followed, a directory swapped for a link is never entered, special files are left out,
    and the ignore rules are the recorder's. Permission bits are kept (exec bits matter).
    """
    dest_s = os.fspath(dest)
    os.makedirs(dest_s, mode=0o755)
    count = 0
    for rel, entry, dir_fd in walk_files_at(src, exclude, dirs=True):
        target = os.path.join(dest_s, *rel.split("/"))
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(target, 0o700)
                os.chmod(target, stat.S_IMODE(st.st_mode) | 0o700)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(entry.name, dir_fd=dir_fd), target)
                count += 1
            else:
                fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
                with os.fdopen(fd, "rb") as fin:
                    if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
                        continue
                    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                    with os.fdopen(out, "wb") as fout:
                        while chunk := fin.read(1 << 20):
                            fout.write(chunk)
                        os.fchmod(fout.fileno(), stat.S_IMODE(st.st_mode))
                count += 1
        except (FileNotFoundError, NotADirectoryError) as exc:
            if exc.filename and os.fsdecode(exc.filename).startswith(dest_s):
                raise
            continue  # vanished from the source since it was listed
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # swapped for a link since it was listed: not followed
                continue
            raise
    return count


def walk_sorted_at(
    root: str | os.PathLike[str], *, prune_root: frozenset[str] = frozenset()
) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    """Every non-directory entry under `root` (files, symlinks, special files), with no ignore
    rules, in `os.walk` order (a folder's names sorted, then its sub-folders sorted), for digests
    whose order is part of a format (integrity.json). Folders are entered fd-relative with
    O_NOFOLLOW; a symlink is yielded as an entry, never followed. `prune_root`: top-level
    folder names left out."""
    try:
        fd = os.open(os.fspath(root), DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return
    yield from _walk_sorted(fd, "", prune_root)


def _walk_sorted(fd: int, rel_dir: str, prune: frozenset[str]) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    try:
        with os.scandir(fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        subdirs = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if not (rel_dir == "" and entry.name in prune):
                    subdirs.append(entry.name)
                continue
            yield f"{rel_dir}{entry.name}", entry, fd
        for name in subdirs:
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # swapped for a link since it was listed: not entered
                    continue
                raise
            yield from _walk_sorted(sub, f"{rel_dir}{name}/", frozenset())
    finally:
        os.close(fd)


def digest_at(entry: os.DirEntry[str], dir_fd: int) -> str:
    """`sha256` of a regular file, `symlink:<sha256 of target>` of a link, `special:<mode>`
    otherwise (a fifo or device is never opened)."""
    st = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return "symlink:" + hashlib.sha256(os.fsencode(os.readlink(entry.name, dir_fd=dir_fd))).hexdigest()
    if not stat.S_ISREG(st.st_mode):
        return f"special:{stat.S_IFMT(st.st_mode):o}"
    return sha256_at(dir_fd, entry.name)
