"""The one tar helper: unpacking a hostile archive within limits (packing: bridge/fs/tarpack.py).

Unpacking assumes the archive was made by somebody else. Every member is checked before anything
is written: its name by the one path validator (bridge/fs/relpath.py: no absolute path, `..`,
empty or `.` part, NUL or backslash, PATH_MAX), its kind (folders, regular files and, when the
caller keeps them, symlinks that stay inside; never hard links, devices, fifos or sparse files),
duplicates, and the limits below. Members are then written below a held directory fd, every
folder opened with O_NOFOLLOW and every file created O_EXCL|O_NOFOLLOW, so nothing is written
through a link, even one the archive itself made. Compressed input (gzip, bzip2, xz) is read as
a stream and refused past `Limits.max_ratio` expanded bytes per packed byte.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import posixpath
import shutil
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bridge.errors import BridgeError
from bridge.fs import walk as _walk
from bridge.fs.anchor import descend
from bridge.fs.relpath import check_layout, rel_parts

_CHUNK = 1 << 20
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ArchiveError(BridgeError):
    """An archive is unreadable, holds a member that is refused, or passes a limit."""


@dataclass(frozen=True)
class Limits:
    """What one archive may hold. Past any of these the whole archive is refused."""

    #: members of any kind (headers read)
    max_members: int = 200_000
    #: one regular file's declared size
    max_file_bytes: int = 512 << 20
    #: all regular files together
    max_total_bytes: int = 4 << 30
    #: expanded tar bytes per compressed byte (deflate tops out near 1032:1; real trees of
    #: text stay far below 100:1), checked once `ratio_floor` expanded bytes have been read
    max_ratio: int = 500
    ratio_floor: int = 64 << 20


DEFAULT_LIMITS = Limits()

# ----------------------------------------------------------------------------- reading


_Stream = gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile
_MAGIC: tuple[tuple[bytes, Callable[[IO[bytes]], _Stream]], ...] = (
    (b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
    (b"BZh", lambda raw: bz2.BZ2File(raw, mode="rb")),
    (b"\xfd7zXZ\x00", lambda raw: lzma.LZMAFile(raw, mode="rb")),
)


@contextmanager
def open_archive(
    source: str | os.PathLike[str] | IO[bytes], *, error: type[BridgeError] = ArchiveError
) -> Iterator[tuple[tarfile.TarFile, Callable[[], tuple[int, int]]]]:
    """A tar (plain or compressed) read from a path or a seekable binary file, and a function
    giving (bytes packed read, bytes expanded) so far for the ratio check."""
    opened = isinstance(source, str | os.PathLike)
    try:
        raw: IO[bytes] = open(source, "rb") if opened else source  # type: ignore[arg-type,assignment]  # noqa: SIM115
    except OSError as exc:
        raise error(f"{source}: cannot read the archive ({exc.strerror or exc})") from None
    try:
        stream: IO[bytes] | _Stream = raw
        start = raw.tell()
        head = raw.read(6)
        raw.seek(start)
        for magic, opener in _MAGIC:
            if head.startswith(magic):
                stream = opener(raw)
                break
        try:
            tar = tarfile.open(fileobj=stream, mode="r:")
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise error(f"{_label(source)}: not a readable archive ({exc})") from None
        with tar:
            yield tar, lambda: (raw.tell() - start, tar.offset)
    finally:
        if stream is not raw:
            stream.close()
        if opened:
            raw.close()


def _label(source: object) -> str:
    return str(source) if isinstance(source, str | os.PathLike) else "archive"


_DAMAGED = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError)


def _what(member: tarfile.TarInfo) -> str:
    if member.islnk():
        return "hardlink"
    if member.issym():
        return "symlink"
    if member.ischr() or member.isblk():
        return "device file"
    if member.isfifo():
        return "fifo"
    return f"type {member.type!r}"


def _link_inside(parts: list[str], linkname: str) -> bool:
    """Whether a symlink at `parts` pointing at `linkname` stays inside the archive's folder."""
    if not linkname or linkname.startswith("/") or "\0" in linkname:
        return False
    target = posixpath.normpath(posixpath.join(*parts[:-1], linkname) if parts[:-1] else linkname)
    return target != ".." and not target.startswith("../")


