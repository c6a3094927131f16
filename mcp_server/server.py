"""The MCP surface over `bridge.sessions.manager.SessionManager`: tools, a resource template, a prompt.

The adapter holds no benchmark logic. It resolves which workspace and session a call means,
moves blocking manager calls off the event loop, turns bridge errors into tool errors, and
logs every tool call (ok or not) into the recording through `manager.log_call`.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from bridge.errors import BridgeError, SessionError
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import (
    ClientInfo,
    ResultStatus,
    SessionStatus,
    SubmitReceipt,
    TaskSpec,
    TaskSummary,
)
from bridge.sessions.rules import INSTRUCTIONS, solve_prompt
from bridge.sessions.verbs import START, VERBS, Verb
from mcp_server.ownership import Caller, Owners
from mcp_server.workspace import WorkspaceRoot, find_root, is_inside, resolve_workspace

log = logging.getLogger("mcp_server")
T = TypeVar("T")

SERVER_NAME = "rgbridge"
MAX_WAIT_SECONDS = 50.0
PROGRESS_INTERVAL = 2.0


# Set by the call-log middleware for each tools/call; a tool handler marks it as handled so
# the middleware only logs calls that never reached a handler (bad arguments, unknown tool).
_CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("rgbridge_call", default=None)


# --------------------------------------------------------------------------- output models
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


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def _annotations(*, idempotent: bool, destructive: bool = False, title: str | None = None) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def client_info_of(ctx: Context | None) -> ClientInfo:
    """The calling IDE's name/version from the handshake (or the 2026 envelope), if any."""
    try:
        params = ctx.session.client_params if ctx is not None else None
    except Exception:  # noqa: BLE001 - outside a request, or a transport without a session
        params = None
    info = getattr(params, "client_info", None)
    if info is None:
        return ClientInfo()
    try:
        protocol = str(ctx.protocol_version or "") if ctx is not None else ""
    except Exception:  # noqa: BLE001 - not every transport exposes it
        protocol = ""
    return ClientInfo(
        name=str(getattr(info, "name", "") or "unknown"),
        version=str(getattr(info, "version", "") or ""),
        protocol=protocol,
    )


def _protocol_of(ctx: Context | None) -> str | None:
    try:
        return ctx.protocol_version if ctx is not None else None
    except Exception:  # noqa: BLE001
        return None


class BridgeTools:
    """State and helpers shared by the tool functions of one server."""

    def __init__(self, manager: SessionManager, root: WorkspaceRoot | None) -> None:
        self.manager = manager
        self.root = root
        #: which client owns which session, and each client's current one (mcp_server/ownership.py)
        self.owners = Owners()

    # ------------------------------------------------------------------ logging
    def log(
        self, session_id: str | None, tool: str, arguments: dict[str, Any], *, ok: bool, error: str | None = None
    ) -> None:
        try:
            self.manager.log_call(session_id, tool, arguments, ok=ok, error=error)
        except Exception:  # noqa: BLE001 - a failing log must never turn a result into an error
            log.exception("could not log call %s", tool)

    async def run(self, tool: str, arguments: dict[str, Any], body: Callable[[dict[str, Any]], Awaitable[T]]) -> T:
        """Run a tool body; log it; map failures to ToolError with a one-line message."""
        call = _CALL.get()
        if call is not None:
            call["handled"] = True
        box: dict[str, Any] = {"session_id": None}
        try:
            result = await body(box)
        except ToolError as exc:
            await self._log_async(box["session_id"], tool, arguments, ok=False, error=str(exc))
            raise
        except BridgeError as exc:
            await self._log_async(box["session_id"], tool, arguments, ok=False, error=str(exc))
            raise ToolError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - unexpected: short message out, traceback to stderr
            log.exception("tool %s failed unexpectedly", tool)
            await self._log_async(
                box["session_id"], tool, arguments, ok=False, error=f"internal error: {type(exc).__name__}: {exc}"
            )
            raise ToolError(f"internal error in {tool} ({type(exc).__name__}); see the server log") from None
        await self._log_async(box["session_id"], tool, arguments, ok=True)
        return result

    async def _log_async(
        self, session_id: str | None, tool: str, arguments: dict[str, Any], *, ok: bool, error: str | None = None
    ) -> None:
        await anyio.to_thread.run_sync(functools.partial(self.log, session_id, tool, arguments, ok=ok, error=error))

    # ------------------------------------------------------------------ session lookup
    def session_for(self, session_id: str | None, caller: Caller, *, recorded_ok: bool = False) -> str:
        """The session a call refers to: the given id (if this client may use it), else this
        client's current session, else its most recent open session inside the workspace.
        `recorded_ok`: the id may also name a session only on disk (finished before a restart)."""
        if session_id:
            if recorded_ok and session_id not in self.manager.sessions:
                workspace = self.manager.recorded(session_id)[0].workspace
                sid = session_id
            else:
                sid = self.manager.resolve(session_id)
                workspace = self.manager.status(sid).workspace
            self.owners.check(caller, sid)
            if not is_inside(self.root, workspace):
                raise SessionError(f"session {sid} works in {workspace}, outside this server's workspace")
            return sid
        statuses = [s for s in self.manager.active() if is_inside(self.root, s.workspace)]
        ids = set(self.owners.mine(caller, [s.session_id for s in statuses]))
        statuses = [s for s in statuses if s.session_id in ids]
        current = self.owners.current(caller)
        if current in ids:
            return current
        open_ones = [s for s in statuses if s.state in ("active", "paused")]
        pool = open_ones or statuses
        if not pool:
            raise SessionError("no active session: call start_task first")
        return max(pool, key=lambda s: s.session_id).session_id  # ids start with a UTC timestamp


