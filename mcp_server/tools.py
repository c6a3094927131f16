"""The MCP tools, generated from the verb table (bridge/sessions/verbs.py): one generic handler
resolves which session a call means (and whether this client may use it), runs the verb's steps
off the event loop, reports progress, turns bridge errors into tool errors, and logs every call
into the recording through `manager.log_call`. No verb has code of its own here.

Each tool publishes the portable schemas of bridge/sessions/schemas.py and validates its
arguments with the SDK's model of the generated signature (unknown arguments refused). A call the
client cancels stops (a read-only one at once) and is recorded as cancelled.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict

from bridge.errors import BridgeError, SessionError
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ClientInfo
from bridge.sessions.schemas import input_schema, output_schema
from bridge.sessions.verbspec import CallContext, Event, Opened, Progress, Steps, Verb
from mcp_server.calllog import mark_handled
from mcp_server.ownership import OWNERS_FILE, Caller, Owners
from mcp_server.workspace import WorkspaceRoot, is_inside, resolve_workspace

log = logging.getLogger("mcp_server")
T = TypeVar("T")


def client_info_of(ctx: Context | None) -> ClientInfo:
    """The calling IDE's name/version from the handshake (or the 2026 envelope), if any."""
    try:
        params = ctx.session.client_params if ctx is not None else None
    except Exception:  # outside a request, or a transport without a session
        params = None
    info = getattr(params, "client_info", None)
    if info is None:
        return ClientInfo()
    try:
        protocol = str(ctx.protocol_version or "") if ctx is not None else ""
    except Exception:  # not every transport exposes it
        protocol = ""
    return ClientInfo(
        name=str(getattr(info, "name", "") or "unknown"),
        version=str(getattr(info, "version", "") or ""),
        protocol=protocol,
    )


def _protocol_of(ctx: Context | None) -> str | None:
    try:
        return ctx.protocol_version if ctx is not None else None
    except Exception:
        return None


#: what the recording says of a call whose answer was never sent
CANCELLED = "cancelled before its answer was sent (the client gave up on the call, or the server is stopping)"


def _thread(fn: Callable[..., T], *args: Any, abandon: bool = False, **kwargs: Any) -> Awaitable[T]:
    """`fn` off the event loop. `abandon`: a cancelled call stops waiting for it at once (the
    thread ends on its own; only for work that changes nothing, such as a long poll's wait)."""
    return anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), abandon_on_cancel=abandon)


def _advance(steps: Steps) -> tuple[bool, Event | BaseModel]:
    """One step of a verb call: (done, answer) or (not done, event). StopIteration must not
    cross into the event loop's future, so it ends here."""
    try:
        return False, next(steps)
    except StopIteration as stop:
        return True, stop.value


class BridgeTools:
    """State and helpers shared by the tools of one server."""

    def __init__(self, manager: SessionManager, root: WorkspaceRoot | None) -> None:
        self.manager = manager
        self.root = root
        #: which client owns which session, and each client's current one (mcp_server/ownership.py)
        self.owners = Owners(manager.recordings_dir / OWNERS_FILE)

    # ------------------------------------------------------------------ logging
    def log(
        self, session_id: str | None, tool: str, arguments: dict[str, Any], *, ok: bool, error: str | None = None
    ) -> None:
        try:
            self.manager.log_call(session_id, tool, arguments, ok=ok, error=error)
        except Exception:  # a failing log must never turn a result into an error
            log.exception("could not log call %s", tool)

    async def run(
        self,
        tool: str,
        arguments: dict[str, Any],
        body: Callable[[dict[str, Any]], Awaitable[T]],
        *,
        shielded: bool = False,
    ) -> T:
        """Run a tool body; log it; map failures to ToolError with a one-line message.

        A call the client cancels (`notifications/cancelled` on a timeout, or a closed request on
        the 2026-07-28 HTTP path) is interrupted by the SDK, which never answers it (the MCP
        specification's cancellation utility; Claude Code drops the connection when an answer
        arrives for a call it gave up on). The recording still gets the call, as cancelled.
        `shielded`: the body runs to its end anyway (a call that changes state finishes, so the
        recording and the session's owner stay right; only its answer is dropped)."""
        mark_handled()
        box: dict[str, Any] = {"session_id": None}
        try:
            with anyio.CancelScope(shield=shielded):
                result = await body(box)
        except anyio.get_cancelled_exc_class():
            await self._log_async(box["session_id"], tool, arguments, ok=False, error=CANCELLED)
            raise
        except ToolError as exc:
            await self._log_async(box["session_id"], tool, arguments, ok=False, error=str(exc))
            raise
        except BridgeError as exc:
            await self._log_async(box["session_id"], tool, arguments, ok=False, error=str(exc))
            raise ToolError(str(exc)) from None
        except Exception as exc:  # unexpected: short message out, traceback to stderr
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
        # Shielded: a call is logged even when it is being cancelled (every call is in the recording).
        with anyio.CancelScope(shield=True):
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

    def call_context(self, ctx: Context) -> CallContext:
        """What the verbs need to know about an MCP call: its client, and that a workspace
        argument is confined to this server's workspace (mcp_server/workspace.py)."""
        return CallContext(
            client=client_info_of(ctx),
            protocol=_protocol_of(ctx),
            signal="mcp",
            locate=functools.partial(resolve_workspace, self.root),
            within=self.root.path if self.root else None,
        )