@dataclass
class Plan:
    """The members an archive will write, each with its checked path components."""

    members: list[tuple[tarfile.TarInfo, list[str]]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    total: int = 0


def scan(
    tar: tarfile.TarFile,
    progress: Callable[[], tuple[int, int]],
    *,
    limits: Limits = DEFAULT_LIMITS,
    links: bool = False,
    strict: bool = True,
    error: type[BridgeError] = ArchiveError,
    label: str = "archive",
) -> Plan:
    """Check every member (names, kinds, links, duplicates, limits). A refused member raises
    `error` when `strict`, else it is named in `Plan.refused` and left out. Limits always raise."""
    plan, seen = Plan(), set()

    def refuse(name: str, why: str) -> None:
        if strict:
            raise error(f"archive member {name!r}: {why}")
        plan.refused.append(name)

    try:
        for count, member in enumerate(tar, 1):
            _check_limits(count, progress, limits, error, label)
            try:
                parts = rel_parts(member.name.removesuffix("/"), what="archive member", error=error)
            except BridgeError:
                if strict:
                    raise
                plan.refused.append(member.name)
                continue
            if not (member.isdir() or member.isreg() or (member.issym() and links)):
                refuse(member.name, f"{_what(member)} refused")
                continue
            if member.issym() and not _link_inside(parts, member.linkname):
                refuse(member.name, f"symlink to {member.linkname!r} leads outside the archive's folder")
                continue
            if member.isreg() and member.sparse:
                refuse(member.name, "sparse file refused")
                continue
            key = "/".join(parts)
            if key in seen:
                refuse(member.name, "duplicate entry refused")
                continue
            seen.add(key)
            if member.isreg():
                if member.size > limits.max_file_bytes:
                    raise error(
                        f"archive member {member.name!r}: {member.size} bytes exceeds the "
                        f"{limits.max_file_bytes}-byte file cap"
                    )
                plan.total += member.size
                if plan.total > limits.max_total_bytes:
                    raise error(f"{label}: contents exceed the {limits.max_total_bytes}-byte cap (refused)")
            plan.members.append((member, parts))
        _check_limits(0, progress, limits, error, label)
    except _DAMAGED as exc:
        raise error(f"{label}: damaged archive ({exc})") from None
    if strict:
        check_layout(
            ["/".join(p) for m, p in plan.members if not m.isdir()],
            ["/".join(p) for m, p in plan.members if m.isdir()],
            what="archive member",
            error=error,
        )
    return plan


def _check_limits(
    count: int, progress: Callable[[], tuple[int, int]], limits: Limits, error: type[BridgeError], label: str
) -> None:
    if count > limits.max_members:
        raise error(f"{label}: more than {limits.max_members} members (refused)")
    packed, expanded = progress()
    if expanded > limits.ratio_floor and expanded > limits.max_ratio * max(packed, 1):
        raise error(
            f"{label}: expands more than {limits.max_ratio} times its packed size "
            f"({expanded} bytes from {packed}; a compression bomb?): refused"
        )


# ----------------------------------------------------------------------------- unpacking


@dataclass(frozen=True)
class Unpacked:
    """What an unpack wrote, and the members it left out (lenient unpacks only)."""

    files: int
    bytes: int
    refused: list[str]


def unpack(
    source: str | os.PathLike[str] | IO[bytes],
    dest: str | os.PathLike[str],
    *,
    limits: Limits = DEFAULT_LIMITS,
    links: bool = False,
    strict: bool = True,
    strip: int = 0,
    fresh: bool = True,
    error: type[BridgeError] = ArchiveError,
    check: Callable[[Plan], None] | None = None,
) -> Unpacked:
    """Unpack an untrusted archive into `dest`.

    `links`: symlinks staying inside `dest` are kept (else refused). `strict`: any refused
    member refuses the whole archive before anything is written, and a failure while writing
    removes what was written; otherwise refused members are left out and named. `strip`: leading
    path components dropped (a recording's top folder). `fresh`: `dest` must be new or empty
    (else files already there are replaced, never written through). `check`: the caller's own
    checks of the plan, before writing. Limits and damage always raise `error`.
    """
    out = Path(os.path.abspath(dest))
    if fresh and (out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir())))):
        raise error(f"{dest}: must be a new or empty directory")
    label = _label(source)
    with open_archive(source, error=error) as (tar, progress):
        plan = scan(tar, progress, limits=limits, links=links, strict=strict, error=error, label=label)
        if check is not None:
            check(plan)
        existed = out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
            root_fd = os.open(out, _walk.DIR_FLAGS)
        except OSError as exc:
            raise error(f"cannot unpack into {dest}: {exc.strerror or exc}") from None
        try:
            files, written_links = _write_all(tar, plan, root_fd, strip=strip, strict=strict, fresh=fresh, error=error)
            _links_stay_inside(out, written_links, plan, strict=strict, error=error)
        except BaseException as exc:
            if fresh and strict:
                _clear(out, existed)
            if isinstance(exc, OSError):
                where = f" ({os.fsdecode(exc.filename)!r})" if exc.filename else ""
                raise error(f"cannot unpack into {dest}: {exc.strerror or exc}{where}") from None
            if isinstance(exc, _DAMAGED):
                raise error(f"{label}: damaged archive ({exc})") from None
            raise
        finally:
            os.close(root_fd)
    return Unpacked(files, plan.total, plan.refused)


#: errors that mean "this member would go through or over something": a lenient unpack skips it
_CLASH = (errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.EISDIR)


