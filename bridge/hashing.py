"""Content hashing of workspace files and trees (exclusion rules: bridge/fs/ignore.py)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator

# The ignore rules live in bridge/fs/ignore.py (one definition); re-exported for callers here.
from bridge.fs.ignore import (  # noqa: F401
    EXCLUDED_DIR_SUFFIXES,
    EXCLUDED_DIRS,
    is_excluded_dir,
    is_ignored_file,
    is_recorded_rel,
    is_temp_file,
)

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


# A subtree whose paths would not fit in PATH_MAX (4096 on Linux, root included) cannot be read
# by path at all; it is skipped and reported instead of raising ENAMETOOLONG mid-submit.
MAX_REL_PATH_BYTES = 3000
MAX_DEPTH = 256


def walk_files(
    root: str | os.PathLike[str],
    exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
    skipped: dict[str, str] | None = None,
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Yield (relative POSIX path, DirEntry) for every recorded file or symlink under root.

    Excluded directories are pruned (never listed), temp names skipped, symlinks to
    directories are yielded as links and not followed; sockets, fifos and devices are skipped.
    Subtrees too deep or too long to read, or unreadable, are left out and, when `skipped` is
    given, reported there (relative dir -> reason).
    """
    root_s = os.fspath(root)
    stack: list[tuple[str, str]] = [(root_s, "")]
    while stack:
        abs_dir, rel_dir = stack.pop()
        if rel_dir and (
            len(rel_dir.encode("utf-8", "surrogateescape")) > MAX_REL_PATH_BYTES or rel_dir.count("/") > MAX_DEPTH
        ):
            if skipped is not None:
                skipped[rel_dir.rstrip("/")] = "path too long or too deep (limit PATH_MAX)"
            continue
        try:
            it = os.scandir(abs_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # ENAMETOOLONG, EACCES, ELOOP...: report, never crash a submit
            if skipped is not None:
                skipped[rel_dir.rstrip("/") or "."] = exc.strerror or type(exc).__name__
            continue
        with it:
            for entry in it:
                rel = f"{rel_dir}{entry.name}"
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not is_excluded_dir(entry.name, exclude):
                            stack.append((entry.path, rel + "/"))
                        continue
                    if not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                        continue
                except OSError:
                    continue
                if is_ignored_file(entry.name):
                    continue
                yield rel, entry


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
    for rel, entry in walk_files(root, exclude):
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                digest = sha256_bytes(os.fsencode(os.readlink(entry.path)))
            else:
                if max_file_bytes is not None and st.st_size > max_file_bytes:
                    continue
                digest = sha256_file(entry.path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        triples.append((rel, mode_of(st), digest))
    return tree_hash_from_entries(triples)

