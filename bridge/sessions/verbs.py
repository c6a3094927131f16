"""The session verbs, each defined once: name, MCP tool name, description, typed arguments,
result model and the manager call it makes. The MCP server generates its session tools from
this table, the human panel (`rgbridge session start --human`) dispatches its commands through
it, and call logging takes the logged arguments from the same definition, so the three
surfaces cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from bridge.sessions.models import ResultStatus, SessionStatus, SubmitReceipt

if TYPE_CHECKING:
    from bridge.sessions.manager import SessionManager


#: default of an argument that must be given
REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One argument of a verb besides the session id."""

    name: str
    type: Any
    default: Any
    help: str


@dataclass(frozen=True)
class Verb:
    name: str  # the panel / CLI word
    tool: str  # the MCP tool name
    doc: str  # description shown to agents and in help
    params: tuple[Param, ...]
    result: type[BaseModel]
    #: (manager, session id, **params) -> result
    call: Callable[..., BaseModel]
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    title: str | None = None
    #: asks for confirmation in the human panel (cannot be undone)
    final: bool = False

    def invoke(self, manager: SessionManager, session_id: str, **arguments: Any) -> BaseModel:
        unknown = set(arguments) - {p.name for p in self.params}
        if unknown:
            raise TypeError(f"{self.name}: unknown argument(s) {sorted(unknown)}")
        missing = [p.name for p in self.params if p.default is REQUIRED and p.name not in arguments]
        if missing:
            raise TypeError(f"{self.name}: missing argument(s) {missing}")
        values = {p.name: arguments.get(p.name, p.default) for p in self.params}
        return self.call(manager, session_id, **values)

    def logged_arguments(self, session_id: str | None, arguments: dict[str, Any]) -> dict[str, Any]:
        """What a call's log line records: every declared argument (defaults filled in) and the
        session id, never anything undeclared."""
        logged = {p.name: arguments.get(p.name, None if p.default is REQUIRED else p.default) for p in self.params}
        logged["session_id"] = session_id
        return logged


def _status(m: SessionManager, sid: str) -> SessionStatus:
    return m.status(sid)


def _pause(m: SessionManager, sid: str) -> SessionStatus:
    return m.pause(sid)


def _resume(m: SessionManager, sid: str) -> SessionStatus:
    return m.resume(sid)


def _note(m: SessionManager, sid: str, text: str) -> SessionStatus:
    return m.note(sid, text)


def _submit(m: SessionManager, sid: str, signal: str = "mcp") -> SubmitReceipt:
    return m.submit(sid, signal=signal)  # type: ignore[arg-type]


def _result(m: SessionManager, sid: str, wait_seconds: float = 0.0) -> ResultStatus:
    return m.result(sid, wait_seconds=wait_seconds)


def _quit(m: SessionManager, sid: str, reason: str = "") -> SessionStatus:
    return m.quit(sid, reason)


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
            (Param("text", str, REQUIRED, "the note"),),
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
            SubmitReceipt,
            _submit,
            title="Submit for scoring",
            final=True,
        ),
        Verb(
            "result",
            "get_result",
            "Scoring state and, when done, the result per profile (outcome, DSR, Pass@1, AC).\n\n"
            "After submit_task, call this until state is 'done' or 'failed'. wait_seconds (0-50) "
            "long-polls: the call returns as soon as scoring finishes or the wait runs out.",
            (Param("wait_seconds", float, 0.0, "long-poll up to this many seconds"),),
            ResultStatus,
            _result,
            read_only=True,
            idempotent=True,
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


def _opens_a_session(m: SessionManager, sid: str, **arguments: Any) -> BaseModel:
    raise TypeError("start opens a session rather than acting on one: call SessionManager.start")


#: `start` opens a session rather than acting on one; its arguments are declared here so that
#: every verb's surface is in this table (the adapters add where the workspace comes from).
START = Verb(
    "start",
    "start_task",
    "Open a recorded session for a task: seed the workspace with its README, start the "
    "recorder and the working clock. `workspace` is optional: the server's configured "
    "workspace is used, and an argument may only name it or a folder inside it.",
    (
        Param("task_id", str, REQUIRED, "the task"),
        Param("workspace", str | None, None, "the workspace"),
        Param("mode", str, "agent", "agent or human"),
    ),
    SessionStatus,
    _opens_a_session,
    title="Start a task",
)

BY_TOOL: dict[str, Verb] = {v.tool: v for v in (*VERBS.values(), START)}
