"""What an attempt run on a Ray node sends back to the driver, and how the driver takes it in.

The recordings: each session folder packed as `rgbridge recordings pack` packs it, with the
archive's SHA-256 and its seal's digest; on arrival the hash is checked, the archive unpacked as
a hostile one (bridge/recording/packing.py) and the recording verified against its seal.
The attempt folder (workspace, the agent's HOME and TMPDIR, its stream): a tar, capped, packed
and unpacked by the one tar helper (bridge/fs/tarball.py; the agent's files are untrusted: a
link out of the folder is dropped).
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError
from bridge.fs.tarball import unpack
from bridge.fs.tarpack import Stamp, add_entries, list_tree

#: what one attempt folder may bring back (the agent's stream and state first, then the
#: workspace, its HOME, its TMPDIR); files past the cap are named in `ray.json`, not copied
MAX_FOLDER_BYTES = 256 << 20
#: an attempt's recordings are evidence: past this the attempt is an infra_error, not cut
MAX_RECORDING_BYTES = 512 << 20
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _rank(rel: str) -> int:
    top = rel.split("/", 1)[0]
    return {"agent": 0, "state.json": 0, "workspace": 1, "home": 2, "tmp": 3}.get(top, 4)


def pack_folder(folder: Path, cap: int = MAX_FOLDER_BYTES) -> tuple[bytes, list[str]]:
    """An attempt folder as an uncompressed tar (relative paths; folders, regular files and
    links as links, never followed; listed and read through the safe walker, bridge/fs/tarball.py,
    with no ignore rule: the folder comes back whole); files that would pass `cap` bytes in all
    are left out and named (the agent's stream and state come first, then workspace, HOME,
    TMPDIR), as are fifos, sockets and devices. The agent is gone, but a scoring job's clean-up
    may still remove its temporary files from TMPDIR: what vanishes while packing is left out,
    never an error."""
    skipped: dict[str, str] = {}
    entries = list_tree(folder, ignore=False, skipped=skipped)
    left_out = sorted(skipped)
    chosen: set[str] = set()
    total = 0
    for entry in sorted(entries, key=lambda e: (_rank(e.rel), e.rel)):
        if entry.kind == "file":
            if total + entry.size > cap:
                left_out.append(entry.rel)
                continue
            total += entry.size
            chosen.add(entry.rel)
        elif entry.kind == "special":
            left_out.append(entry.rel)  # fifos, sockets, devices: nothing to copy
        else:
            chosen.add(entry.rel)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        left_out += add_entries(tar, folder, [e for e in entries if e.rel in chosen], stamp=Stamp(mtime=None))
    return buf.getvalue(), left_out


def unpack_folder(data: bytes, dest: Path) -> list[str]:
    """Unpack `pack_folder` output into `dest` (new). The archive crossed the network and holds
    an agent's files: members refused by the one tar helper (absolute paths, `..`, links out of
    `dest` or files through a link, hard links, devices) are left out and named in the result
    instead of failing the attempt; its limits (bridge/fs/tarball.py) refuse the whole archive."""
    if dest.exists():
        raise BridgeError(f"{dest}: exists; an attempt folder is unpacked into a new folder")
    return unpack(io.BytesIO(data), dest, links=True, strict=False).refused


def pack_recordings(rec_dir: Path, root: Path) -> list[dict[str, Any]]:
    """Each session folder of the attempt packed as `rgbridge recordings pack` packs it, with
    the archive's SHA-256 and the seal's digest for the checks on arrival."""
    from bridge.recording.integrity import INTEGRITY_NAME, seal_digest
    from bridge.recording.packing import pack_recording

    out: list[dict[str, Any]] = []
    total = 0
    if not rec_dir.is_dir():
        return out
    for session in sorted(p for p in rec_dir.iterdir() if (p / "session.json").is_file()):
        archive = pack_recording(session, root / f"{session.name}.tar.gz")
        data = archive.read_bytes()
        archive.unlink()
        total += len(data)
        if total > MAX_RECORDING_BYTES:
            raise BridgeError(f"the attempt's recordings pass {MAX_RECORDING_BYTES} bytes packed")
        sealed = (session / INTEGRITY_NAME).is_file()
        out.append(
            {
                "sid": session.name,
                "archive": data,
                "sha256": hashlib.sha256(data).hexdigest(),
                "seal": seal_digest(session) if sealed else None,
            }
        )
    return out


def receive_recording(rec_dir: Path, rec: dict[str, Any]) -> None:
    """One recording into the run folder: archive hash, safe unpack, seal verified."""
    from bridge.recording.integrity import seal_digest
    from bridge.recording.packing import unpack_recording
    from bridge.recording.verify import verify_recording

    sid = str(rec["sid"])
    if not _SESSION_ID.match(sid):
        raise BridgeError(f"a recording named {sid!r} came back: refused")
    data = rec["archive"]
    if hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise BridgeError(f"recording {sid} arrived damaged (archive hash differs)")
    target = rec_dir / sid
    rec_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(prefix="rgbridge-rec-", suffix=".tar.gz") as tmp:
        tmp.write(data)
        tmp.flush()
        unpack_recording(tmp.name, target)
    report = verify_recording(target)
    if not report.ok or (rec["seal"] and seal_digest(target) != rec["seal"]):
        shutil.rmtree(target, ignore_errors=True)
        problems = "; ".join(report.problems[:3]) or "seal digest differs"
        raise BridgeError(f"recording {sid} failed verification on arrival: {problems}")