def verb_annotations(verb: Verb) -> ToolAnnotations:
    """Every hint set explicitly (a client that finds one missing assumes the worst: Codex with
    `approval_policy = "never"` refuses such a tool): read-only and idempotent as the verb says,
    destructive only for what cannot be undone and is not additive (quitting), never open-world
    (the bridge talks to nothing outside this machine on a tool call)."""
    return ToolAnnotations(
        title=verb.title,
        read_only_hint=verb.read_only,
        destructive_hint=verb.destructive,
        idempotent_hint=verb.idempotent,
        open_world_hint=False,
    )


def _strict_arguments(model: type[ArgModelBase]) -> type[ArgModelBase]:
    """The SDK's argument model, refusing arguments the tool does not declare: the published
    schema has no `additionalProperties: false` (bridge/sessions/schemas.py), so the refusal of an
    unknown argument lives here, in the validation."""
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return cast(type[ArgModelBase], type(model.__name__, (model,), {"model_config": config, "__module__": __name__}))


def verb_tool(tools: BridgeTools, verb: Verb) -> Tool:
    """`verb` as an MCP tool: its declared arguments, then (for a verb acting on a session) an
    optional session_id.

    The SDK reads a tool's argument model from the function signature, so the generated function
    carries one built from the verb's parameters; that model validates every call (unknown
    arguments refused). What the tool publishes is the portable schema of
    bridge/sessions/schemas.py: the input schema built from the verb, the output schema inlined."""
    acts_on_session = verb.session == "existing"

    async def tool(ctx: Context, **kwargs: Any) -> BaseModel:
        session_id = kwargs.pop("session_id", None)

        async def body(box: dict[str, Any]) -> BaseModel:
            sid = None
            caller = tools.owners.caller(ctx.request_context) if verb.session != "none" else None
            if acts_on_session:
                box["session_id"] = sid = await _thread(
                    tools.session_for, session_id, caller, recorded_ok=verb.recorded_ok, abandon=verb.read_only
                )
            steps = verb.steps(tools.manager, sid, tools.call_context(ctx), **kwargs)
            while True:
                done, out = await _thread(_advance, steps, abandon=verb.read_only)
                if done:
                    return cast(BaseModel, out)
                if isinstance(out, Opened) and caller is not None:
                    box["session_id"] = out.session_id
                    tools.owners.started(caller, out.session_id)
                elif isinstance(out, Progress):
                    await ctx.report_progress(out.elapsed, out.total, out.message)

        # A read-only call (get_result's long poll) stops as soon as it is cancelled; any other
        # runs to its end, its answer dropped.
        return await tools.run(verb.tool, verb.logged_arguments(session_id, kwargs), body, shielded=not verb.read_only)

    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)]
    params += [inspect.Parameter(p.name, kw, default=p.default, annotation=p.type) for p in verb.params]
    if acts_on_session:
        params.append(inspect.Parameter("session_id", kw, default=None, annotation=str | None))
    tool.__signature__ = inspect.Signature(params, return_annotation=verb.result)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": verb.result}
    tool.__name__ = tool.__qualname__ = verb.tool
    tool.__doc__ = verb.doc
    made = Tool.from_function(
        tool, name=verb.tool, title=verb.title, description=verb.doc, annotations=verb_annotations(verb)
    )
    made.parameters = input_schema(verb)
    made.fn_metadata.arg_model = _strict_arguments(made.fn_metadata.arg_model)
    if made.fn_metadata.output_schema is not None:
        made.fn_metadata.output_schema = output_schema(made.fn_metadata.output_schema)
    return made
