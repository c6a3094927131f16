"""What a session is on disk and over the wire: session.json (`SessionRecord`, format version 1)
and the typed answers of the session verbs (status, submit receipt, result).

`SessionRecord` and its parts extend the recording format's model of session.json
(bridge/recording/format.py) with the stricter types this layer writes; they keep the format's
field order, so session.json reads the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from bridge.fs.paths import safe_relative
from bridge.recording.format import FORMAT_VERSION, ClientMeta, JobMeta, SessionMeta, SubmissionMeta
from bridge.release import exact_version
from bridge.scoring.result import summarize_result
from bridge.scoring.types import ProfileChoice, ProgressFn, ScoreRequest
from bridge.sessions import contamination
from bridge.tasks.model import Task

Profile = ProfileChoice  # the profiles a session scores under (bridge/scoring/types.py)

SENTINEL = "SUBMIT"
SUBMIT_RETRY_SECONDS = 5.0  # a time-limit submit the disk refused is retried this often
#: files an IDE may put in a fresh workspace that do not make it "non-empty"
IDE_FILES = frozenset({".mcp.json", ".DS_Store"})

SessionState = Literal["active", "paused", "submitted", "scored", "quit"]
JobState = Literal["not_submitted", "queued", "running", "done", "failed"]
#: how a submission reached the bridge; `time_limit` is the session's limit or a run's agent cut at
#: its time limit, `resource_limit` a run's agent ended by one of its attempt's limits (memory,
#: processes, disk), `cost_limit` a run's agent ended by the model gateway once `--max-cost` was
#: spent (bridge/agents/gateway/), `agent_exit` an agent a run drove that ended without submitting
Signal = Literal["mcp", "sentinel", "cli", "time_limit", "resource_limit", "cost_limit", "agent_exit"]


class Scorer(Protocol):
    """Scores a materialised snapshot as `request` asks; writes result.json and logs into
    `request.output_dir` and tells its progress to `progress`."""

    def __call__(self, task: Task, repo_dir: Path, request: ScoreRequest, progress: ProgressFn, /) -> BaseModel: ...


class ClientInfo(ClientMeta):
    model_config = ConfigDict(extra="ignore")
    protocol: str = ""  # MCP protocol version the client negotiated, when known


class TaskSummary(BaseModel):
    id: str
    title: str
    lang: str
    framework: str
    port: int
    difficulty: str


class TaskSpec(TaskSummary):
    readme: str
    rules: str
    seed_files: list[str] = Field(default_factory=list)


class Submission(SubmissionMeta):
    model_config = ConfigDict(extra="ignore")
    signal: Signal
    stable: bool
    seal_seconds: float
    files: int


class Job(JobMeta):
    model_config = ConfigDict(extra="ignore")
    state: JobState = "queued"


class SessionRecord(SessionMeta):
    """The content of session.json (format documented in docs/recording-format.md)."""

    model_config = ConfigDict(extra="ignore")
    format_version: int = FORMAT_VERSION
    bridge_version: str = Field(default_factory=exact_version)
    task_hash: str
    task_version: str
    task_source: str
    task_port: int
    workspace: str
    mode: Literal["agent", "human"] = "agent"
    client: ClientInfo = Field(default_factory=ClientInfo)
    state: SessionState = "active"
    submission: Submission | None = None
    job: Job | None = None
    failure: str | None = None  # the last failed operation (e.g. a submit the disk refused); None when fine


class SessionStatus(BaseModel):
    session_id: str
    task_id: str
    state: SessionState
    mode: str
    workspace: str
    recording: str
    clock_running: bool
    working_seconds: float
    time_limit: int
    files_changed: int
    recorder_mode: str
    recorder_degraded: str | None
    submission: Submission | None
    scoring: JobState
    job_id: str | None
    attempt: int = 1
    failure: str | None = None
    message: str = ""


class SubmitReceipt(BaseModel):
    session_id: str
    job_id: str
    commit: str
    tree_hash: str
    stable: bool
    message: str


class ResultStatus(BaseModel):
    session_id: str
    state: JobState
    job_id: str | None = None
    attempt: int = 1
    message: str = ""
    result: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    #: a golden test or solution file was opened while the session was open (bridge/sessions/contamination.py)
    contaminated: bool = False
    contamination: list[dict[str, Any]] = Field(default_factory=list)


def result_status(record: SessionRecord, rec_dir: Path) -> ResultStatus:
    """What get_result reports for a session: job state and, when done, the per-profile summary."""
    job = record.job
    if job is None:
        return contamination.annotate(
            ResultStatus(
                session_id=record.session_id,
                state="not_submitted",
                attempt=record.attempt,
                message="not submitted yet: call submit_task when the work is done",
            ),
            rec_dir,
        )
    status = ResultStatus(
        session_id=record.session_id,
        state=job.state,
        job_id=job.job_id,
        attempt=record.attempt,
        message=job.error or job.message,
    )
    if job.state == "done" and job.result_dir:
        path = rec_dir / safe_relative(job.result_dir) / "result.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        status.result = data
        status.summary = summarize_result(data)
    return contamination.annotate(status, rec_dir)
