"""Tar archives crossing the sandbox boundary: building one from a host folder (copy in) and
reading one file back out of an untrusted one (copy out).

Copy in: owners normalised, mtimes fixed, symlinks stored as links and never followed, a size
cap. Copy out: exactly one regular file with a plain name, size-capped before and while
reading, nothing written to disk. Both go through the one tar helper (bridge/fs/tarball.py). Runtime-neutral: any sandbox that moves files as tar streams
(Docker's archive API does) uses these.
"""

from __future__ import annotations

import fnmatch
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from bridge.errors import ScoringError
from bridge.fs.ignore import UPSTREAM_COPY_IGNORE
from bridge.fs.tarball import read_single_file
from bridge.fs.tarpack import Stamp, add_entries, dir_member, list_tree
from bridge.scoring.sandbox.protocol import APP_GID, APP_UID

# Fixed mtime for files copied in: stable archives across runs. 2000-01-01, not the epoch,
# because zipfile and some build tools reject timestamps before 1980.
NORMALISED_MTIME = 946684800
# Names excluded at any depth when copying a tree in (upstream ignores the same set); a staged
# snapshot has already lost these and more (bridge/fs/ignore.py).
DEFAULT_EXCLUDE: tuple[str, ...] = UPSTREAM_COPY_IGNORE


class UnsafeArchiveError(ScoringError):
    """An archive fetched from a container holds something we refuse to read."""


def _excluded(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in patterns)


def build_directory_tar(
    src_dir: Path,
    dest: str,
    *,
    uid: int = APP_UID,
    gid: int = APP_GID,
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
    max_bytes: int | None = 2 * 1024**3,
) -> tempfile.SpooledTemporaryFile[bytes]:
    """A tar rooted at ``/`` holding ``dest`` and the contents of ``src_dir`` below it.

    Owners are normalised to uid/gid, mtimes to NORMALISED_MTIME, permission bits kept (exec
    bits matter for start.sh). Read through the one tar helper (bridge/fs/tarball.py): symlinks
    are stored as symlinks and never followed, no folder is entered through one; sockets,
    fifos and devices are skipped; hard links become regular files.
    """
    src = Path(src_dir)
    if not src.is_dir():
        raise ScoringError(f"not a directory: {src}")
    dest_rel = PurePosixPath(dest).relative_to("/") if dest.startswith("/") else None
    if dest_rel is None or ".." in dest_rel.parts or not dest_rel.parts:
        raise ScoringError(f"destination must be an absolute path below /: {dest}")
    plain = {p for p in exclude if not any(c in p for c in "*?[")}
    entries = list_tree(src, ignore=False, exclude=plain, skip=lambda name: _excluded(name, exclude))
    total = sum(e.size for e in entries)
    if max_bytes is not None and total > max_bytes:
        raise ScoringError(f"{src} exceeds the copy limit of {max_bytes} bytes")
    stamp = Stamp(uid=uid, gid=gid, mtime=NORMALISED_MTIME, dir_mode=lambda mode: mode | 0o700)
    out = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(dir_member(str(dest_rel), stamp=stamp))
        add_entries(tar, src, entries, prefix=str(dest_rel), stamp=stamp)  # what vanished meanwhile is left out
    out.seek(0)
    return out


def read_one_file(stream: Iterable[bytes], path: str, *, max_bytes: int) -> bytes | None:
    """The single regular file of the tar ``stream`` fetched for ``path``.

    Raises UnsafeArchiveError for anything but one regular file (symlinks, directories,
    devices, absolute or ``..`` member names), when the file exceeds ``max_bytes`` or when the
    stream exceeds it plus room for headers.
    """
    limit = max_bytes + 1024 * 1024  # tar headers and padding
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    try:
        size = 0
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise UnsafeArchiveError(f"archive of {path} exceeds {limit} bytes")
            spool.write(chunk)
        spool.seek(0)
        return read_single_file(spool, max_bytes=max_bytes, what=path, error=UnsafeArchiveError)
    finally:
        spool.close()
