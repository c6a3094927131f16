"""Seal a recording: compute and write `integrity.json` (docs/recording-format.md §6).

`seal_recording` writes `integrity.json`: SHA-256 of session.json, events.jsonl and every other
file of the recording (results, logs, index), a hash chain over the lines of events.jsonl (with
marks every `CHAIN_MARK_EVERY` lines, so a change is located), and for the shadow store its refs,
a SHA-256 per non-object file and a digest over all object files. Checking a recording against
its seal and its own content is `bridge/recording/verify.py`.

The seal detects after-the-fact edits made without rewriting integrity.json; it is not a
signature (anyone who can write the folder can re-seal it). Keep `seal_digest()` elsewhere, or
pack the recording and keep the archive's hash, when that matters.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from bridge.fs.files import write_json_atomic
from bridge.fs.walk import digest_at, walk_sorted_at
from bridge.recording.clock import iso, utcnow
from bridge.release import exact_version

INTEGRITY_NAME = "integrity.json"
INTEGRITY_VERSION = 1
CHAIN_MARK_EVERY = 64
CHAIN_SEED = b"rgbridge-events-chain-v1"
#: process-local files that are never part of a recording's content
#: files of the process holding a live session (bridge/sessions/ownership.py): never sealed or packed
OWNER_LOCK = "owner.lock"
OWNER_PID = "owner.pid"
PROCESS_LOCAL = frozenset({OWNER_LOCK, OWNER_PID})
VOLATILE = frozenset({INTEGRITY_NAME}) | PROCESS_LOCAL


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _is_volatile_store_file(rel: str) -> bool:
    # ShadowStore's temporary index files and loose-object temp files
    name = rel.rsplit("/", 1)[-1]
    return (rel.startswith("rgbridge/index.") or name.startswith(".tmp-")) and not rel.startswith("objects/pack")


def recording_files(rec_dir: Path) -> dict[str, str]:
    """relative path -> sha256 of every file outside store/ (session.json, events, results, ...)."""
    out: dict[str, str] = {}
    # fd-relative, O_NOFOLLOW (bridge/fs/walk.py): a folder swapped for a link is never read through
    for rel, entry, dir_fd in walk_sorted_at(rec_dir, prune_root=frozenset({"store"})):
        if rel in VOLATILE or (rel.startswith("results/") and entry.name.endswith(".tmp")):
            continue
        try:
            digest = digest_at(entry, dir_fd)
        except FileNotFoundError:
            continue
        if not digest.startswith("special:"):  # as before: only files and links are listed
            out[rel] = digest
    return dict(sorted(out.items()))


def store_digest(store: Path) -> dict[str, Any]:
    """Refs, per-file hashes of the store's non-object files, and one digest over its objects."""
    from bridge.recording.reader import StoreReader

    files: dict[str, str] = {}
    obj = hashlib.sha256()
    count = 0
    for rel, entry, dir_fd in walk_sorted_at(store):  # os.walk order: the objects digest depends on it
        if _is_volatile_store_file(rel):
            continue
        try:
            digest = digest_at(entry, dir_fd)
        except FileNotFoundError:
            continue
        if rel.startswith("objects/"):
            obj.update(f"{rel}\0{digest}\n".encode())
            count += 1
        else:
            files[rel] = digest
    refs = StoreReader(store).refs() if (store / "objects").is_dir() else {}
    return {"refs": refs, "files": dict(sorted(files.items())), "objects": {"count": count, "digest": obj.hexdigest()}}


def events_chain(path: Path) -> dict[str, Any]:
    """Hash chain over the raw lines of events.jsonl: h_i = sha256(h_{i-1} || line_i)."""
    h = hashlib.sha256(CHAIN_SEED).digest()
    marks: dict[str, str] = {}
    lines = 0
    last_seq = 0
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.rstrip(b"\n")
            h = hashlib.sha256(h + line).digest()
            lines += 1
            if lines % CHAIN_MARK_EVERY == 0:
                marks[str(lines)] = h.hex()
            try:
                seq = json.loads(line).get("seq")
                if isinstance(seq, int):
                    last_seq = seq
            except (ValueError, AttributeError, UnicodeDecodeError):
                pass
    return {"lines": lines, "last_seq": last_seq, "head": h.hex(), "mark_every": CHAIN_MARK_EVERY, "marks": marks}


def compute_seal(rec_dir: Path) -> dict[str, Any]:
    rec_dir = Path(rec_dir)
    from bridge.recording.reader import load_meta

    meta = load_meta(rec_dir)
    return {
        "integrity_version": INTEGRITY_VERSION,
        "format_version": meta.format_version,
        "session_id": meta.session_id,
        "bridge_version": exact_version(),
        "files": recording_files(rec_dir),
        "events": events_chain(rec_dir / "events.jsonl"),
        "store": store_digest(rec_dir / "store"),
    }


def seal_recording(rec_dir: Path | str, *, index: bool = True) -> Path:
    """Write integrity.json for the recording as it is now (and results/index.json first).

    Call it whenever a session stops changing its recording: after a result (or a scoring
    failure) is written, and after quit. Re-sealing later (rescore, curve) is expected.
    """
    rec_dir = Path(rec_dir)
    if index and (rec_dir / "results").is_dir():
        from bridge.recording.results import write_index

        write_index(rec_dir)
    data = compute_seal(rec_dir)
    data["sealed_at"] = iso(utcnow())
    path = rec_dir / INTEGRITY_NAME
    write_json_atomic(path, data)
    return path


def seal_digest(rec_dir: Path | str) -> str:
    """SHA-256 of integrity.json: one value that pins the whole sealed recording."""
    return _sha256_file(Path(rec_dir) / INTEGRITY_NAME)


def try_seal(rec_dir: Path | str) -> str | None:
    """Seal for the live session (session.py hook): never raises; returns the error text, if any."""
    try:
        seal_recording(rec_dir)
    except Exception as exc:  # a failed seal must never fail a scoring job or a quit
        return f"{type(exc).__name__}: {exc}"
    return None