def _thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Awaitable[T]:
    return anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def _result_next_step(status: ResultStatus) -> str:
    if status.state == "not_submitted":
        return "Not submitted yet: finish the work, then call submit_task."
    if status.state in ("queued", "running"):
        return "Scoring is still running: call get_result again (wait_seconds up to 50)."
    if status.state == "failed":
        return "Scoring failed for a reason outside your work (see message); the session is over."
    return "Scoring finished; the session is over."


class CallLogMiddleware:
    """Logs tools/call requests that fail before any tool handler runs (schema errors,
    unknown tool names), so the recording holds every call, not only the well-formed ones."""

    def __init__(self, tools: BridgeTools) -> None:
        self.tools = tools
        self._ctx: contextvars.ContextVar[Any] = contextvars.ContextVar("rgbridge_call_ctx", default=None)

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if getattr(ctx, "method", None) != "tools/call":
            return await call_next(ctx)
        call: dict[str, Any] = {}
        token = _CALL.set(call)
        self._ctx.set(ctx)
        params = ctx.params if isinstance(getattr(ctx, "params", None), dict) else {}
        name = str(params.get("name", "?"))
        raw = params.get("arguments")
        arguments: dict[str, Any] = raw if isinstance(raw, dict) else {}
        try:
            result = await call_next(ctx)
        except Exception as exc:
            if not call.get("handled"):
                await self._log(name, arguments, ok=False, error=str(exc).splitlines()[0] if str(exc) else repr(exc))
            raise
        finally:
            _CALL.reset(token)
        if not call.get("handled"):
            is_error = bool(result.get("isError")) if isinstance(result, dict) else False
            error = None
            if is_error:
                content = result.get("content") or [{}]
                error = str(content[0].get("text", "")).splitlines()[0][:500] if content else "error"
            await self._log(name, arguments, ok=not is_error, error=error)
        return result

    async def _log(self, name: str, arguments: dict[str, Any], *, ok: bool, error: str | None) -> None:
        current = self.tools.owners.current(self.tools.owners.caller(self._ctx.get()))
        sid = current if current in {s.session_id for s in self.tools.manager.active()} else None
        await anyio.to_thread.run_sync(functools.partial(self.tools.log, sid, name, arguments, ok=ok, error=error))


#: Session verbs whose MCP tool is the verb itself (bridge/sessions/verbs.py); submit, result and
#: start add adapter behaviour (progress, next steps, workspace choice) and are written out below.
SIMPLE_VERBS = tuple(VERBS[name] for name in ("status", "pause", "resume", "note", "quit"))


def _verb_annotations(verb: Verb) -> ToolAnnotations:
    if verb.read_only:
        return READ_ONLY
    return _annotations(idempotent=verb.idempotent, destructive=verb.destructive, title=verb.title)


