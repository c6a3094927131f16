"""Tar archives crossing the sandbox boundary: building one from a host folder (copy in) and
reading one file back out of an untrusted one (copy out).

Copy in: owners normalised, mtimes fixed, symlinks stored as links and never followed, a size
cap. Copy out: exactly one regular file with a plain name, size-capped before and while
reading, nothing written to disk. Runtime-neutral: any sandbox that moves files as tar streams
(Docker's archive API does) uses these.
"""

from __future__ import annotations

import fnmatch
import os
import stat as _stat
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from bridge.errors import ScoringError
from bridge.fs.ignore import UPSTREAM_COPY_IGNORE
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


def _dir_info(arcname: str, mode: int, uid: int, gid: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.type, info.mode = tarfile.DIRTYPE, mode
    info.uid, info.gid, info.mtime = uid, gid, NORMALISED_MTIME
    return info


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
    bits matter for start.sh). Symlinks are stored as symlinks and never followed; sockets,
    fifos and devices are skipped; hard links become regular files.
    """
    src = Path(src_dir)
    if not src.is_dir():
        raise ScoringError(f"not a directory: {src}")
    dest_rel = PurePosixPath(dest).relative_to("/") if dest.startswith("/") else None
    if dest_rel is None or ".." in dest_rel.parts or not dest_rel.parts:
        raise ScoringError(f"destination must be an absolute path below /: {dest}")
    out = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)
    total = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_dir_info(str(dest_rel), 0o755, uid, gid))
        for root, dirs, files in os.walk(src, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not _excluded(d, exclude))
            rel_root = Path(root).relative_to(src)
            for d in list(dirs):
                st = os.lstat(os.path.join(root, d))
                arc = str(dest_rel / PurePosixPath(*rel_root.parts, d))
                if _stat.S_ISLNK(st.st_mode):  # os.walk lists dir symlinks under dirs
                    dirs.remove(d)
                    files.append(d)
                    continue
                tar.addfile(_dir_info(arc, _stat.S_IMODE(st.st_mode) | 0o700, uid, gid))
            for f in sorted(files):
                if _excluded(f, exclude):
                    continue
                path = os.path.join(root, f)
                st = os.lstat(path)
                info = tarfile.TarInfo(str(dest_rel / PurePosixPath(*rel_root.parts, f)))
                info.uid, info.gid, info.mtime = uid, gid, NORMALISED_MTIME
                info.mode = _stat.S_IMODE(st.st_mode)
                if _stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                    tar.addfile(info)
                elif _stat.S_ISREG(st.st_mode):
                    info.size = st.st_size
                    total += st.st_size
                    if max_bytes is not None and total > max_bytes:
                        raise ScoringError(f"{src} exceeds the copy limit of {max_bytes} bytes")
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
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
        with tarfile.open(fileobj=spool, mode="r:") as tar:
            members = tar.getmembers()
            if len(members) != 1:
                raise UnsafeArchiveError(f"{path}: expected one file, archive has {len(members)} members")
            m = members[0]
            name = PurePosixPath(m.name)
            if name.is_absolute() or ".." in name.parts or len(name.parts) != 1:
                raise UnsafeArchiveError(f"{path}: unsafe member name {m.name!r}")
            if not m.isreg():
                raise UnsafeArchiveError(f"{path} is not a regular file")
            if m.size > max_bytes:
                raise UnsafeArchiveError(f"{path} is {m.size} bytes (limit {max_bytes})")
            fh = tar.extractfile(m)
            return fh.read(max_bytes + 1)[:max_bytes] if fh else None
    except tarfile.TarError as exc:
        raise UnsafeArchiveError(f"{path}: unreadable archive ({exc})") from exc
    finally:
        spool.close()
