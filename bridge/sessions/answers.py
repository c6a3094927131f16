"""The answers agents get from the verbs that add to the manager's records: the task list, the
opened session with its rules, the submit receipt and the scoring state, each with the next step
to take (bridge/sessions/verbs.py builds them).

Field names and model names are part of the MCP tools' output schemas: renaming one changes
what clients see.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from bridge.sessions.models import ResultStatus, SessionStatus, SubmitReceipt, TaskSummary


class TaskList(BaseModel):
    tasks: list[TaskSummary]


class StartTaskResult(SessionStatus):
    workspace_source: str = Field(description="which configuration chose the workspace")
    rules: str
    next_step: str


class PracticeCheck(BaseModel):
    """A practice-mode deploy-only check (no golden test runs)."""

    commit: str
    deployed: bool
    message: str
    outcome: str
    time_to_ready: float | None = None


class SubmitResult(SubmitReceipt):
    next_step: str


class TaskResult(BaseModel):
    """Scoring state of a session. Only the per-profile summary is returned to the agent;
    the full result (with logs) stays in the recording for researchers."""

    session_id: str
    state: str
    job_id: str | None = None
    attempt: int = 1
    message: str = ""
    summary: dict[str, Any] | None = None
    #: a golden test or solution file was opened while the session was open (path, kind, time)
    contaminated: bool = False
    contamination: list[dict[str, Any]] = Field(default_factory=list)
    waited_seconds: float = 0.0
    next_step: str


def start_next_step(status: SessionStatus) -> str:
    return (
        f"Build the service in {status.workspace} (README.md there is the spec). "
        "When done call submit_task, then poll get_result."
    )


def submit_next_step(receipt: SubmitReceipt) -> str:
    return (
        f"Scoring runs in the background (job {receipt.job_id}); it takes minutes. "
        "Call get_result with wait_seconds=50 until state is done."
    )


def result_next_step(status: ResultStatus) -> str:
    if status.state == "not_submitted":
        return "Not submitted yet: finish the work, then call submit_task."
    if status.state in ("queued", "running"):
        return "Scoring is still running: call get_result again (wait_seconds up to 50)."
    if status.state == "failed":
        return "Scoring failed for a reason outside your work (see message); the session is over."
    return "Scoring finished; the session is over."


def task_result(status: ResultStatus, waited_seconds: float) -> TaskResult:
    """What get_result returns: the scoring state without the full result, and the next step."""
    return TaskResult(
        session_id=status.session_id,
        state=status.state,
        job_id=status.job_id,
        attempt=status.attempt,
        message=status.message,
        summary=status.summary,
        contaminated=status.contaminated,
        contamination=status.contamination,
        waited_seconds=waited_seconds,
        next_step=result_next_step(status),
    )
