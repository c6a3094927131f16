"""The MCP surface over `bridge.sessions.manager.SessionManager`: tools, a resource template, a prompt.

The adapter holds no benchmark logic: every tool is generated from the verb table
(bridge/sessions/verbs.py) by mcp_server/tools.py, which resolves which session a call means,
moves blocking manager calls off the event loop, turns bridge errors into tool errors, and logs
every tool call (ok or not) into the recording through `manager.log_call`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from bridge.errors import BridgeError
from bridge.sessions.manager import SessionManager
from bridge.sessions.rules import INSTRUCTIONS, solve_prompt
from bridge.sessions.verbs import mcp_verbs
from mcp_server.calllog import CallLogMiddleware
from mcp_server.tools import BridgeTools, verb_tool
from mcp_server.workspace import find_root

SERVER_NAME = "rgbridge"


def manager_lifespan(manager: SessionManager) -> Callable[[MCPServer], AbstractAsyncContextManager[dict[str, Any]]]:
    """The SDK's lifespan owning `manager`: when the transport ends (stdin closed, the HTTP app
    shut down) the manager is closed: recorders checkpoint and stop, sessions are released."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {}
        finally:
            # shielded: a cancelled transport must still close the manager (it blocks: a thread)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(manager.close)

    return lifespan


def build_server(
    manager: SessionManager,
    *,
    default_workspace: Path | None = None,
    environ: dict[str, str] | None = None,
    name: str = SERVER_NAME,
    owns_manager: bool = False,
) -> MCPServer:
    """The MCP server over `manager`. `default_workspace` is the `--workspace` option;
    `owns_manager`: the server's lifespan closes the manager when the transport ends."""
    from bridge import __version__

    root = find_root(default_workspace, environ)
    tools = BridgeTools(manager, root)
    server = MCPServer(
        name=name,
        title="RepoGenesis bridge",
        instructions=INSTRUCTIONS,
        version=__version__,
        middleware=[CallLogMiddleware(tools.owners, tools.manager, tools.log)],
        lifespan=manager_lifespan(manager) if owns_manager else None,
        # Practice mode (`rgbridge serve --practice`) adds its deploy-only check.
        tools=[verb_tool(tools, verb) for verb in mcp_verbs(practice=manager.settings.practice)],
    )
    server.bridge_tools = tools  # type: ignore[attr-defined]  # for tests and the CLI

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
