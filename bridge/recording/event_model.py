"""The typed model of `events.jsonl` records, format version 1 (docs/recording-format.md §2): one
pydantic model per event type, joined in a union on `type`. The writer (bridge/recording/events.py)
checks every record against it before writing; the reader (bridge/recording/reader.py) checks
every record it loads, so code reading a recording never meets a field of the wrong shape.

Every record carries `seq`, `t`, `mono`, `type` and, since this model, `work`: the session's
working seconds (its clock, pauses excluded) when the event was written; older recordings lack
it. Fields a type does not declare are kept (extra="allow"): adding a field or a type does not
bump the format (a type this reader does not know is read as `OtherEvent`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class EventBase(BaseModel):
    model_config = ConfigDict(extra="allow")

    seq: int
    t: str
    mono: float
    type: str
    #: working seconds of the session when the event was written (absent in older recordings)
    work: float | None = None


class OtherEvent(EventBase):
    """A type this reader does not know: read with its common fields only."""


class LogOpened(EventBase):
    type: Literal["log_opened"]
    pid: int | None = None


class Seed(EventBase):
    type: Literal["seed"]
    files: list[str] = []


class SessionStart(EventBase):
    type: Literal["session_start"]
    session_id: str
    task_id: str
    task_hash: str = ""
    mode: str = "agent"
    client: dict[str, Any] = {}
    workspace: str = ""
    run_id: str = ""
    attempt: int = 1


class ErrorEvent(EventBase):
    type: Literal["start_aborted", "submit_failed", "recorder_error", "score_failed", "seal_failed"]
    error: str
    job_id: str | None = None


class RecorderStarted(EventBase):
    type: Literal["recorder_started"]
    mode: str
    files: int = 0
    watches: int = 0
    settle_seconds: float | None = None


class RecorderDegraded(EventBase):
    type: Literal["recorder_degraded"]
    reason: str | None = None
    mode: str = ""


class RecorderStopped(EventBase):
    type: Literal["recorder_stopped"]
    files_changed: int = 0
    events_logged: int = 0


class FileEvent(EventBase):
    type: Literal["file_created", "file_modified"]
    path: str
    sha256: str | None = None  # absent when oversized
    size: int | None = None
    mode: str | None = None  # git octal: 100644, 100755, 120000
    oversized: bool = False
    synthetic: bool = False


class FileDeleted(EventBase):
    type: Literal["file_deleted"]
    path: str
    synthetic: bool = False


class FileMoved(EventBase):
    type: Literal["file_moved"]
    path: str
    dest: str
    sha256: str | None = None
    size: int | None = None
    mode: str | None = None


class Reconcile(EventBase):
    type: Literal["reconcile"]
    files: int = 0
    synthetic: int = 0
    created: int = 0
    modified: int = 0
    deleted: int = 0


class Checkpoint(EventBase):
    type: Literal["checkpoint"]
    reason: str
    commit: str
    tree_hash: str
    files: int = 0
    changes: int = 0
    reconciled: int = 0
    new_commit: bool = True
    left_out: list[str] = []
    stable: bool | None = None


class Sentinel(EventBase):
    type: Literal["sentinel"]
    path: str = ""


class ClockEvent(EventBase):
    type: Literal["clock_start", "clock_stop"]
    working_seconds: float


class Note(EventBase):
    type: Literal["note"]
    text: str
    working_seconds: float | None = None


class McpCall(EventBase):
    type: Literal["mcp_call"]
    tool: str
    arguments: dict[str, Any] = {}
    ok: bool = True
    error: str | None = None


class Submit(EventBase):
    type: Literal["submit"]
    signal: str
    commit: str
    tree_hash: str
    stable: bool = True
    files: int = 0
    working_seconds: float | None = None
    job_id: str | None = None


class ScoreStart(EventBase):
    type: Literal["score_start"]
    job_id: str
    profile: str = "both"


class Score(EventBase):
    type: Literal["score"]
    job_id: str
    summary: dict[str, Any] = {}


class ScoreResume(EventBase):
    type: Literal["score_resume"]
    job_id: str | None = None


class PracticeCheck(EventBase):
    type: Literal["practice_check"]
    commit: str
    deployed: bool
    message: str = ""
    outcome: str = ""
    time_to_ready: float | None = None


class GoldenAccess(EventBase):
    type: Literal["golden_access"]
    path: str
    kind: str


class GoldenWatchWarning(EventBase):
    type: Literal["golden_watch_warning"]
    message: str


class Quit(EventBase):
    type: Literal["quit"]
    reason: str = ""
    working_seconds: float | None = None


class Attach(EventBase):
    type: Literal["reattach", "detach"]
    pid: int | None = None
    state: str | None = None


class AgentRun(EventBase):
    """An agent CLI the run drove ended (bridge/agents/attempt/lifecycle.py): who it was, how it ended."""

    type: Literal["agent_run"]
    agent: str
    version: str = ""
    model: str | None = None
    ended: str  # "exit" | "time_limit" | "resource_limit" | "stopped"
    exit_code: int | None = None
    agent_seconds: float = 0.0
    tool_calls: int = 0
    steps: int = 0
    trajectory: str | None = None  # relative path of its ATIF file in the recording


KnownEvent = Annotated[
    LogOpened
    | Seed
    | SessionStart
    | ErrorEvent
    | RecorderStarted
    | RecorderDegraded
    | RecorderStopped
    | FileEvent
    | FileDeleted
    | FileMoved
    | Reconcile
    | Checkpoint
    | Sentinel
    | ClockEvent
    | Note
    | McpCall
    | Submit
    | ScoreStart
    | Score
    | ScoreResume
    | PracticeCheck
    | GoldenAccess
    | GoldenWatchWarning
    | Quit
    | Attach
    | AgentRun,
    Field(discriminator="type"),
]
Event = KnownEvent | OtherEvent

_KNOWN: TypeAdapter[Any] = TypeAdapter(KnownEvent)
KNOWN_TYPES: frozenset[str] = frozenset(
    value for member in get_args(get_args(KnownEvent)[0]) for value in get_args(member.model_fields["type"].annotation)
)


class EventShapeError(ValueError):
    """A record that does not have its type's fields (the message names the first problem)."""


def parse_event(record: dict[str, Any]) -> Event:
    """The typed event of one record; EventShapeError when it does not fit its type."""
    known = record.get("type") in KNOWN_TYPES
    try:
        parsed: Event = _KNOWN.validate_python(record) if known else OtherEvent.model_validate(record)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = err["loc"][1:] if known else err["loc"]  # a known type's errors start with its tag
        where = ".".join(str(p) for p in loc) or "record"
        kind = record.get("type")
        raise EventShapeError(f"{kind if isinstance(kind, str) else 'event'}: {where}: {err['msg']}") from None
    return parsed