def _add_session_verb(server: MCPServer, tools: BridgeTools, verb: Verb) -> None:
    """Register `verb` as an MCP tool: its declared arguments, then an optional session_id.

    The SDK reads a tool's input schema from the function signature, so the generated function
    carries one built from the verb's parameters."""

    async def tool(ctx: Context, **kwargs: Any) -> BaseModel:
        session_id = kwargs.pop("session_id", None)

        async def body(box: dict[str, Any]) -> BaseModel:
            caller = tools.owners.caller(ctx.request_context)
            box["session_id"] = sid = await _thread(tools.session_for, session_id, caller)
            return await _thread(functools.partial(verb.invoke, tools.manager, sid, **kwargs))

        return await tools.run(verb.tool, verb.logged_arguments(session_id, kwargs), body)

    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)]
    params += [inspect.Parameter(p.name, kw, default=p.default, annotation=p.type) for p in verb.params]
    params.append(inspect.Parameter("session_id", kw, default=None, annotation=str | None))
    tool.__signature__ = inspect.Signature(params, return_annotation=verb.result)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": verb.result}
    tool.__name__ = tool.__qualname__ = verb.tool
    tool.__doc__ = verb.doc
    server.add_tool(tool, name=verb.tool, description=verb.doc, annotations=_verb_annotations(verb))


