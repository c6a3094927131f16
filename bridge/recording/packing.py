"""Pack a recording into one deterministic .tar.gz, and unpack archives treated as hostile.

Packing: members sorted by path under one top folder (the recording's name), regular files and
directories only (a recording holds no links, devices or fifos: packing refuses them), mtime 0,
uid/gid 0, empty owner names, modes normalised (dirs 0755, files 0644), PAX format, gzip with
mtime 0 and no file name. The same recording packs to the same bytes every time.
Process-local files (`owner.pid`, `owner.lock`) and the store's temporary files are left out.

Unpacking assumes the archive was made by somebody else: every member is checked before
anything is written (one top folder; relative paths without `..`, empty or `.` parts, NUL or
backslashes; only regular files and directories; no links of any kind, devices or fifos; no
duplicates; member-count, per-file and total size caps), then written with O_EXCL|O_NOFOLLOW
into a fresh empty directory, and each target's resolved path is re-checked to be inside it.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import RecordingError
from bridge.fs.relpath import check_layout, rel_parts
from bridge.fs.walk import DIR_FLAGS, open_parent, read_at
from bridge.recording.integrity import PROCESS_LOCAL

MAX_MEMBERS = 200_000
MAX_FILE_BYTES = 512 * 1024 * 1024
MAX_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
_SKIP_ROOT_FILES = PROCESS_LOCAL


def _skip(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    if rel in _SKIP_ROOT_FILES:
        return True
    if rel.startswith("store/rgbridge/index.") or (rel.startswith("store/objects/") and name.startswith(".tmp-")):
        return True
    return name.endswith(".tmp") and name.startswith(".")


def _walk(rec_dir: Path) -> list[tuple[str, bool]]:
    """(relative path, is_dir), sorted; refuses anything but files and dirs. Every folder is
    entered relative to its parent's fd with O_NOFOLLOW (bridge/fs/walk.py), so a folder swapped
    for a link after it was listed is refused, never read through."""
    out: list[tuple[str, bool]] = []

    def visit(fd: int, rel_dir: str) -> None:
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                rel = f"{rel_dir}{entry.name}"
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise RecordingError(f"cannot pack {rec_dir}: {rel} is a symlink (recordings hold none)")
                if stat.S_ISDIR(st.st_mode):
                    out.append((rel, True))
                    try:
                        sub = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise RecordingError(
                            f"cannot pack {rec_dir}: {rel}: {exc.strerror} (swapped for a link?)"
                        ) from None
                    visit(sub, rel + "/")
                elif stat.S_ISREG(st.st_mode):
                    if not _skip(rel):
                        out.append((rel, False))
                else:
                    raise RecordingError(f"cannot pack {rec_dir}: {rel} is not a regular file")
        finally:
            os.close(fd)

    try:
        root_fd = os.open(rec_dir, DIR_FLAGS)
    except OSError as exc:
        raise RecordingError(f"cannot pack {rec_dir}: {exc.strerror}") from None
    visit(root_fd, "")
    out.sort(key=lambda t: t[0].encode("utf-8", "surrogateescape"))
    return out


def _read(rec_dir: Path, rel: str) -> bytes:
    """A member's bytes, read with no symlink component followed."""
    try:
        with open_parent(rec_dir, rel) as (dir_fd, name):
            return read_at(dir_fd, name)
    except (OSError, ValueError) as exc:
        raise RecordingError(f"cannot pack {rec_dir}: {rel}: {getattr(exc, 'strerror', None) or exc}") from None


