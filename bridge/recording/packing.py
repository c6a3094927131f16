"""Pack a recording into one deterministic .tar.gz, and unpack archives treated as hostile.

Packing: members sorted by path under one top folder (the recording's name), regular files and
directories only (a recording holds no links, devices or fifos: packing refuses them), mtime 0,
uid/gid 0, empty owner names, modes normalised (dirs 0755, files 0644), PAX format, gzip with
mtime 0 and no file name. The same recording packs to the same bytes every time.
Process-local files (`owner.pid`, `owner.lock`) and the store's temporary files are left out.

Unpacking assumes the archive was made by somebody else (bridge/fs/tarball.py, the one tar
helper: names by the one path validator, no links, devices or fifos, no duplicates, member-count,
per-file, total and expansion-ratio caps, every member checked before anything is written, then
written fd-relative with O_EXCL|O_NOFOLLOW into a fresh empty directory); here only what makes
it a recording: one top folder holding `session.json`.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import RecordingError
from bridge.fs.tarball import Limits, Plan, unpack
from bridge.fs.tarpack import Entry, Stamp, add_entries, dir_member, list_tree
from bridge.recording.integrity import PROCESS_LOCAL

MAX_MEMBERS = 200_000
MAX_FILE_BYTES = 512 * 1024 * 1024
MAX_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
_SKIP_ROOT_FILES = PROCESS_LOCAL
#: a recording's members are stamped alike whatever the disk says: the same recording packs to
#: the same bytes
_STAMP = Stamp(uid=0, gid=0, mtime=0, dir_mode=lambda _m: 0o755, file_mode=lambda _m: 0o644)


def _skip(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    if rel in _SKIP_ROOT_FILES:
        return True
    if rel.startswith("store/rgbridge/index.") or (rel.startswith("store/objects/") and name.startswith(".tmp-")):
        return True
    return name.endswith(".tmp") and name.startswith(".")


def _members(rec_dir: Path) -> list[Entry]:
    """What the archive holds, listed through the safe walker (no link followed, no folder
    entered through one); anything but files and folders, or a subtree the walk could not
    enter, refuses the pack."""
    if not os.path.isdir(rec_dir) or os.path.islink(rec_dir):
        raise RecordingError(f"cannot pack {rec_dir}: not a folder")
    skipped: dict[str, str] = {}
    entries = list_tree(rec_dir, ignore=False, skipped=skipped)
    for rel, why in sorted(skipped.items()):
        raise RecordingError(f"cannot pack {rec_dir}: {rel}: {why}")
    for entry in entries:
        if entry.kind == "link":
            raise RecordingError(f"cannot pack {rec_dir}: {entry.rel} is a symlink (recordings hold none)")
        if entry.kind == "special":
            raise RecordingError(f"cannot pack {rec_dir}: {entry.rel} is not a regular file")
    return [e for e in entries if e.kind == "dir" or not _skip(e.rel)]


def pack_recording(rec_dir: Path | str, out_file: Path | str) -> Path:
    """Write the recording as a deterministic gzip'd tar at `out_file`; returns its path."""
    rec_dir = Path(rec_dir)
    if not (rec_dir / "session.json").is_file():
        raise RecordingError(f"{rec_dir}: not a recording (no session.json)")
    out_file = Path(out_file)
    if out_file.resolve().is_relative_to(rec_dir.resolve()):
        raise RecordingError(f"the archive {out_file} must not be written inside the recording")
    top = rec_dir.resolve().name
    members = _members(rec_dir)
    tmp = out_file.with_name(f".{out_file.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                tar.addfile(dir_member(top, stamp=_STAMP))
                missed = add_entries(tar, rec_dir, members, prefix=top, stamp=_STAMP)
        if missed:
            raise RecordingError(f"cannot pack {rec_dir}: {missed[0]}: gone or swapped for a link while packing")
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


def _is_recording(archive: Path) -> Callable[[Plan], None]:
    def check(plan: Plan) -> None:
        tops = {parts[0] for _m, parts in plan.members}
        if not tops:
            raise RecordingError(f"{archive}: empty archive")
        first = plan.members[0][1][0]
        stray = next((m for m, parts in plan.members if parts[0] != first), None)
        if stray is not None:
            raise RecordingError(f"archive member {stray.name!r}: outside the top folder {first!r}")
        if not any(parts == [first, "session.json"] and m.isreg() for m, parts in plan.members):
            raise RecordingError(f"{archive}: no {first}/session.json: not a recording archive")

    return check


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
    limits = Limits(max_members=max_members, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    done = unpack(archive, out, limits=limits, strip=1, error=RecordingError, check=_is_recording(archive))
    return UnpackResult(out, done.files, done.bytes)
