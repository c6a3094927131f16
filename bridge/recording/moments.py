"""Moments of a recording (`submission`, `event:N`, `time:…`, `working:…`) and the workspace
state at a moment: the nearest checkpoint commit at or before the moment's event, then the file
events after it, each blob looked up in the store by its SHA-256 and verified.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError
from bridge.fs.hashing import MODE_EXEC, MODE_FILE, MODE_LINK, tree_hash_from_entries
from bridge.fs.relpath import rel_parts
from bridge.recording.clock import iso, parse_iso
from bridge.recording.event_model import Checkpoint, Event, FileDeleted, FileMoved, Submit
from bridge.recording.format import SessionMeta
from bridge.recording.reader import FILE_EVENT_CLASSES, SHA256_HEX, AnyFileEvent, Recording, open_recording

# ----------------------------------------------------------------------------- moments


@dataclass(frozen=True)
class Moment:
    """A point of a recording: the state right after event `seq`."""

    spec: str  # what was asked for
    seq: int  # the last event included
    t: str  # ISO-8601 UTC of the moment (the requested time, or the event's time)
    wall_seconds: float  # since session start (session.json created_at)
    working_seconds: float  # running clock time up to the moment
    commit: str | None = None  # set for `submission`: the exact commit to rebuild
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def working_seconds_at(meta: SessionMeta, when: datetime) -> float:
    total = 0.0
    for span in meta.clock.spans:
        start = parse_iso(span.start)
        end = parse_iso(span.end) if span.end else when
        lo, hi = start, min(end, when)
        if hi > lo:
            total += (hi - lo).total_seconds()
    return round(total, 3)


def _event_time(ev: Event) -> datetime:
    try:
        return parse_iso(ev.t)
    except ValueError:
        raise RecordingError(f"event {ev.seq} has no valid time") from None


def _parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise RecordingError(
            f"cannot read moment {text!r}: use an ISO-8601 time, +SECONDS, event:N, start, end or submission"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _moment(
    rec: Recording, spec: str, seq: int, when: datetime, *, commit: str | None = None, note: str = ""
) -> Moment:
    return Moment(
        spec=spec,
        seq=seq,
        t=iso(when),
        wall_seconds=round((when - rec.started).total_seconds(), 3),
        working_seconds=working_seconds_at(rec.meta, when),
        commit=commit,
        note=note,
    )


def resolve_moment(rec_dir: Path | str | Recording, at: str) -> Moment:
    """Turn `at` into a Moment.

    - `submission`: the submission commit (the state that was scored);
    - `event:N`: the state right after event seq N;
    - `+SECONDS`: wall-clock seconds since session start (session.json `created_at`), pauses included;
    - an ISO-8601 time (UTC when no offset is given);
    - `start` (the recorder's first baseline checkpoint) and `end` (the last event).
    A time resolves to the last event at or before it.
    """
    rec = rec_dir if isinstance(rec_dir, Recording) else open_recording(rec_dir)
    if not rec.events:
        raise RecordingError(f"{rec.dir}: recording has no events")
    spec = str(at).strip()
    if spec == "submission":
        sub = rec.meta.submission
        if sub is None:
            raise RecordingError(f"{rec.dir}: session was never submitted (state {rec.meta.state})")
        submit = next((e for e in reversed(rec.events) if isinstance(e, Submit) and e.commit == sub.commit), None)
        seq = submit.seq if submit else _last_seq_before(rec, parse_iso(sub.at))
        return _moment(rec, spec, seq, parse_iso(sub.at), commit=sub.commit)
    if spec == "start":
        ck = next((e for e in rec.events if isinstance(e, Checkpoint)), None)
        if ck is None:
            raise RecordingError(f"{rec.dir}: recording has no checkpoint")
        return _moment(rec, spec, ck.seq, _event_time(ck))
    if spec == "end":
        last = rec.events[-1]
        return _moment(rec, spec, last.seq, _event_time(last))
    if spec.startswith("event:"):
        try:
            seq = int(spec[6:])
        except ValueError:
            raise RecordingError(f"cannot read moment {spec!r}: event:N needs an integer seq") from None
        at_seq = rec.by_seq(seq)
        if at_seq is None:
            lo, hi = rec.events[0].seq, rec.events[-1].seq
            raise RecordingError(f"recording has no event {seq} (events run from {lo} to {hi})")
        return _moment(rec, spec, seq, _event_time(at_seq))
    if spec.startswith("+"):
        try:
            seconds = float(spec[1:])
        except ValueError:
            raise RecordingError(f"cannot read moment {spec!r}: +SECONDS needs a number") from None
        if seconds < 0 or seconds != seconds:
            raise RecordingError(f"cannot read moment {spec!r}: seconds must be 0 or more")
        when = rec.started + timedelta(seconds=seconds)
    else:
        when = _parse_time(spec)
    first = _event_time(rec.events[0])
    if when < first and when < rec.started:
        raise RecordingError(f"moment {spec} is before the session started ({rec.meta.created_at})")
    seq = _last_seq_before(rec, when)
    note = ""
    last_t = _event_time(rec.events[-1])
    if when > last_t:
        note = "after the last event: the recording's final state"
    return _moment(rec, spec, seq, when, note=note)


def _last_seq_before(rec: Recording, when: datetime) -> int:
    seq = rec.events[0].seq
    for ev in rec.events:
        if _event_time(ev) <= when:
            seq = ev.seq
        else:
            break
    return seq


# ----------------------------------------------------------------------------- state & replay


@dataclass(frozen=True)
class FileState:
    mode: int
    oid: str
    sha256: str


@dataclass
class State:
    """The workspace at a moment, as recorded."""

    files: dict[str, FileState]
    base_commit: str | None  # the checkpoint commit the state starts from
    base_seq: int | None
    applied: int  # file events applied after the base
    exact_commit: bool  # True when the state is exactly a commit's tree
    left_out: list[str] = field(default_factory=list)  # oversized files (never stored)
    note: str = ""

    def tree_hash(self) -> str:
        return tree_hash_from_entries((p, f.mode, f.sha256) for p, f in self.files.items())


def _mode(text: Any) -> int:
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise RecordingError(f"invalid file mode {text!r} in events") from None
    if mode not in (MODE_FILE, MODE_EXEC, MODE_LINK):
        raise RecordingError(f"unsupported file mode {text!r} in events")
    return mode


def apply_file_event(rec: Recording, files: dict[str, FileState], ev: AnyFileEvent, left_out: set[str]) -> None:
    """Apply one file event to a path -> FileState map (shared by replay and verification)."""
    path = ev.path
    if not path:
        raise RecordingError(f"event {ev.seq} ({ev.type}) has no path")
    rel_parts(path, what=f"event {ev.seq} ({ev.type}) path", error=RecordingError)
    if isinstance(ev, FileMoved):
        rel_parts(ev.dest, what=f"event {ev.seq} ({ev.type}) dest", error=RecordingError)
    if isinstance(ev, FileDeleted):
        files.pop(path, None)
        left_out.discard(path)
        return
    if not isinstance(ev, FileMoved) and ev.oversized:
        files.pop(path, None)
        left_out.add(path)
        return
    sha = ev.sha256
    if isinstance(ev, FileMoved):
        if not ev.dest:
            raise RecordingError(f"event {ev.seq} (file_moved) has no dest")
        old = files.pop(path, None)
        left_out.discard(path)
        if sha is None:
            if old is None:
                raise RecordingError(f"event {ev.seq}: move of unknown file {path!r}")
            files[ev.dest] = old
            return
        path = ev.dest
    if sha is None or not SHA256_HEX.match(sha):
        raise RecordingError(f"event {ev.seq} ({ev.type} {path}) has no valid sha256")
    oid = rec.store.oid_for_sha256(sha)
    if oid is None:
        raise RecordingError(f"content of {path} (event {ev.seq}, sha256 {sha[:12]}…) is not in the store")
    files[path] = FileState(_mode("100644" if ev.mode is None else ev.mode), oid, sha)
    left_out.discard(path)


def commit_state(rec: Recording, commit: str) -> dict[str, FileState]:
    return {
        path: FileState(mode, oid, rec.store.sha256_for_oid(oid))
        for path, (mode, oid) in rec.store.tree_files(commit).items()
    }


def state_at(rec: Recording, moment: Moment) -> State:
    """The recorded workspace at a moment (no files written)."""
    if moment.commit is not None:
        fields = rec.store.commit_fields(moment.commit)
        return State(
            commit_state(rec, moment.commit), moment.commit, moment.seq, 0, True, left_out=sorted(fields["left_out"])
        )
    base: Checkpoint | None = None
    i_base = -1
    for i, ev in enumerate(rec.events):
        if ev.seq > moment.seq:
            break
        if isinstance(ev, Checkpoint):
            base, i_base = ev, i
    note = ""
    if base is None:
        # Nothing is recorded before the recorder's baseline: show the baseline itself.
        first = next(((i, e) for i, e in enumerate(rec.events) if isinstance(e, Checkpoint)), None)
        if first is None:
            raise RecordingError(f"{rec.dir}: recording has no checkpoint to replay from")
        i_base, base = first
        note = "before the recorder's first checkpoint: showing that baseline"
        end_seq = base.seq
    else:
        end_seq = moment.seq
    files = commit_state(rec, base.commit)
    left = set(rec.store.commit_fields(base.commit)["left_out"])
    applied = 0
    for ev in rec.events[i_base + 1 :]:
        if ev.seq > end_seq:
            break
        if isinstance(ev, FILE_EVENT_CLASSES):
            apply_file_event(rec, files, ev, left)
            applied += 1
    return State(files, base.commit, base.seq, applied, applied == 0, sorted(left), note)
