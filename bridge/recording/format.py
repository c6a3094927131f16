"""The recording format in one place (docs/recording-format.md): its version, the store's refs
and the model of `session.json` as readers rely on it. The session layer's `SessionRecord`
(bridge/sessions/models.py) extends `SessionMeta` with the stricter types it writes; readers
load `SessionMeta`, which tolerates unknown fields and gives older recordings' missing fields
their defaults.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge.errors import RecordingError
from bridge.recording.clock import Clock

#: the recording format this bridge writes and the newest it reads (docs/recording-format.md)
FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = frozenset({1})
#: the newest checkpoint commit of the shadow store (docs/recording-format.md §3)
HEAD_REF = "refs/heads/main"
#: the sealed submission commit (equals session.json `submission.commit`)
SUBMISSION_REF = "refs/rgbridge/submission"


class ClientMeta(BaseModel):
    """session.json `client`: the MCP client (or CLI) that started the session."""

    model_config = ConfigDict(extra="allow")
    name: str = "unknown"
    version: str = ""


class SubmissionMeta(BaseModel):
    """session.json `submission`: the sealed submission."""

    model_config = ConfigDict(extra="allow")
    signal: str = ""
    at: str
    commit: str
    tree_hash: str
    stable: bool = True
    seal_seconds: float = 0.0
    files: int = 0


class JobMeta(BaseModel):
    """session.json `job`: the scoring job of the submission."""

    model_config = ConfigDict(extra="allow")
    job_id: str
    state: str = ""
    message: str = ""
    profile: str = "both"
    started_at: str | None = None
    finished_at: str | None = None
    result_dir: str | None = None
    error: str | None = None


class SessionMeta(BaseModel):
    """The fields of a format-1 session.json (kept as is for old recordings: every field a
    version-1 writer may have left out has a default, unknown fields are kept)."""

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
    run_id: str = ""  # "" in recordings made before attempts (bridge/sessions/attempts.py)
    attempt: int = 1
    mode: str = "agent"
    practice: bool = False
    client: ClientMeta = Field(default_factory=ClientMeta)
    created_at: str
    ended_at: str | None = None
    state: str = "active"
    clock: Clock = Field(default_factory=Clock)
    notes: int = 0
    submission: SubmissionMeta | None = None
    job: JobMeta | None = None
    quit_reason: str | None = None


def check_format_version(value: Any, where: str) -> int:
    """Accept every version up to the current one; refuse newer ones with a clear message."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RecordingError(f"{where}: invalid format_version {value!r}")
    if value > FORMAT_VERSION:
        raise RecordingError(
            f"{where}: recording format {value} is newer than this reader (supports up to "
            f"{FORMAT_VERSION}); upgrade repogenesis-bridge to read it"
        )
    if value not in SUPPORTED_FORMAT_VERSIONS:
        raise RecordingError(f"{where}: recording format {value} is not supported")
    return value
