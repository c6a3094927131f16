"""Every MCP tool call goes into the recording, ok or not: the marker a tool handler sets, and
the middleware that logs the calls that never reached a handler (bad arguments, unknown tool)."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio.to_thread

if TYPE_CHECKING:
    from bridge.sessions.manager import SessionManager
    from mcp_server.ownership import Owners

# Set by the call-log middleware for each tools/call; a tool handler marks it as handled so
# the middleware only logs calls that never reached a handler (bad arguments, unknown tool).
_CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("rgbridge_call", default=None)


def mark_handled() -> None:
    """A tool handler took this call: it logs it itself."""
    call = _CALL.get()
    if call is not None:
        call["handled"] = True


class LogCall(Protocol):
    """Writes one call into a session's recording and never raises (`BridgeTools.log`)."""

    def __call__(
        self, session_id: str | None, tool: str, arguments: dict[str, Any], *, ok: bool, error: str | None = None
    ) -> None: ...


class CallLogMiddleware:
    """Logs tools/call requests that fail before any tool handler runs (schema errors,
    unknown tool names), so the recording holds every call, not only the well-formed ones.

    Given the server's session owners, its manager and the log writer the tool handlers use, so
    it depends on nothing above them (mcp_server/tools.py builds on this module)."""

    def __init__(self, owners: Owners, manager: SessionManager, log: LogCall) -> None:
        self.owners = owners
        self.manager = manager
        self.log = log
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
        current = self.owners.current(self.owners.caller(self._ctx.get()))
        sid = current if current in {s.session_id for s in self.manager.active()} else None
        await anyio.to_thread.run_sync(functools.partial(self.log, sid, name, arguments, ok=ok, error=error))
