"""The verbs, each defined once: name, MCP tool name, description, typed arguments, result model
and what it does with the manager (how a verb is declared and run: bridge/sessions/verbspec.py).
The MCP server generates every tool from this table, the human panel (`rgbridge session start
--human`) dispatches its commands through it, and call logging takes the logged arguments from
the same definition, so the surfaces cannot drift apart.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Literal

from bridge.errors import SessionError
from bridge.sessions.answers import (
    PracticeCheck,
    StartTaskResult,
    SubmitResult,
    TaskList,
    TaskResult,
    start_next_step,
    submit_next_step,
    task_result,
)
from bridge.sessions.models import SessionStatus, TaskSpec
from bridge.sessions.verbspec import REQUIRED, CallContext, Opened, Param, Progress, Steps, Verb

if TYPE_CHECKING:
    from bridge.sessions.manager import SessionManager

log = logging.getLogger(__name__)

#: the longest one get_result call waits, and how often it reports progress while it does
MAX_WAIT_SECONDS = 50.0
PROGRESS_INTERVAL = 2.0
TASK_ID_HELP = "the task's id, as list_tasks shows it"


# ----------------------------------------------------------------------------- what each verb does


def _list_tasks(m: SessionManager, sid: None, ctx: CallContext) -> TaskList:
    return TaskList(tasks=m.list_tasks())


def _get_task(m: SessionManager, sid: None, ctx: CallContext, task_id: str) -> TaskSpec:
    return m.get_task(task_id)


def _start(
    m: SessionManager, sid: None, ctx: CallContext, task_id: str, workspace: str | None, mode: Literal["agent", "human"]
) -> Steps:
    m.get_task(task_id)  # unknown task: fail before touching any folder
    where = ctx.locate(workspace)
    log.info(
        "start_task %s in %s (workspace from %s; client %s %s; protocol %s)",
        task_id,
        where.path,
        where.source,
        ctx.client.name,
        ctx.client.version,
        ctx.protocol,
    )
    status = m.start(
        task_id, where.path, mode=mode, client=ctx.client, within=ctx.within, allow_nonempty=ctx.allow_nonempty
    )
    yield Opened(status.session_id)
    rules = m.rules(task_id)
    return StartTaskResult(
        **status.model_dump(), workspace_source=where.source, rules=rules, next_step=start_next_step(status)
    )


def _status(m: SessionManager, sid: str, ctx: CallContext) -> SessionStatus:
    return m.status(sid)


def _pause(m: SessionManager, sid: str, ctx: CallContext) -> SessionStatus:
    return m.pause(sid)


def _resume(m: SessionManager, sid: str, ctx: CallContext) -> SessionStatus:
    return m.resume(sid)


def _note(m: SessionManager, sid: str, ctx: CallContext, text: str) -> SessionStatus:
    return m.note(sid, text)


def _submit(m: SessionManager, sid: str, ctx: CallContext) -> SubmitResult:
    try:
        receipt = m.submit(sid, signal=ctx.signal)
    except SessionError as exc:
        status = m.status(sid)
        if status.job_id:
            raise SessionError(f"{exc}; its scoring job is {status.job_id}: call get_result") from None
        raise
    return SubmitResult(**receipt.model_dump(), next_step=submit_next_step(receipt))


def _result(m: SessionManager, sid: str, ctx: CallContext, wait_seconds: float = 0.0) -> Steps:
    try:
        wait = min(max(float(wait_seconds), 0.0), MAX_WAIT_SECONDS)
    except (TypeError, ValueError):
        wait = 0.0
    started = time.monotonic()
    status = m.result(sid, wait_seconds=0.0)
    while status.state in ("queued", "running"):
        remaining = wait - (time.monotonic() - started)
        if remaining <= 0:
            break
        yield Progress(round(time.monotonic() - started, 3), wait, status.message or f"scoring {status.state}")
        # Short slices keep progress flowing and let a cancelled call return promptly.
        status = m.result(sid, wait_seconds=min(PROGRESS_INTERVAL, remaining))
    return task_result(status, round(time.monotonic() - started, 3))


def _quit(m: SessionManager, sid: str, ctx: CallContext, reason: str = "") -> SessionStatus:
    return m.quit(sid, reason)


def _practice_check(m: SessionManager, sid: str, ctx: CallContext) -> PracticeCheck:
    return PracticeCheck(**m.practice_check(sid))


# ----------------------------------------------------------------------------- the table

LIST_TASKS = Verb(
    "tasks",
    "list_tasks",
    "List the benchmark tasks: id, title, lang, framework, port, difficulty.",
    (),
    TaskList,
    _list_tasks,
    read_only=True,
    idempotent=True,
    session="none",
)

GET_TASK = Verb(
    "task",
    "get_task",
    "One task's README (the whole specification) and the rules of the exercise.",
    (Param("task_id", str, REQUIRED, TASK_ID_HELP),),
    TaskSpec,
    _get_task,
    read_only=True,
    idempotent=True,
    session="none",
)

#: `start` opens a session rather than acting on one; the adapter's CallContext says where a
#: `workspace` argument leads (the MCP server confines it to its configured workspace).
START = Verb(
    "start",
    "start_task",
    "Open a recorded session for a task: seed the workspace with its README, start the "
    "recorder and the working clock. `workspace` is optional: the server's configured "
    "workspace is used, and an argument may only name it or a folder inside it.",
    (
        Param("task_id", str, REQUIRED, TASK_ID_HELP),
        Param(
            "workspace",
            str | None,
            None,
            "the folder to work in: the server's configured workspace or a folder inside it "
            "(without it: the configured workspace)",
        ),
        Param("mode", Literal["agent", "human"], "agent", "'agent' (an AI agent works) or 'human' (a person works)"),
    ),
    StartTaskResult,
    _start,
    title="Start a task",
    session="new",
)

#: The verbs that act on an open session.
VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb(
            "status",
            "task_status",
            "Session state, working clock, files changed, recorder and submission/scoring state.",
            (),
            SessionStatus,
            _status,
            read_only=True,
            idempotent=True,
        ),
        Verb(
            "pause",
            "pause_task",
            "Stop the working clock (human-in-the-loop breaks). The recorder keeps watching.",
            (),
            SessionStatus,
            _pause,
            idempotent=True,
        ),
        Verb(
            "resume",
            "resume_task",
            "Start the working clock again after pause_task.",
            (),
            SessionStatus,
            _resume,
            idempotent=True,
        ),
        Verb(
            "note",
            "add_note",
            "Record a free-text note in the session's recording.",
            (Param("text", str, REQUIRED, "the note's text"),),
            SessionStatus,
            _note,
        ),
        Verb(
            "submit",
            "submit_task",
            "The completion signal: seal a snapshot of the workspace and start scoring in the "
            "background. Returns at once with a job id; then poll get_result until state is done. "
            "Call it once, when the work is finished: there is no second submission.",
            (),
            SubmitResult,
            _submit,
            title="Submit for scoring",
            final=True,
        ),
        Verb(
            "result",
            "get_result",
            "Scoring state and, when done, the result per profile (outcome, DSR, Pass@1, AC).\n\n"
            "After submit_task, call this until state is 'done' or 'failed'. wait_seconds long-polls: "
            "the call returns as soon as scoring finishes or the wait runs out. The wait is capped "
            f"at {MAX_WAIT_SECONDS:g} seconds so that a call stays under the 60-second tool-call "
            "timeout most clients apply; a cancelled call stops waiting at once.",
            (
                Param(
                    "wait_seconds",
                    float,
                    0.0,
                    f"long-poll: wait up to this many seconds for scoring to finish (0 to {MAX_WAIT_SECONDS:g}; "
                    f"more counts as {MAX_WAIT_SECONDS:g})",
                ),
            ),
            TaskResult,
            _result,
            read_only=True,
            idempotent=True,
            recorded_ok=True,
        ),
        Verb(
            "quit",
            "quit_task",
            "End the session without scoring (the recording is kept).",
            (Param("reason", str, "", "why the session ends"),),
            SessionStatus,
            _quit,
            destructive=True,
            title="Quit without scoring",
            final=True,
        ),
    )
}

#: Practice mode only (`rgbridge serve --practice`): a deploy-only check, recorded as such.
PRACTICE_CHECK = Verb(
    "check",
    "check_deployment",
    "Practice mode: build and start the current workspace and report whether the service "
    "answers HTTP on its port. No golden test runs; the check is recorded in the session.",
    (),
    PracticeCheck,
    _practice_check,
    title="Practice: does it deploy?",
)

BY_TOOL: dict[str, Verb] = {v.tool: v for v in (*VERBS.values(), START)}


def mcp_verbs(*, practice: bool) -> tuple[Verb, ...]:
    """Every verb the MCP server offers as a tool, in the order clients have always seen them."""
    listed = (LIST_TASKS, GET_TASK, *(VERBS[n] for n in ("status", "pause", "resume", "note", "quit", "result")))
    return (*listed, START, VERBS["submit"], *((PRACTICE_CHECK,) if practice else ()))
