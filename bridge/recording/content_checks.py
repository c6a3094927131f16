"""Cross-checks of a recording's own content, one small function per check; they also work on
an unsealed recording (docs/recording-format.md §6).

Event seqs contiguous and times monotonic; every file event's content present in the store with
the right SHA-256; every checkpoint commit present, its tree hashing to the event's tree_hash,
and the file events since the previous checkpoint adding up to it; the submission commit, ref,
submit event and session.json agreeing; each result's snapshot_hash equal to the tree hash of
the moment it scored; a done job's result present. Each check appends one line per problem.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime
from pathlib import Path

from bridge.errors import BridgeError, RecordingError
from bridge.fs.hashing import sha256_bytes, tree_hash_from_entries
from bridge.fs.ignore import UPSTREAM_COPY_IGNORE
from bridge.recording.clock import parse_iso
from bridge.recording.event_model import Checkpoint, FileEvent, FileMoved, Submit
from bridge.recording.format import SUBMISSION_REF
from bridge.recording.moments import FileState, apply_file_event
from bridge.recording.reader import FILE_EVENT_CLASSES, Recording, StoreReader, open_recording
from bridge.recording.results import list_results

#: before the recorder and the engine shared one rule set (bridge/fs/ignore.py) the engine staged a
#: snapshot without upstream's list only; results scored then are still checked against that
_STAGE_IGNORE = (*UPSTREAM_COPY_IGNORE, ".rgbridge")


class StoreHashes:
    """The real SHA-256 of store blobs and the tree hash of commits, each computed once."""

    def __init__(self, store: StoreReader) -> None:
        self.store = store
        self._blob_sha: dict[str, str] = {}  # oid -> sha256 of its actual content
        self._commit_hash: dict[str, str] = {}

    def blob_sha(self, oid: str) -> str:
        if oid not in self._blob_sha:
            self._blob_sha[oid] = sha256_bytes(self.store.read_blob(oid))
        return self._blob_sha[oid]

    def tree_hash(self, commit: str) -> str:
        if commit not in self._commit_hash:
            entries = [(p, mode, self.blob_sha(oid)) for p, (mode, oid) in self.store.tree_files(commit).items()]
            self._commit_hash[commit] = tree_hash_from_entries(entries)
        return self._commit_hash[commit]


def check_content(rec_dir: Path, problems: list[str], warnings: list[str], checked: dict[str, int]) -> None:
    """Run every content check in order; `checked` gets how many items each one looked at."""
    try:
        rec = open_recording(rec_dir)
    except BridgeError as exc:
        problems.append(str(exc))
        return
    if rec.bad_lines:
        warnings.append(f"events.jsonl: {rec.bad_lines} unparsable line(s) skipped (a crash mid-write leaves one)")
    hashes = StoreHashes(rec.store)
    checked["events"] = check_sequence(rec, problems)
    checked["blobs"] = check_blobs(rec, hashes, problems)
    checked["checkpoints"] = check_checkpoints(rec, hashes, problems)
    check_submission(rec, hashes, problems)
    checked["results"] = check_results(rec_dir, rec, hashes, problems, warnings)
    check_job(rec_dir, rec, problems)


def check_sequence(rec: Recording, problems: list[str]) -> int:
    """Event seqs are contiguous and times never go back. Returns the number of events."""
    prev_seq, prev_t = 0, None
    t: datetime | None
    for ev in rec.events:
        seq = ev.seq
        if seq != prev_seq + 1:
            problems.append(f"events.jsonl: seq {seq} follows {prev_seq} (seqs must be contiguous)")
        try:
            t = parse_iso(ev.t)
        except ValueError:
            problems.append(f"events.jsonl: event {seq} has an invalid time")
            t = prev_t
        if prev_t is not None and t is not None and t < prev_t:
            problems.append(f"events.jsonl: event {seq} is earlier than event {prev_seq} (times must not go back)")
        prev_seq, prev_t = seq, t if t is not None else prev_t
    return len(rec.events)


def check_blobs(rec: Recording, hashes: StoreHashes, problems: list[str]) -> int:
    """Every file event's content is in the store and hashes right. Returns the contents checked."""
    seen_sha: set[str] = set()
    for ev in rec.events:
        if not isinstance(ev, FileEvent | FileMoved) or (isinstance(ev, FileEvent) and ev.oversized):
            continue
        sha = ev.sha256
        if sha is None:
            if isinstance(ev, FileEvent):  # a move without content keeps the content it had
                problems.append(f"events.jsonl: event {ev.seq} ({ev.type}) has no sha256")
            continue
        if sha in seen_sha:
            continue
        seen_sha.add(sha)
        oid = rec.store.oid_for_sha256(sha)
        if oid is None:
            problems.append(f"store: content of {ev.path} (event {ev.seq}, sha256 {sha[:12]}…) is missing")
            continue
        try:
            if hashes.blob_sha(oid) != sha:
                problems.append(f"store/objects/{oid[:2]}/{oid[2:]}: content does not match sha256 of event {ev.seq}")
        except RecordingError as exc:
            problems.append(f"store: {exc}")
    return len(seen_sha)


