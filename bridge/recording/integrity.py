"""Seal a recording and verify it later (`integrity.json`, docs/recording-format.md §6).

`seal_recording` writes `integrity.json`: SHA-256 of session.json, events.jsonl and every other
file of the recording (results, logs, index), a hash chain over the lines of events.jsonl (with
marks every `CHAIN_MARK_EVERY` lines, so a change is located), and for the shadow store its refs,
a SHA-256 per non-object file and a digest over all object files.

`verify_recording` recomputes all of that AND cross-checks the content, which also works on an
unsealed recording: event seqs contiguous and times monotonic; every file event's content present
in the store with the right SHA-256; every checkpoint commit present, its tree hashing to the
event's tree_hash, and the file events since the previous checkpoint adding up to it; the
submission commit, ref, submit event and session.json agreeing; each result's snapshot_hash
equal to the tree hash of the moment it scored.

The seal detects after-the-fact edits made without rewriting integrity.json; it is not a
signature (anyone who can write the folder can re-seal it). Keep `seal_digest()` elsewhere, or
pack the recording and keep the archive's hash, when that matters.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bridge import __version__
from bridge.errors import BridgeError, RecordingError
from bridge.fs.files import write_json_atomic
from bridge.fs.hashing import sha256_bytes, tree_hash_from_entries
from bridge.fs.ignore import UPSTREAM_COPY_IGNORE
from bridge.fs.walk import digest_at, walk_sorted_at
from bridge.recording.clock import iso, parse_iso, utcnow

INTEGRITY_NAME = "integrity.json"
INTEGRITY_VERSION = 1
CHAIN_MARK_EVERY = 64
_CHAIN_SEED = b"rgbridge-events-chain-v1"
#: process-local files that are never part of a recording's content
VOLATILE = frozenset({INTEGRITY_NAME, "owner.pid"})
#: records a finished session may still append (a client polling get_result, a server stopping);
#: appended after an intact sealed prefix they are reported as a warning, anything else fails
APPENDABLE = frozenset({"mcp_call", "log_opened", "detach"})
#: before the recorder and the engine shared one rule set (bridge/fs/ignore.py) the engine staged a
#: snapshot without upstream's list only; results scored then are still checked against that
_STAGE_IGNORE = (*UPSTREAM_COPY_IGNORE, ".rgbridge")


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
    h = hashlib.sha256(_CHAIN_SEED).digest()
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
        "bridge_version": __version__,
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


# ----------------------------------------------------------------------------- verification


@dataclass
class VerifyReport:
    ok: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sealed: bool = False
    checked: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _compare_seal(rec_dir: Path, sealed: dict[str, Any], problems: list[str], warnings: list[str]) -> None:
    now_files = recording_files(rec_dir)
    old_files = sealed.get("files") or {}
    for rel in sorted(set(old_files) | set(now_files)):
        if rel == "events.jsonl":
            continue  # the chain below says where
        if rel not in now_files:
            problems.append(f"{rel}: removed after sealing")
        elif rel not in old_files:
            problems.append(f"{rel}: added after sealing")
        elif old_files[rel] != now_files[rel]:
            problems.append(f"{rel}: changed after sealing")

    ev_path = rec_dir / "events.jsonl"
    old_chain = sealed.get("events") or {}
    if ev_path.is_file():
        chain = events_chain(ev_path)
        if chain["head"] != old_chain.get("head") or chain["lines"] != old_chain.get("lines"):
            message, benign = _locate_event_change(ev_path, old_chain, chain)
            (warnings if benign else problems).append(message)
    elif "events.jsonl" in old_files:
        problems.append("events.jsonl: removed after sealing")

    old_store = sealed.get("store") or {}
    now_store = store_digest(rec_dir / "store")
    old_refs, now_refs = old_store.get("refs") or {}, now_store["refs"]
    problems.extend(_compare_digests(old_refs, now_refs, "ref ", show_values=True))
    old_sf, now_sf = old_store.get("files") or {}, now_store["files"]
    problems.extend(
        _compare_digests(
            {k: v for k, v in old_sf.items() if not _is_ref_file(k)},  # refs are reported above
            {k: v for k, v in now_sf.items() if not _is_ref_file(k)},
            "",
        )
    )
    old_obj, now_obj = old_store.get("objects") or {}, now_store["objects"]
    if old_obj.get("digest") != now_obj["digest"]:
        problems.append(
            f"store/objects: object files changed after sealing ({old_obj.get('count')} sealed, {now_obj['count']} now)"
        )
    if sealed.get("integrity_version") not in (None, INTEGRITY_VERSION):
        warnings.append(f"integrity.json version {sealed.get('integrity_version')} is not {INTEGRITY_VERSION}")


def _locate_event_change(path: Path, old: dict[str, Any], now: dict[str, Any]) -> tuple[str, bool]:
    """Where events.jsonl differs from its seal, and whether the change is benign (only
    `APPENDABLE` records appended after an intact sealed prefix: e.g. get_result polls)."""
    every = int(old.get("mark_every") or CHAIN_MARK_EVERY)
    old_marks = old.get("marks") or {}
    old_lines = int(old.get("lines") or 0)
    # Replay the chain; the first mark that differs bounds the first altered line.
    h = hashlib.sha256(_CHAIN_SEED).digest()
    n = 0
    appended: list[bytes] = []
    with open(path, "rb") as fh:
        for raw in fh:
            if n >= old_lines:
                appended.append(raw)
                continue
            h = hashlib.sha256(h + raw.rstrip(b"\n")).digest()
            n += 1
            if n % every == 0 and str(n) in old_marks and old_marks[str(n)] != h.hex():
                return f"events.jsonl: altered after sealing (first difference in lines {n - every + 1}–{n})", False
            if n == old_lines and h.hex() != old.get("head"):
                lo = (n - 1) // every * every + 1
                return f"events.jsonl: altered after sealing (first difference in lines {lo}–{n})", False
    if n < old_lines:
        return f"events.jsonl: truncated after sealing ({old_lines} lines sealed, {n} now)", False
    types: list[str] = []
    for raw in appended:
        try:
            types.append(str(json.loads(raw).get("type")))
        except (ValueError, AttributeError, UnicodeDecodeError):
            types.append("(unparsable)")
    kinds = ", ".join(sorted(set(types)))
    benign = all(t in APPENDABLE for t in types)
    return (f"events.jsonl: {len(appended)} line(s) appended after sealing (after line {old_lines}: {kinds})", benign)


def _staged_hash(entries: list[tuple[str, int, str]]) -> str:
    """The engine's snapshot hash of a tree: it stages without upstream's ignore list."""

    def kept(path: str) -> bool:
        return not any(fnmatch.fnmatch(part, pat) for part in path.split("/") for pat in _STAGE_IGNORE)

    return tree_hash_from_entries(e for e in entries if kept(e[0]))


def _check_content(rec_dir: Path, problems: list[str], warnings: list[str], checked: dict[str, int]) -> None:
    from bridge.recording.moments import FileState, apply_file_event
    from bridge.recording.reader import FILE_EVENTS, open_recording
    from bridge.recording.results import list_results

    try:
        rec = open_recording(rec_dir)
    except BridgeError as exc:
        problems.append(str(exc))
        return
    if rec.bad_lines:
        warnings.append(f"events.jsonl: {rec.bad_lines} unparsable line(s) skipped (a crash mid-write leaves one)")
    # seqs and times
    prev_seq, prev_t = 0, None
    t: datetime | None
    for ev in rec.events:
        seq = ev["seq"]
        if seq != prev_seq + 1:
            problems.append(f"events.jsonl: seq {seq} follows {prev_seq} (seqs must be contiguous)")
        try:
            t = parse_iso(str(ev.get("t")))
        except ValueError:
            problems.append(f"events.jsonl: event {seq} has an invalid time")
            t = prev_t
        if prev_t is not None and t is not None and t < prev_t:
            problems.append(f"events.jsonl: event {seq} is earlier than event {prev_seq} (times must not go back)")
        prev_seq, prev_t = seq, t if t is not None else prev_t
    checked["events"] = len(rec.events)

    store = rec.store
    blob_sha: dict[str, str] = {}  # oid -> sha256 of its actual content

    def real_sha(oid: str) -> str:
        if oid not in blob_sha:
            blob_sha[oid] = sha256_bytes(store.read_blob(oid))
        return blob_sha[oid]

    # every file event's content is in the store, and hashes right
    seen_sha: set[str] = set()
    for ev in rec.events:
        if ev.get("type") not in FILE_EVENTS or ev.get("type") == "file_deleted" or ev.get("oversized"):
            continue
        sha = ev.get("sha256")
        if not isinstance(sha, str):
            if ev.get("type") != "file_moved":
                problems.append(f"events.jsonl: event {ev['seq']} ({ev.get('type')}) has no sha256")
            continue
        if sha in seen_sha:
            continue
        seen_sha.add(sha)
        oid = store.oid_for_sha256(sha)
        if oid is None:
            problems.append(f"store: content of {ev.get('path')} (event {ev['seq']}, sha256 {sha[:12]}…) is missing")
            continue
        try:
            if real_sha(oid) != sha:
                problems.append(
                    f"store/objects/{oid[:2]}/{oid[2:]}: content does not match sha256 of event {ev['seq']}"
                )
        except RecordingError as exc:
            problems.append(f"store: {exc}")
    checked["blobs"] = len(seen_sha)

    # checkpoints: commit present, tree hash right, file events add up to it
    files: dict[str, FileState] | None = None
    left: set[str] = set()
    commit_hash: dict[str, str] = {}

    def tree_hash_of(commit: str) -> str:
        if commit not in commit_hash:
            entries = [(p, mode, real_sha(oid)) for p, (mode, oid) in store.tree_files(commit).items()]
            commit_hash[commit] = tree_hash_from_entries(entries)
        return commit_hash[commit]

    n_ckpt = 0
    for ev in rec.events:
        typ = ev.get("type")
        if typ in FILE_EVENTS and files is not None:
            try:
                apply_file_event(rec, files, ev, left)
            except RecordingError as exc:
                problems.append(f"events.jsonl: {exc}")
                files = None
            continue
        if typ != "checkpoint":
            continue
        n_ckpt += 1
        commit = ev.get("commit")
        if not isinstance(commit, str):
            problems.append(f"events.jsonl: checkpoint event {ev['seq']} has no commit")
            continue
        try:
            th = tree_hash_of(commit)
            trailer = store.commit_fields(commit)["tree_hash_trailer"]
        except RecordingError as exc:
            problems.append(f"store: checkpoint {ev['seq']}: {exc}")
            files = None
            continue
        if th != ev.get("tree_hash"):
            problems.append(f"events.jsonl: checkpoint {ev['seq']} tree_hash does not match commit {commit[:12]}")
        if trailer is not None and trailer != th:
            problems.append(f"store: commit {commit[:12]} tree-hash trailer does not match its tree")
        if files is not None and ev.get("reason") != "start":
            derived = tree_hash_from_entries((p, f.mode, f.sha256) for p, f in files.items())
            if derived != th:
                problems.append(
                    f"events.jsonl: file events up to checkpoint {ev['seq']} do not add up to its commit {commit[:12]}"
                )
        # continue from the commit itself (a "start" checkpoint may follow a restart)
        try:
            files = {p: FileState(m, o, real_sha(o)) for p, (m, o) in store.tree_files(commit).items()}
        except RecordingError:
            files = None
    checked["checkpoints"] = n_ckpt

    # submission
    sub = rec.meta.submission
    sub_hash = None
    if sub is not None:
        ref = store.ref("refs/rgbridge/submission")
        if ref != sub.commit:
            problems.append(
                f"store/refs/rgbridge/submission: points at {str(ref)[:12]}, session.json says {sub.commit[:12]}"
            )
        submit = [e for e in rec.events if e.get("type") == "submit"]
        if not submit:
            problems.append("events.jsonl: no submit event for the recorded submission")
        else:
            last = submit[-1]
            if last.get("commit") != sub.commit:
                problems.append(f"events.jsonl: submit event {last['seq']} commit differs from session.json")
            if last.get("tree_hash") != sub.tree_hash:
                problems.append(f"events.jsonl: submit event {last['seq']} tree_hash differs from session.json")
        try:
            sub_hash = tree_hash_of(sub.commit)
            if sub_hash != sub.tree_hash:
                problems.append(f"session.json: submission tree_hash does not match commit {sub.commit[:12]}")
        except RecordingError as exc:
            problems.append(f"store: submission commit: {exc}")
    elif rec.meta.state in ("submitted", "scored"):
        problems.append(f"session.json: state {rec.meta.state} but no submission")

    # results: the snapshot each one scored
    try:
        results = list_results(rec_dir)
    except BridgeError as exc:
        problems.append(str(exc))
        results = []
    staged_cache: dict[str, str] = {}
    for entry in results:
        expected = entry.get("moment_tree_hash")
        got = entry.get("snapshot_hash")
        if not expected:
            warnings.append(f"{entry['path']}: no recorded moment to compare its snapshot with")
            continue
        if got == expected:
            continue
        commit = sub.commit if entry["kind"] == "submission" and sub else None
        if commit and commit not in staged_cache:
            entries = [(p, m, real_sha(o)) for p, (m, o) in store.tree_files(commit).items()]
            staged_cache[commit] = _staged_hash(entries)
        if commit and staged_cache.get(commit) == got:
            continue  # the engine left out ignored files (e.g. *.pyc) when staging
        problems.append(
            f"{entry['path']}: snapshot_hash {str(got)[:12]}… is not the tree it claims to score "
            f"({str(expected)[:12]}…)"
        )
    checked["results"] = len(results)
    job = rec.meta.job
    if (
        job is not None
        and job.state == "done"
        and job.result_dir
        and not (rec_dir / job.result_dir / "result.json").is_file()
    ):
        problems.append(f"{job.result_dir}/result.json: missing (session.json says scoring is done)")


def verify_recording(rec_dir: Path | str) -> VerifyReport:
    """Recompute the seal (when there is one) and cross-check the recording's content."""
    rec_dir = Path(rec_dir)
    problems: list[str] = []
    warnings: list[str] = []
    checked: dict[str, int] = {}
    from bridge.recording.reader import load_meta

    try:
        meta = load_meta(rec_dir)
    except BridgeError as exc:
        return VerifyReport(False, [str(exc)])
    seal_path = rec_dir / INTEGRITY_NAME
    sealed = seal_path.is_file()
    if sealed:
        try:
            data = json.loads(seal_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as exc:
            problems.append(f"{INTEGRITY_NAME}: unreadable ({exc})")
        else:
            try:
                _compare_seal(rec_dir, data, problems, warnings)
            except (OSError, RecordingError) as exc:
                problems.append(f"seal check failed: {exc}")
    elif meta.state in ("active", "paused"):
        warnings.append("not sealed yet (the session is still open)")
    else:
        problems.append(f"{INTEGRITY_NAME}: missing (recording not sealed; `rgbridge recordings seal` seals it)")
    try:
        _check_content(rec_dir, problems, warnings, checked)
    except (OSError, RecordingError) as exc:
        problems.append(f"content check failed: {exc}")
    return VerifyReport(not problems, problems, warnings, sealed, checked)


def try_seal(rec_dir: Path | str) -> str | None:
    """Seal for the live session (session.py hook): never raises; returns the error text, if any."""
    try:
        seal_recording(rec_dir)
    except Exception as exc:  # noqa: BLE001 - a failed seal must never fail a scoring job or a quit
        return f"{type(exc).__name__}: {exc}"
    return None


def _is_ref_file(rel: str) -> bool:
    return rel.startswith("refs/") or rel == "packed-refs"


def _compare_digests(old: dict[str, str], now: dict[str, str], what: str, *, show_values: bool = False) -> list[str]:
    """One problem line per store entry removed, added or changed since sealing."""
    out = []
    for key in sorted(set(old) | set(now)):
        if key not in now:
            out.append(f"store/{key}: {what}removed after sealing")
        elif key not in old:
            out.append(f"store/{key}: {what}added after sealing")
        elif old[key] != now[key]:
            detail = f" ({old[key][:12]} → {now[key][:12]})" if show_values else ""
            out.append(f"store/{key}: {what}changed after sealing{detail}")
    return out
