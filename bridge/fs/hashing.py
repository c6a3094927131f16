"""Content hashing of workspace files and trees (exclusion rules: bridge/fs/ignore.py)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator

from bridge.fs import walk as _walk

# The ignore rules live in bridge/fs/ignore.py (one definition).
from bridge.fs.ignore import (
    EXCLUDED_DIRS,
)
from bridge.fs.relpath import MAX_DIR_PATH_BYTES

# Our metadata folder inside the workspace; `.rgbridge/SUBMIT` is the completion sentinel.
METADATA_DIR = ".rgbridge"
SENTINEL_NAME = "SUBMIT"
SENTINEL_REL = f"{METADATA_DIR}/{SENTINEL_NAME}"

# Git-compatible modes: the recording only distinguishes plain, executable and symlink.
MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000

_CHUNK = 1 << 20


def mode_of(st: os.stat_result) -> int:
    """Git-style mode of a stat result (exec bit from the owner, as git does)."""
    if stat.S_ISLNK(st.st_mode):
        return MODE_LINK
    return MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_FILE


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a regular file's content (does not follow a final symlink's target for links:
    callers hash links by their target text, see `tree_hash`)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# Walks are fd-relative with O_NOFOLLOW (bridge/fs/walk.py); PATH_MAX limits live there too.
MAX_DEPTH = _walk.MAX_DEPTH
MAX_REL_PATH_BYTES = MAX_DIR_PATH_BYTES  # a folder deeper than this is skipped


def walk_files(
    root: str | os.PathLike[str],
    exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
    skipped: dict[str, str] | None = None,
    *,
    under: str | None = None,
) -> Iterator[tuple[str, WalkEntry]]:
    """(relative POSIX path, entry) for every recorded file or symlink: `walk_files_at` without
    the directory fd. The entry's `stat()` works until the next item; its `path` is the joined
    path (for callers that report it; readers inside the bridge read with `walk_files_at`)."""
    base = os.fspath(root) if not under else os.path.join(os.fspath(root), *under.split("/"))
    for rel, entry, _fd in _walk.walk_files_at(root, exclude, skipped, under=under):
        yield rel, WalkEntry(entry, os.path.join(base, *rel.split("/")))


class WalkEntry:
    """A DirEntry from an fd-relative listing (whose own `path` is only its name) with `path`
    set to the joined path."""

    __slots__ = ("_entry", "name", "path")

    def __init__(self, entry: os.DirEntry[str], path: str) -> None:
        self._entry, self.name, self.path = entry, entry.name, path

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return self._entry.stat(follow_symlinks=follow_symlinks)

    def is_symlink(self) -> bool:
        return self._entry.is_symlink()

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._entry.is_file(follow_symlinks=follow_symlinks)

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._entry.is_dir(follow_symlinks=follow_symlinks)


def tree_hash_from_entries(entries: Iterable[tuple[str, int, str]]) -> str:
    """Stable hash over (relative POSIX path, git mode, content sha256) triples.

    One line per file, sorted by path bytes: `<mode octal> <sha256> <path>\\n`, hashed with SHA-256.
    """
    h = hashlib.sha256()
    for rel, mode, digest in sorted(entries, key=lambda e: e[0].encode("utf-8", "surrogateescape")):
        h.update(f"{mode:o} {digest} ".encode())
        h.update(rel.encode("utf-8", "surrogateescape"))
        h.update(b"\n")
    return h.hexdigest()


def tree_hash(
    root: str | os.PathLike[str],
    exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
    *,
    max_file_bytes: int | None = None,
) -> str:
    """Hash of a directory tree as recorded: paths, exec modes and contents (links by target text).

    Files larger than `max_file_bytes` (when given) are left out, as the manifest does.
    """
    triples: list[tuple[str, int, str]] = []
    for rel, entry, dir_fd in _walk.walk_files_at(root, exclude):
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                digest = sha256_bytes(os.fsencode(os.readlink(entry.name, dir_fd=dir_fd)))
            else:
                if max_file_bytes is not None and st.st_size > max_file_bytes:
                    continue
                digest = _walk.sha256_at(dir_fd, entry.name)
        except OSError:  # gone, or swapped for a link or a special file since it was listed
            continue
        triples.append((rel, mode_of(st), digest))
    return tree_hash_from_entries(triples)