def _info(name: str, *, is_dir: bool, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir else 0o644
    info.size = 0 if is_dir else size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack_recording(rec_dir: Path | str, out_file: Path | str) -> Path:
    """Write the recording as a deterministic gzip'd tar at `out_file`; returns its path."""
    rec_dir = Path(rec_dir)
    if not (rec_dir / "session.json").is_file():
        raise RecordingError(f"{rec_dir}: not a recording (no session.json)")
    out_file = Path(out_file)
    if out_file.resolve().is_relative_to(rec_dir.resolve()):
        raise RecordingError(f"the archive {out_file} must not be written inside the recording")
    top = rec_dir.resolve().name
    members = _walk(rec_dir)
    tmp = out_file.with_name(f".{out_file.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                tar.addfile(_info(top, is_dir=True))
                for rel, is_dir in members:
                    name = f"{top}/{rel}"
                    if is_dir:
                        tar.addfile(_info(name, is_dir=True))
                        continue
                    data = _read(rec_dir, rel)  # read once: size and content agree even if it changes
                    tar.addfile(_info(name, is_dir=False, size=len(data)), io.BytesIO(data))
        os.replace(tmp, out_file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out_file


@dataclass(frozen=True)
class UnpackResult:
    recording: Path
    files: int
    bytes: int


def _check_name(name: str) -> list[str]:
    return rel_parts(name.removesuffix("/"), what="archive member", error=RecordingError)


def unpack_recording(
    archive: Path | str,
    out_dir: Path | str,
    *,
    max_members: int = MAX_MEMBERS,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> UnpackResult:
    """Extract an archive made by `pack_recording` into `out_dir` (new or empty): the recording
    lands at `out_dir` itself. Anything unexpected refuses the whole archive before writing."""
    archive = Path(archive)
    out = Path(os.path.abspath(out_dir))
    if out.exists() and (not out.is_dir() or out.is_symlink() or any(out.iterdir())):
        raise RecordingError(f"{out_dir}: must be a new or empty directory")
    try:
        tar = tarfile.open(archive, mode="r:*")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise RecordingError(f"{archive}: not a readable archive ({exc})") from None
    with tar:
        plan: list[tuple[tarfile.TarInfo, list[str]]] = []
        seen: set[str] = set()
        total = 0
        top: str | None = None
        try:
            for member in tar:
                if len(plan) >= max_members:
                    raise RecordingError(f"{archive}: more than {max_members} members (refused)")
                parts = _check_name(member.name)
                kind = "directory" if member.isdir() else "file" if member.isreg() else None
                if kind is None:
                    what = (
                        "symlink"
                        if member.issym()
                        else "hardlink"
                        if member.islnk()
                        else "device file"
                        if (member.ischr() or member.isblk())
                        else "fifo"
                        if member.isfifo()
                        else f"type {member.type!r}"
                    )
                    raise RecordingError(f"archive member {member.name!r}: {what} refused (recordings hold only files)")
                if member.isreg() and getattr(member, "sparse", None):
                    raise RecordingError(f"archive member {member.name!r}: sparse file refused")
                if top is None:
                    top = parts[0]
                if parts[0] != top:
                    raise RecordingError(f"archive member {member.name!r}: outside the top folder {top!r}")
                key = "/".join(parts)
                if key in seen:
                    raise RecordingError(f"archive member {member.name!r}: duplicate entry refused")
                seen.add(key)
                if member.isreg():
                    if member.size > max_file_bytes:
                        raise RecordingError(
                            f"archive member {member.name!r}: {member.size} bytes exceeds the "
                            f"{max_file_bytes}-byte file cap"
                        )
                    total += member.size
                    if total > max_total_bytes:
                        raise RecordingError(f"{archive}: contents exceed the {max_total_bytes}-byte cap (refused)")
                plan.append((member, parts))
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise RecordingError(f"{archive}: damaged archive ({exc})") from None
        if top is None:
            raise RecordingError(f"{archive}: empty archive")
        if f"{top}/session.json" not in seen:
            raise RecordingError(f"{archive}: no {top}/session.json: not a recording archive")
        check_layout(
            ["/".join(p) for m, p in plan if not m.isdir()],
            ["/".join(p) for m, p in plan if m.isdir()],
            what="archive member",
            error=RecordingError,
        )

        existed = out.exists()
        out.mkdir(parents=True, exist_ok=True)
        root = os.path.realpath(out)
        files = 0
        try:
            for member, parts in plan:
                rel = parts[1:]
                target = os.path.join(root, *rel) if rel else root
                parent = os.path.dirname(target) if rel else root
                real_parent = os.path.realpath(parent) if os.path.exists(parent) else None
                if real_parent is not None and real_parent != root and not real_parent.startswith(root + os.sep):
                    raise RecordingError(f"archive member {member.name!r}: resolves outside {out_dir}")
                if member.isdir():
                    if rel:
                        os.makedirs(target, mode=0o755, exist_ok=True)
                        if os.path.islink(target) or not os.path.realpath(target).startswith(root + os.sep):
                            raise RecordingError(f"archive member {member.name!r}: resolves outside {out_dir}")
                    continue
                if not rel:
                    raise RecordingError(f"archive member {member.name!r}: a file as the top folder")
                os.makedirs(parent, mode=0o755, exist_ok=True)
                real_parent = os.path.realpath(parent)
                if real_parent != root and not real_parent.startswith(root + os.sep):
                    raise RecordingError(f"archive member {member.name!r}: resolves outside {out_dir}")
                src = tar.extractfile(member)
                if src is None:
                    raise RecordingError(f"archive member {member.name!r}: unreadable")
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                written = 0
                with os.fdopen(fd, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > member.size:
                            raise RecordingError(f"archive member {member.name!r}: longer than declared")
                        dst.write(chunk)
                files += 1
        except OSError as exc:  # e.g. a name the destination file system refuses: an error, not a traceback
            _clear(root, existed)
            where = f" ({os.fsdecode(exc.filename)!r})" if exc.filename else ""
            raise RecordingError(f"cannot unpack into {out_dir}: {exc.strerror or exc}{where}") from None
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            _clear(root, existed)
            raise RecordingError(f"{archive}: damaged archive ({exc})") from None
        except BaseException:
            _clear(root, existed)
            raise
    return UnpackResult(out, files, total)


def _clear(root: str, existed: bool) -> None:
    """Undo a failed unpack: an existing (empty) destination is left empty, a new one removed."""
    if existed:
        for child in Path(root).iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink()
    else:
        shutil.rmtree(root, ignore_errors=True)
