"""Read recordings back: moments, workspace replay, re-scoring (docs/recording-format.md).

A recording is read without ever writing to it (except `rescore`, which adds a result folder):
session.json through a pinned version-1 model, events.jsonl as records, and the shadow git store
through `StoreReader`, a pure-Python reader of git's loose objects (the recorder writes loose
objects only) that checks every object's SHA-1 and every blob's SHA-256 as it reads.

Replay to a moment = the nearest checkpoint commit at or before the moment's event seq, then the
file events after that checkpoint up to the moment, with each blob looked up in the store by its
SHA-256 and verified. `submission` is the submission commit itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge.clock import iso, parse_iso, utcnow
from bridge.scoring.result import summarize_result
from bridge.errors import RecordingError
from bridge.events import ReadStats, read_events
from bridge.files import write_json_atomic
from bridge.fs.relpath import check_layout, rel_parts
from bridge.gitsafe import HARDENING_ARGS, check_store_layout, isolated_git_env
from bridge.hashing import MODE_EXEC, MODE_FILE, MODE_LINK, sha256_bytes, tree_hash_from_entries

#: The newest recording format this reader understands (equals bridge.session.FORMAT_VERSION).
READER_FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = frozenset({1})
HEAD_REF = "refs/heads/main"
SUBMISSION_REF = "refs/rgbridge/submission"
FILE_EVENTS = frozenset({"file_created", "file_modified", "file_deleted", "file_moved"})
INDEX_NAME = "index.json"
_OID = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# ----------------------------------------------------------------------------- session.json (v1)


class _Span(BaseModel):
    model_config = ConfigDict(extra="allow")
    start: str
    end: str | None = None


class _Clock(BaseModel):
    model_config = ConfigDict(extra="allow")
    spans: list[_Span] = Field(default_factory=list)


class _Submission(BaseModel):
    model_config = ConfigDict(extra="allow")
    signal: str = ""
    at: str
    commit: str
    tree_hash: str
    stable: bool = True
    seal_seconds: float = 0.0
    files: int = 0


class _Job(BaseModel):
    model_config = ConfigDict(extra="allow")
    job_id: str
    state: str = ""
    profile: str = "both"
    result_dir: str | None = None
    error: str | None = None


class _Client(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = "unknown"
    version: str = ""


class SessionMetaV1(BaseModel):
    """The fields of a format-1 session.json this reader relies on (kept as is for old recordings)."""

    model_config = ConfigDict(extra="allow")
    format_version: int
    bridge_version: str = ""
    session_id: str
    task_id: str
    task_hash: str = ""
    task_version: str = ""
    task_source: str = ""
    task_port: int = 0
    time_limit: int = 0
    workspace: str = ""
    mode: str = "agent"
    practice: bool = False
    client: _Client = Field(default_factory=_Client)
    created_at: str
    ended_at: str | None = None
    state: str = "active"
    clock: _Clock = Field(default_factory=_Clock)
    notes: int = 0
    submission: _Submission | None = None
    job: _Job | None = None
    quit_reason: str | None = None


def check_format_version(value: Any, where: str) -> int:
    """Accept every version up to the current one; refuse newer ones with a clear message."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RecordingError(f"{where}: invalid format_version {value!r}")
    if value > READER_FORMAT_VERSION:
        raise RecordingError(
            f"{where}: recording format {value} is newer than this reader (supports up to "
            f"{READER_FORMAT_VERSION}); upgrade repogenesis-bridge to read it"
        )
    if value not in SUPPORTED_FORMAT_VERSIONS:
        raise RecordingError(f"{where}: recording format {value} is not supported")
    return value