def _write_all(
    tar: tarfile.TarFile, plan: Plan, root_fd: int, *, strip: int, strict: bool, fresh: bool, error: type[BridgeError]
) -> tuple[int, list[tuple[str, list[str]]]]:
    files, written_links = 0, []
    for member, parts in plan.members:
        rel = parts[strip:]
        if not rel:
            if member.isdir():
                continue
            raise error(f"archive member {member.name!r}: a file as the top folder")
        try:
            files += _write_one(tar, member, rel, root_fd, replace=not fresh, error=error)
        except OSError as exc:
            if strict or exc.errno not in _CLASH:
                raise
            plan.refused.append(member.name)
            continue
        if member.issym():
            written_links.append((member.name, rel))
    return files, written_links


def _links_stay_inside(
    out: Path, links: list[tuple[str, list[str]]], plan: Plan, *, strict: bool, error: type[BridgeError]
) -> None:
    """Each link written, resolved as it now stands, leads inside `out`: links that are inside one
    by one can still chain out (`b -> .`, `a -> b/..`); such a link is removed and refused."""
    root = os.path.realpath(out)
    for name, rel in links:
        path = os.path.join(root, *rel)
        real = os.path.realpath(path)
        if real != root and not real.startswith(root + os.sep):
            os.unlink(path)
            if strict:
                raise error(f"archive member {name!r}: symlink leads outside the archive's folder")
            plan.refused.append(name)


def _write_one(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    rel: list[str],
    root_fd: int,
    *,
    replace: bool,
    error: type[BridgeError],
) -> int:
    """Write one member below `root_fd` (parents created, none followed if a link); 1 for a file."""
    parent = descend(root_fd, rel[:-1])
    name = rel[-1]
    try:
        if member.isdir():
            with _suppress_exists():
                os.mkdir(name, 0o700, dir_fd=parent)
            fd = os.open(name, _walk.DIR_FLAGS, dir_fd=parent)  # ELOOP/ENOTDIR if not a real folder
            try:
                os.fchmod(fd, (member.mode & 0o755) | 0o700)
            finally:
                os.close(fd)
            return 0
        if replace:
            _unlink_file(parent, name)
        if member.issym():
            os.symlink(member.linkname, name, dir_fd=parent)
            return 0
        src = tar.extractfile(member)
        if src is None:
            raise error(f"archive member {member.name!r}: unreadable")
        fd = os.open(name, _WRITE_FLAGS, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as dst:
            written = 0
            while chunk := src.read(_CHUNK):
                written += len(chunk)
                if written > member.size:
                    raise error(f"archive member {member.name!r}: longer than declared")
                dst.write(chunk)
            os.fchmod(dst.fileno(), (member.mode & 0o755) | 0o600)
            if member.mtime > 0:
                os.utime(dst.fileno(), (member.mtime, member.mtime))
        return 1
    finally:
        os.close(parent)


@contextmanager
def _suppress_exists() -> Iterator[None]:
    try:
        yield
    except FileExistsError:
        pass  # the O_NOFOLLOW open that follows decides


def _unlink_file(dir_fd: int, name: str) -> None:
    """Remove a file or link `name` (never a folder, never followed) so it can be written anew."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)


def _clear(root: Path, existed: bool) -> None:
    """Undo a failed unpack: an existing (empty) destination is left empty, a new one removed."""
    if not existed:
        shutil.rmtree(root, ignore_errors=True)
        return
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink()


def read_single_file(
    fileobj: IO[bytes], *, max_bytes: int, what: str, error: type[BridgeError] = ArchiveError
) -> bytes | None:
    """The content of the one regular file, with a plain one-part name, a tar holds; `error`
    for anything else (several members, a link, a folder, a device, an unsafe name, too big)."""
    with open_archive(fileobj, error=error) as (tar, progress):
        try:
            members = []
            for member in tar:
                members.append(member)
                _check_limits(len(members), progress, Limits(max_members=16), error, what)
        except _DAMAGED as exc:
            raise error(f"{what}: unreadable archive ({exc})") from None
        if len(members) != 1:
            raise error(f"{what}: expected one file, archive has {len(members)} members")
        (member,) = members
        try:
            parts = rel_parts(member.name, what="archive member", error=error)
        except BridgeError:
            raise error(f"{what}: unsafe member name {member.name!r}") from None
        if len(parts) != 1:
            raise error(f"{what}: unsafe member name {member.name!r}")
        if not member.isreg():
            raise error(f"{what} is not a regular file ({_what(member) if not member.isdir() else 'a folder'})")
        if member.size > max_bytes:
            raise error(f"{what} is {member.size} bytes (limit {max_bytes})")
        try:
            fh = tar.extractfile(member)
            return fh.read(max_bytes + 1)[:max_bytes] if fh else None
        except _DAMAGED as exc:
            raise error(f"{what}: unreadable archive ({exc})") from None