def check_checkpoints(rec: Recording, hashes: StoreHashes, problems: list[str]) -> int:
    """Each checkpoint's commit is present, its tree hashes to the event's tree_hash (and its
    trailer), and the file events since the previous checkpoint add up to it. Returns the count."""
    store = rec.store
    files: dict[str, FileState] | None = None
    left: set[str] = set()
    n_ckpt = 0
    for ev in rec.events:
        if isinstance(ev, FILE_EVENT_CLASSES) and files is not None:
            try:
                apply_file_event(rec, files, ev, left)
            except RecordingError as exc:
                problems.append(f"events.jsonl: {exc}")
                files = None
            continue
        if not isinstance(ev, Checkpoint):
            continue
        n_ckpt += 1
        commit = ev.commit  # the event model requires it (bridge/recording/event_model.py)
        try:
            th = hashes.tree_hash(commit)
            trailer = store.commit_fields(commit)["tree_hash_trailer"]
        except RecordingError as exc:
            problems.append(f"store: checkpoint {ev.seq}: {exc}")
            files = None
            continue
        if th != ev.tree_hash:
            problems.append(f"events.jsonl: checkpoint {ev.seq} tree_hash does not match commit {commit[:12]}")
        if trailer is not None and trailer != th:
            problems.append(f"store: commit {commit[:12]} tree-hash trailer does not match its tree")
        if files is not None and ev.reason != "start":
            derived = tree_hash_from_entries((p, f.mode, f.sha256) for p, f in files.items())
            if derived != th:
                problems.append(
                    f"events.jsonl: file events up to checkpoint {ev.seq} do not add up to its commit {commit[:12]}"
                )
        # continue from the commit itself (a "start" checkpoint may follow a restart)
        try:
            files = {p: FileState(m, o, hashes.blob_sha(o)) for p, (m, o) in store.tree_files(commit).items()}
        except RecordingError:
            files = None
    return n_ckpt


def check_submission(rec: Recording, hashes: StoreHashes, problems: list[str]) -> None:
    """The submission commit, its ref, the last submit event and session.json agree."""
    sub = rec.meta.submission
    if sub is None:
        if rec.meta.state in ("submitted", "scored"):
            problems.append(f"session.json: state {rec.meta.state} but no submission")
        return
    ref = rec.store.ref(SUBMISSION_REF)
    if ref != sub.commit:
        problems.append(f"store/{SUBMISSION_REF}: points at {str(ref)[:12]}, session.json says {sub.commit[:12]}")
    last = rec.last_of(Submit)
    if last is None:
        problems.append("events.jsonl: no submit event for the recorded submission")
    else:
        if last.commit != sub.commit:
            problems.append(f"events.jsonl: submit event {last.seq} commit differs from session.json")
        if last.tree_hash != sub.tree_hash:
            problems.append(f"events.jsonl: submit event {last.seq} tree_hash differs from session.json")
    try:
        if hashes.tree_hash(sub.commit) != sub.tree_hash:
            problems.append(f"session.json: submission tree_hash does not match commit {sub.commit[:12]}")
    except RecordingError as exc:
        problems.append(f"store: submission commit: {exc}")


def check_results(rec_dir: Path, rec: Recording, hashes: StoreHashes, problems: list[str], warnings: list[str]) -> int:
    """Each result's snapshot_hash is the tree of the moment it scored. Returns the result count."""
    try:
        results = list_results(rec_dir)
    except BridgeError as exc:
        problems.append(str(exc))
        results = []
    sub = rec.meta.submission
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
            entries = [(p, m, hashes.blob_sha(o)) for p, (m, o) in rec.store.tree_files(commit).items()]
            staged_cache[commit] = _staged_hash(entries)
        if commit and staged_cache.get(commit) == got:
            continue  # the engine left out ignored files (e.g. *.pyc) when staging
        problems.append(
            f"{entry['path']}: snapshot_hash {str(got)[:12]}… is not the tree it claims to score "
            f"({str(expected)[:12]}…)"
        )
    return len(results)


def check_job(rec_dir: Path, rec: Recording, problems: list[str]) -> None:
    """A job session.json calls done has its result.json."""
    job = rec.meta.job
    if (
        job is not None
        and job.state == "done"
        and job.result_dir
        and not (rec_dir / job.result_dir / "result.json").is_file()
    ):
        problems.append(f"{job.result_dir}/result.json: missing (session.json says scoring is done)")


def _staged_hash(entries: list[tuple[str, int, str]]) -> str:
    """The engine's snapshot hash of a tree: it stages without upstream's ignore list."""

    def kept(path: str) -> bool:
        return not any(fnmatch.fnmatch(part, pat) for part in path.split("/") for pat in _STAGE_IGNORE)

    return tree_hash_from_entries(e for e in entries if kept(e[0]))