def load_meta(rec_dir: Path) -> SessionMetaV1:
    path = Path(rec_dir) / "session.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordingError(f"{rec_dir}: not a recording (no session.json)") from None
    except (OSError, ValueError) as exc:
        raise RecordingError(f"{path}: unreadable session.json: {exc}") from None
    if not isinstance(data, dict):
        raise RecordingError(f"{path}: session.json is not an object")
    check_format_version(data.get("format_version"), str(path))
    try:
        return SessionMetaV1.model_validate(data)
    except ValueError as exc:
        raise RecordingError(f"{path}: invalid session.json: {str(exc).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- the git store


class StoreReader:
    """Read-only access to a shadow store: refs, commits, trees and blobs.

    Loose objects are read in Python (zlib) and their SHA-1 checked. Packed objects (only if
    somebody ran `git gc` on the store) are read through `git cat-file` with an isolated
    environment; a store with `objects/info/alternates` is refused (it would read outside it).
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = Path(git_dir)
        if not (self.git_dir / "objects").is_dir():
            raise RecordingError(f"{self.git_dir}: shadow store missing (no objects/)")
        check_store_layout(self.git_dir)
        self._trees: dict[str, list[tuple[int, str, str]]] = {}
        self._lock = threading.Lock()
        self._blobmap: dict[str, str] | None = None
        self._sha_by_oid: dict[str, str] | None = None

    # ---- refs
    def refs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        packed = self.git_dir / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and _OID.match(parts[0]) and parts[1].startswith("refs/"):
                    out[parts[1]] = parts[0]
        refs_dir = self.git_dir / "refs"
        if refs_dir.is_dir():
            for path in sorted(refs_dir.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    name = path.relative_to(self.git_dir).as_posix()
                    out[name] = path.read_text(encoding="utf-8", errors="replace").strip()
        return dict(sorted(out.items()))

    def ref(self, name: str) -> str | None:
        return self.refs().get(name)

    # ---- objects
    def _loose_path(self, oid: str) -> Path:
        return self.git_dir / "objects" / oid[:2] / oid[2:]

    def read_object(self, oid: str) -> tuple[str, bytes]:
        if not _OID.match(oid or ""):
            raise RecordingError(f"invalid object id {oid!r}")
        path = self._loose_path(oid)
        try:
            raw = zlib.decompress(path.read_bytes())
        except FileNotFoundError:
            return self._read_packed(oid)
        except (OSError, zlib.error) as exc:
            raise RecordingError(f"store object {oid} unreadable: {exc}") from None
        if hashlib.sha1(raw, usedforsecurity=False).hexdigest() != oid:
            raise RecordingError(f"store object {oid} is corrupt (content does not match its id)")
        nul = raw.find(b"\0")
        header = raw[:nul].decode("ascii", "replace").split()
        if nul < 0 or len(header) != 2 or int(header[1]) != len(raw) - nul - 1:
            raise RecordingError(f"store object {oid} has a malformed header")
        return header[0], raw[nul + 1 :]

    def _read_packed(self, oid: str) -> tuple[str, bytes]:
        if not any((self.git_dir / "objects" / "pack").glob("*.pack")):
            raise RecordingError(f"store object {oid} is missing")
        check_store_layout(self.git_dir)  # again: the store may have changed since it was opened
        env = isolated_git_env(self.git_dir)
        argv = ["git", *HARDENING_ARGS, "cat-file", "--batch"]
        try:
            proc = subprocess.run(argv, input=oid.encode() + b"\n", env=env, cwd=self.git_dir,
                                  capture_output=True, check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RecordingError(f"git cat-file failed: {exc}") from None
        head, _, rest = proc.stdout.partition(b"\n")
        parts = head.split()
        if len(parts) != 3:
            raise RecordingError(f"store object {oid} is missing")
        size = int(parts[2])
        data = rest[:size]
        raw = b"%s %d\0" % (parts[1], size) + data
        if hashlib.sha1(raw, usedforsecurity=False).hexdigest() != oid:
            raise RecordingError(f"store object {oid} is corrupt (content does not match its id)")
        return parts[1].decode(), data

    def read_blob(self, oid: str) -> bytes:
        typ, data = self.read_object(oid)
        if typ != "blob":
            raise RecordingError(f"store object {oid} is a {typ}, expected a blob")
        return data

    def commit_fields(self, oid: str) -> dict[str, Any]:
        typ, data = self.read_object(oid)
        if typ != "commit":
            raise RecordingError(f"store object {oid} is a {typ}, expected a commit")
        text = data.decode("utf-8", "surrogateescape")
        head, _, message = text.partition("\n\n")
        fields: dict[str, Any] = {"parents": [], "message": message}
        for line in head.splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                fields["tree"] = value.strip()
            elif key == "parent":
                fields["parents"].append(value.strip())
            elif key == "committer":
                try:
                    fields["time"] = int(value.rsplit(" ", 2)[-2])
                except (ValueError, IndexError):
                    fields["time"] = 0
        if "tree" not in fields:
            raise RecordingError(f"store commit {oid} has no tree")
        trailers = re.findall(r"^Rgbridge-Tree-Hash: ([0-9a-f]{64})$", message, re.M)
        fields["tree_hash_trailer"] = trailers[-1] if trailers else None
        fields["left_out"] = re.findall(r"^Rgbridge-Left-Out: (.+)$", message, re.M)
        return fields

    def _tree(self, oid: str) -> list[tuple[int, str, str]]:
        with self._lock:
            hit = self._trees.get(oid)
        if hit is not None:
            return hit
        typ, data = self.read_object(oid)
        if typ != "tree":
            raise RecordingError(f"store object {oid} is a {typ}, expected a tree")
        entries: list[tuple[int, str, str]] = []
        i = 0
        while i < len(data):
            sp = data.index(b" ", i)
            nul = data.index(b"\0", sp)
            mode = int(data[i:sp], 8)
            name = data[sp + 1 : nul].decode("utf-8", "surrogateescape")
            child = data[nul + 1 : nul + 21].hex()
            if len(child) != 40 or name in ("", ".", "..") or "/" in name:
                raise RecordingError(f"store tree {oid} has a malformed entry")
            entries.append((mode, name, child))
            i = nul + 21
        with self._lock:
            self._trees[oid] = entries
        return entries

    def tree_files(self, commit: str) -> dict[str, tuple[int, str]]:
        """path -> (git mode, blob oid) of a commit's whole tree."""
        out: dict[str, tuple[int, str]] = {}
        stack = [("", self.commit_fields(commit)["tree"])]
        while stack:
            prefix, tree = stack.pop()
            for mode, name, child in self._tree(tree):
                if mode == 0o40000:
                    stack.append((f"{prefix}{name}/", child))
                elif mode in (MODE_FILE, MODE_EXEC, MODE_LINK):
                    out[prefix + name] = (mode, child)
                else:  # submodules and other kinds never occur in recorded trees
                    raise RecordingError(f"store tree {tree} has an unsupported entry mode {mode:o}")
        return out

    # ---- sha256 <-> oid (rgbridge/blobmap, written by ShadowStore.put_blob)
    def _load_blobmap(self) -> None:
        by_sha: dict[str, str] = {}
        by_oid: dict[str, str] = {}
        path = self.git_dir / "rgbridge" / "blobmap"
        if path.is_file():
            for line in path.read_text(encoding="ascii", errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and _SHA256.match(parts[0]) and _OID.match(parts[1]):
                    by_sha.setdefault(parts[0], parts[1])
                    by_oid.setdefault(parts[1], parts[0])
        self._blobmap, self._sha_by_oid = by_sha, by_oid

    def oid_for_sha256(self, sha256: str) -> str | None:
        if self._blobmap is None:
            self._load_blobmap()
        assert self._blobmap is not None
        oid = self._blobmap.get(sha256)
        if oid is None:
            return None
        return oid if self._loose_path(oid).exists() or self._has_packs() else None

    def sha256_for_oid(self, oid: str) -> str:
        if self._sha_by_oid is None:
            self._load_blobmap()
        assert self._sha_by_oid is not None
        known = self._sha_by_oid.get(oid)
        return known if known is not None else sha256_bytes(self.read_blob(oid))

    def has_sha256(self, sha256: str) -> bool:
        return self.oid_for_sha256(sha256) is not None

    def _has_packs(self) -> bool:
        return any((self.git_dir / "objects" / "pack").glob("*.pack"))


# ----------------------------------------------------------------------------- recordings


@dataclass
class Recording:
    """A recording opened for reading."""

    dir: Path
    meta: SessionMetaV1
    events: list[dict[str, Any]]
    bad_lines: int
    store: StoreReader

    @property
    def started(self) -> datetime:
        return parse_iso(self.meta.created_at)

    def by_seq(self, seq: int) -> dict[str, Any] | None:
        i = _bisect_seq(self.events, seq)
        return self.events[i] if i < len(self.events) and self.events[i].get("seq") == seq else None

    def last_of(self, type_: str) -> dict[str, Any] | None:
        for ev in reversed(self.events):
            if ev.get("type") == type_:
                return ev
        return None

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        wanted = set(types)
        return [e for e in self.events if e.get("type") in wanted]


def _bisect_seq(events: list[dict[str, Any]], seq: int) -> int:
    lo, hi = 0, len(events)
    while lo < hi:
        mid = (lo + hi) // 2
        if int(events[mid].get("seq", 0)) < seq:
            lo = mid + 1
        else:
            hi = mid
    return lo


def open_recording(rec_dir: Path | str) -> Recording:
    rec_dir = Path(rec_dir)
    if not rec_dir.is_dir():
        raise RecordingError(f"{rec_dir}: recording folder does not exist")
    meta = load_meta(rec_dir)
    events_path = rec_dir / "events.jsonl"
    if not events_path.is_file():
        raise RecordingError(f"{rec_dir}: recording has no events.jsonl")
    stats = ReadStats()
    events = [e for e in read_events(events_path, stats=stats) if isinstance(e.get("seq"), int)]
    events.sort(key=lambda e: e["seq"])  # written in order; sorting makes bisect safe on odd files
    return Recording(rec_dir, meta, events, stats.bad_lines, StoreReader(rec_dir / "store"))


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


def working_seconds_at(meta: SessionMetaV1, when: datetime) -> float:
    total = 0.0
    for span in meta.clock.spans:
        start = parse_iso(span.start)
        end = parse_iso(span.end) if span.end else when
        lo, hi = start, min(end, when)
        if hi > lo:
            total += (hi - lo).total_seconds()
    return round(total, 3)


def _event_time(ev: dict[str, Any]) -> datetime:
    try:
        return parse_iso(str(ev["t"]))
    except (KeyError, ValueError):
        raise RecordingError(f"event {ev.get('seq')} has no valid time") from None


def _parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise RecordingError(
            f"cannot read moment {text!r}: use an ISO-8601 time, +SECONDS, event:N, start, end or submission"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _moment(rec: Recording, spec: str, seq: int, when: datetime, *, commit: str | None = None,
            note: str = "") -> Moment:
    return Moment(spec=spec, seq=seq, t=iso(when), wall_seconds=round((when - rec.started).total_seconds(), 3),
                  working_seconds=working_seconds_at(rec.meta, when), commit=commit, note=note)


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
        ev = next((e for e in reversed(rec.events) if e.get("type") == "submit" and e.get("commit") == sub.commit),
                  None)
        seq = int(ev["seq"]) if ev else _last_seq_before(rec, parse_iso(sub.at))
        return _moment(rec, spec, seq, parse_iso(sub.at), commit=sub.commit)
    if spec == "start":
        ck = next((e for e in rec.events if e.get("type") == "checkpoint"), None)
        if ck is None:
            raise RecordingError(f"{rec.dir}: recording has no checkpoint")
        return _moment(rec, spec, int(ck["seq"]), _event_time(ck))
    if spec == "end":
        ev = rec.events[-1]
        return _moment(rec, spec, int(ev["seq"]), _event_time(ev))
    if spec.startswith("event:"):
        try:
            seq = int(spec[6:])
        except ValueError:
            raise RecordingError(f"cannot read moment {spec!r}: event:N needs an integer seq") from None
        ev = rec.by_seq(seq)
        if ev is None:
            last = rec.events[-1]["seq"]
            raise RecordingError(f"recording has no event {seq} (events run from {rec.events[0]['seq']} to {last})")
        return _moment(rec, spec, seq, _event_time(ev))
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
    seq = int(rec.events[0]["seq"])
    for ev in rec.events:
        if _event_time(ev) <= when:
            seq = int(ev["seq"])
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


def apply_file_event(rec: Recording, files: dict[str, FileState], ev: dict[str, Any], left_out: set[str]) -> None:
    """Apply one file event to a path -> FileState map (shared by replay and verification)."""
    typ = ev.get("type")
    path = ev.get("path")
    if not isinstance(path, str) or not path:
        raise RecordingError(f"event {ev.get('seq')} ({typ}) has no path")
    rel_parts(path, what=f"event {ev.get('seq')} ({typ}) path", error=RecordingError)
    if isinstance(ev.get("dest"), str):
        rel_parts(ev["dest"], what=f"event {ev.get('seq')} ({typ}) dest", error=RecordingError)
    if typ == "file_deleted":
        files.pop(path, None)
        left_out.discard(path)
        return
    if ev.get("oversized"):
        target = ev.get("dest") if typ == "file_moved" else path
        files.pop(path, None)
        if isinstance(target, str):
            files.pop(target, None)
            left_out.add(target)
        return
    sha = ev.get("sha256")
    if typ == "file_moved":
        dest = ev.get("dest")
        if not isinstance(dest, str) or not dest:
            raise RecordingError(f"event {ev.get('seq')} (file_moved) has no dest")
        old = files.pop(path, None)
        left_out.discard(path)
        if not isinstance(sha, str):
            if old is None:
                raise RecordingError(f"event {ev.get('seq')}: move of unknown file {path!r}")
            files[dest] = old
            return
        path = dest
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise RecordingError(f"event {ev.get('seq')} ({typ} {path}) has no valid sha256")
    oid = rec.store.oid_for_sha256(sha)
    if oid is None:
        raise RecordingError(f"content of {path} (event {ev.get('seq')}, sha256 {sha[:12]}…) is not in the store")
    files[path] = FileState(_mode(ev.get("mode", "100644")), oid, sha)
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
        return State(commit_state(rec, moment.commit), moment.commit, moment.seq, 0, True,
                     left_out=sorted(fields["left_out"]))
    base: dict[str, Any] | None = None
    i_base = -1
    for i, ev in enumerate(rec.events):
        if ev["seq"] > moment.seq:
            break
        if ev.get("type") == "checkpoint" and isinstance(ev.get("commit"), str):
            base, i_base = ev, i
    note = ""
    if base is None:
        # Nothing is recorded before the recorder's baseline: show the baseline itself.
        first = next((i for i, e in enumerate(rec.events) if e.get("type") == "checkpoint"), None)
        if first is None:
            raise RecordingError(f"{rec.dir}: recording has no checkpoint to replay from")
        base, i_base = rec.events[first], first
        note = "before the recorder's first checkpoint: showing that baseline"
        end_seq = int(base["seq"])
    else:
        end_seq = moment.seq
    commit = str(base["commit"])
    files = commit_state(rec, commit)
    left = set(rec.store.commit_fields(commit)["left_out"])
    applied = 0
    for ev in rec.events[i_base + 1 :]:
        if ev["seq"] > end_seq:
            break
        if ev.get("type") in FILE_EVENTS:
            apply_file_event(rec, files, ev, left)
            applied += 1
    return State(files, commit, int(base["seq"]), applied, applied == 0, sorted(left), note)


@dataclass
class ReplayResult:
    files: int
    tree_hash: str
    commit: str | None  # the base commit (the submission commit for `submission`)
    moment: Moment
    out_dir: str
    base_seq: int | None = None
    applied_events: int = 0
    exact_commit: bool = False
    left_out: list[str] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["moment"] = self.moment.to_dict()
        return data


def _prepare_out(out_dir: Path, force: bool, rec_dir: Path) -> Path:
    out = Path(out_dir).expanduser()
    out_abs = Path(os.path.abspath(out))
    rec_abs = Path(os.path.abspath(rec_dir)).resolve()
    if out_abs.exists() and not out_abs.is_dir():
        raise RecordingError(f"--out {out} exists and is not a directory")
    resolved = out_abs.resolve()
    if resolved == rec_abs or resolved.is_relative_to(rec_abs) or rec_abs.is_relative_to(resolved):
        raise RecordingError(f"--out {out} overlaps the recording {rec_dir}")
    if out_abs.is_dir() and any(out_abs.iterdir()):
        if not force:
            raise RecordingError(f"--out {out} is not empty (use --force to replace its contents)")
        if resolved in (Path("/"), Path.home().resolve()) or len(resolved.parts) < 3:
            raise RecordingError(f"refusing to clear {resolved}")
        for child in resolved.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out_abs.mkdir(parents=True, exist_ok=True)
    return out_abs.resolve()


def _safe_rel(path: str) -> list[str]:
    return rel_parts(path, what="unsafe path in recording:", error=RecordingError)


def materialise(rec: Recording, state: State, out: Path) -> int:
    """Write a state into an empty directory, byte for byte, with exec bits and symlinks.

    Every blob is read from the store and its SHA-256 checked against the recorded hash.
    Symlinks are created last and never followed.
    """
    out_real = os.path.realpath(out)
    check_layout(state.files, what="path in recording", error=RecordingError)
    try:
        return _materialise(rec, state, out_real)
    except OSError as exc:  # a name this file system refuses, a folder that vanished: an error, no traceback
        where = f" ({os.fsdecode(exc.filename)!r})" if exc.filename else ""
        raise RecordingError(f"cannot write the workspace into {out}: {exc.strerror or exc}{where}") from None


def _materialise(rec: Recording, state: State, out_real: str) -> int:
    links: list[tuple[list[str], bytes]] = []
    count = 0
    made: set[str] = set()
    for path in sorted(state.files):
        fs = state.files[path]
        parts = _safe_rel(path)
        data = rec.store.read_blob(fs.oid)
        if sha256_bytes(data) != fs.sha256:
            raise RecordingError(f"content of {path} in the store does not match its recorded sha256")
        if fs.mode == MODE_LINK:
            links.append((parts, data))
            continue
        parent = os.path.join(out_real, *parts[:-1])
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        target = os.path.join(parent, parts[-1])
        perm = 0o755 if fs.mode == MODE_EXEC else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, perm)
        finally:
            os.close(fd)
        count += 1
    for parts, data in links:
        parent = os.path.join(out_real, *parts[:-1])
        os.makedirs(parent, exist_ok=True)
        real_parent = os.path.realpath(parent)
        if real_parent != out_real and not real_parent.startswith(out_real + os.sep):
            raise RecordingError(f"unsafe symlink parent in recording: {'/'.join(parts)!r}")
        os.symlink(os.fsdecode(data), os.path.join(parent, parts[-1]))
        count += 1
    return count


def replay(rec_dir: Path | str | Recording, at: str, out_dir: Path | str, *, force: bool = False) -> ReplayResult:
    """Rebuild the workspace as it was at `at` into `out_dir` (refused when not empty unless `force`)."""
    rec = rec_dir if isinstance(rec_dir, Recording) else open_recording(rec_dir)
    moment = resolve_moment(rec, at)
    state = state_at(rec, moment)
    out = _prepare_out(Path(out_dir), force, rec.dir)
    files = materialise(rec, state, out)
    th = state.tree_hash()
    if moment.commit is not None and rec.meta.submission and rec.meta.submission.commit == moment.commit:
        if th != rec.meta.submission.tree_hash:
            raise RecordingError(
                f"submission commit {moment.commit[:12]} rebuilds to tree hash {th[:12]}…, but session.json "
                f"records {rec.meta.submission.tree_hash[:12]}…: the recording is inconsistent"
            )
    return ReplayResult(files=files, tree_hash=th, commit=state.base_commit, moment=moment, out_dir=str(out),
                        base_seq=state.base_seq, applied_events=state.applied, exact_commit=state.exact_commit,
                        left_out=state.left_out, note=moment.note or state.note)


# ----------------------------------------------------------------------------- results & index


def _now_stamp() -> str:
    return utcnow().strftime("%Y%m%dT%H%M%S%fZ")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None



def list_results(rec_dir: Path | str) -> list[dict[str, Any]]:
    """Every scoring result of a recording (submission and rescores), oldest first."""
    rec_dir = Path(rec_dir)
    results = rec_dir / "results"
    meta = load_meta(rec_dir)
    out: list[dict[str, Any]] = []
    if not results.is_dir():
        return out
    for folder in sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")):
        data = _read_json(folder / "result.json")
        if not isinstance(data, dict):
            continue
        label = _read_json(folder / "label.json")
        label = label if isinstance(label, dict) else {}
        kind = "submission" if folder.name.startswith("submission-") else label.get("kind", "rescore")
        moment = label.get("moment") or ({"spec": "submission"} if kind == "submission" else {})
        profiles = sorted((data.get("profiles") or {}).keys())
        out.append({
            "name": folder.name,
            "kind": kind,
            "path": f"results/{folder.name}/result.json",
            "grader_version": data.get("grader_version"),
            "profile": label.get("profile") or ("both" if len(profiles) > 1 else (profiles[0] if profiles else "")),
            "profiles": profiles,
            "moment": moment,
            "snapshot_hash": data.get("snapshot_hash"),
            "moment_tree_hash": label.get("tree_hash") or (meta.submission.tree_hash if kind == "submission"
                                                            and meta.submission else None),
            "task_hash": data.get("task_hash"),
            "created_at": data.get("created_at"),
            "summary": summarize_result(data),
        })
    out.sort(key=lambda r: (str(r.get("created_at") or ""), r["name"]))
    return out


def write_index(rec_dir: Path | str) -> Path:
    """(Re)write results/index.json from the result folders on disk."""
    rec_dir = Path(rec_dir)
    (rec_dir / "results").mkdir(exist_ok=True)
    path = rec_dir / "results" / INDEX_NAME
    curves = sorted(p.name for p in (rec_dir / "results").glob("curve-*.json"))
    write_json_atomic(path, {"format_version": READER_FORMAT_VERSION, "results": list_results(rec_dir),
                       "curves": [f"results/{c}" for c in curves]})
    return path


def latest_result(rec_dir: Path | str) -> dict[str, Any] | None:
    """The newest result entry (see list_results), or None."""
    results = list_results(rec_dir)
    return results[-1] if results else None


def load_task_for(task_id: str, catalog: Any | None) -> Any:
    """The task a recording names, from `catalog` (default: the shipped tasks)."""
    if catalog is None:
        from bridge.catalog import Catalog

        catalog = Catalog.from_options()
    return catalog.get(task_id)


ScoreFn = Callable[..., Any]


def score_moment(rec: Recording, moment: Moment, *, task: Any, profile: str, output_dir: Path | None,
                 use_cache: bool, score_fn: ScoreFn | None = None, run_id: str | None = None,
                 progress: Callable[[str], None] | None = None) -> tuple[Any, State]:
    """Materialise a moment into a temp dir and score it with the current grader."""
    if score_fn is None:
        from bridge.scoring.engine import score_repo as score_fn
    state = state_at(rec, moment)
    with tempfile.TemporaryDirectory(prefix="rgbridge-replay-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        materialise(rec, state, repo)
        result = score_fn(task, repo, profile=profile, output_dir=output_dir, use_cache=use_cache,
                          run_id=run_id, progress=progress)
    return result, state


def rescore(
    rec_dir: Path | str,
    *,
    profile: str = "both",
    at: str = "submission",
    catalog: Any | None = None,
    use_cache: bool = False,
    score_fn: ScoreFn | None = None,
    progress: Callable[[str], None] | None = None,
    verify_first: bool = True,
) -> Path:
    """Re-score a moment with the current grader; returns the new result.json path.

    The result goes beside the old ones in `results/rescore-<UTC stamp>-<grader>-<profile>/`
    (result.json, logs/, label.json) and `results/index.json` is rewritten. A recording that
    fails verification is refused (`verify_first=False` overrides); a sealed one is re-sealed.
    """
    from bridge import integrity
    from bridge.scoring.result import GRADER_VERSION

    rec_dir = Path(rec_dir)
    sealed = (rec_dir / integrity.INTEGRITY_NAME).is_file()
    if verify_first:
        report = integrity.verify_recording(rec_dir)
        if not report.ok:
            raise RecordingError(f"{rec_dir}: recording fails verification ({report.problems[0]}); not rescoring")
    rec = open_recording(rec_dir)
    moment = resolve_moment(rec, at)
    task = load_task_for(rec.meta.task_id, catalog)
    results = rec_dir / "results"
    results.mkdir(exist_ok=True)
    safe_grader = re.sub(r"[^A-Za-z0-9.]+", "_", GRADER_VERSION)
    name = f"rescore-{_now_stamp()}-{safe_grader}-{profile}"
    tmp_out = results / f".{name}.partial"
    shutil.rmtree(tmp_out, ignore_errors=True)
    tmp_out.mkdir()
    try:
        result, state = score_moment(rec, moment, task=task, profile=profile, output_dir=tmp_out,
                                     use_cache=use_cache, score_fn=score_fn,
                                     run_id=f"rescore-{rec.meta.session_id}"[:60], progress=progress)
        label = {
            "kind": "rescore",
            "grader_version": getattr(result, "grader_version", GRADER_VERSION),
            "profile": profile,
            "moment": moment.to_dict(),
            "tree_hash": state.tree_hash(),
            "base_commit": state.base_commit,
            "task_hash_recorded": rec.meta.task_hash,
            "task_hash_now": task.content_hash,
            "task_changed": bool(rec.meta.task_hash) and rec.meta.task_hash != task.content_hash,
            "use_cache": use_cache,
            "created_at": iso(utcnow()),
        }
        write_json_atomic(tmp_out / "label.json", label)
        final = results / name
        os.replace(tmp_out, final)
    except BaseException:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise
    write_index(rec_dir)
    if sealed:
        integrity.seal_recording(rec_dir)
    return final / "result.json"


def iter_recordings(folder: Path) -> Iterator[Path]:
    """Recording folders directly under `folder` (those with a session.json)."""
    for child in sorted(Path(folder).iterdir()):
        if child.is_dir() and (child / "session.json").is_file():
            yield child


def file_events(rec: Recording) -> Iterable[dict[str, Any]]:
    return (e for e in rec.events if e.get("type") in FILE_EVENTS)