def build_server(
    manager: SessionManager,
    *,
    default_workspace: Path | None = None,
    environ: dict[str, str] | None = None,
    name: str = SERVER_NAME,
) -> MCPServer:
    """The MCP server over `manager`. `default_workspace` is the `--workspace` option."""
    from bridge import __version__

    root = find_root(default_workspace, environ)
    tools = BridgeTools(manager, root)
    server = MCPServer(
        name=name,
        title="RepoGenesis bridge",
        instructions=INSTRUCTIONS,
        version=__version__,
        middleware=[CallLogMiddleware(tools)],
    )
    server.bridge_tools = tools  # type: ignore[attr-defined]  # for tests and the CLI

    # ------------------------------------------------------------------ read-only tools
    @server.tool(annotations=READ_ONLY)
    async def list_tasks() -> TaskList:
        """List the benchmark tasks: id, title, lang, framework, port, difficulty."""

        async def body(box: dict[str, Any]) -> TaskList:
            return TaskList(tasks=await _thread(manager.list_tasks))

        return await tools.run("list_tasks", {}, body)

    @server.tool(annotations=READ_ONLY)
    async def get_task(task_id: str) -> TaskSpec:
        """One task's README (the whole specification) and the rules of the exercise."""

        async def body(box: dict[str, Any]) -> TaskSpec:
            return await _thread(manager.get_task, task_id)

        return await tools.run("get_task", {"task_id": task_id}, body)

    for verb in SIMPLE_VERBS:
        _add_session_verb(server, tools, verb)

    @server.tool(description=VERBS["result"].doc, annotations=_verb_annotations(VERBS["result"]))
    async def get_result(ctx: Context, session_id: str | None = None, wait_seconds: float = 0.0) -> TaskResult:
        args = VERBS["result"].logged_arguments(session_id, {"wait_seconds": wait_seconds})

        async def body(box: dict[str, Any]) -> TaskResult:
            box["session_id"] = sid = await _thread(
                tools.session_for, session_id, tools.owners.caller(ctx.request_context), recorded_ok=True
            )
            try:
                wait = min(max(float(wait_seconds), 0.0), MAX_WAIT_SECONDS)
            except (TypeError, ValueError):
                wait = 0.0
            started = time.monotonic()
            status = await _thread(manager.result, sid, wait_seconds=0.0)
            while status.state in ("queued", "running"):
                remaining = wait - (time.monotonic() - started)
                if remaining <= 0:
                    break
                await ctx.report_progress(
                    round(time.monotonic() - started, 3), wait, status.message or f"scoring {status.state}"
                )
                # Short slices keep progress flowing and let a cancelled call return promptly.
                status = await _thread(manager.result, sid, wait_seconds=min(PROGRESS_INTERVAL, remaining))
            return TaskResult(
                session_id=status.session_id,
                state=status.state,
                job_id=status.job_id,
                attempt=status.attempt,
                message=status.message,
                summary=status.summary,
                contaminated=status.contaminated,
                contamination=status.contamination,
                waited_seconds=round(time.monotonic() - started, 3),
                next_step=_result_next_step(status),
            )

        return await tools.run("get_result", args, body)

    # ------------------------------------------------------------------ session tools
    @server.tool(description=START.doc, annotations=_verb_annotations(START))
    async def start_task(
        ctx: Context, task_id: str, workspace: str | None = None, mode: Literal["agent", "human"] = "agent"
    ) -> StartTaskResult:
        args = {"task_id": task_id, "workspace": workspace, "mode": mode}

        async def body(box: dict[str, Any]) -> StartTaskResult:
            await _thread(manager.get_task, task_id)  # unknown task: fail before touching any folder
            resolved = await _thread(resolve_workspace, tools.root, workspace)
            client = client_info_of(ctx)
            log.info(
                "start_task %s in %s (workspace from %s; client %s %s; protocol %s)",
                task_id,
                resolved.path,
                resolved.source,
                client.name,
                client.version,
                _protocol_of(ctx),
            )
            # `within`: the final resolved path is re-checked against the root at creation time.
            status = await _thread(
                manager.start,
                task_id,
                resolved.path,
                mode=mode,
                client=client,
                within=tools.root.path if tools.root else None,
            )
            box["session_id"] = status.session_id
            tools.owners.started(tools.owners.caller(ctx.request_context), status.session_id)
            rules = await _thread(manager.rules, task_id)
            return StartTaskResult(
                **status.model_dump(),
                workspace_source=resolved.source,
                rules=rules,
                next_step=(
                    f"Build the service in {status.workspace} (README.md there is the spec). "
                    "When done call submit_task, then poll get_result."
                ),
            )

        return await tools.run("start_task", args, body)

    @server.tool(description=VERBS["submit"].doc, annotations=_verb_annotations(VERBS["submit"]))
    async def submit_task(ctx: Context, session_id: str | None = None) -> SubmitResult:
        async def body(box: dict[str, Any]) -> SubmitResult:
            box["session_id"] = sid = await _thread(
                tools.session_for, session_id, tools.owners.caller(ctx.request_context)
            )
            try:
                receipt = await _thread(manager.submit, sid, signal="mcp")
            except SessionError as exc:
                status = await _thread(manager.status, sid)
                if status.job_id:
                    raise SessionError(f"{exc}; its scoring job is {status.job_id}: call get_result") from None
                raise
            return SubmitResult(
                **receipt.model_dump(),
                next_step=f"Scoring runs in the background (job {receipt.job_id}); it takes minutes. "
                "Call get_result with wait_seconds=50 until state is done.",
            )

        return await tools.run("submit_task", VERBS["submit"].logged_arguments(session_id, {}), body)

    if manager.practice:
        # Practice mode only (`rgbridge serve --practice`): a deploy-only check, recorded as such.
        @server.tool(annotations=_annotations(idempotent=False, title="Practice: does it deploy?"))
        async def check_deployment(ctx: Context, session_id: str | None = None) -> PracticeCheck:
            """Practice mode: build and start the current workspace and report whether the service
            answers HTTP on its port. No golden test runs; the check is recorded in the session."""

            async def body(box: dict[str, Any]) -> PracticeCheck:
                box["session_id"] = sid = await _thread(
                    tools.session_for, session_id, tools.owners.caller(ctx.request_context)
                )
                return PracticeCheck(**await _thread(manager.practice_check, sid))

            return await tools.run("check_deployment", {"session_id": session_id}, body)

    # ------------------------------------------------------------------ resource and prompt
    @server.resource(
        "task://{task_id}/readme",
        name="task_readme",
        title="Task README",
        description="The README (the whole specification) of a task.",
        mime_type="text/markdown",
    )
    def task_readme(task_id: str) -> str:
        try:
            return manager.get_task(task_id).readme
        except BridgeError as exc:
            raise ResourceNotFoundError(str(exc)) from None

    @server.prompt(name="solve_task", title="Solve a RepoGenesis task")
    def solve_task(task_id: str) -> str:
        """Instructions for solving one task through this server."""
        try:
            rules = manager.rules(task_id)
            spec = manager.get_task(task_id)
        except BridgeError as exc:
            raise ValueError(str(exc)) from None
        return solve_prompt(spec, rules)

    return server
