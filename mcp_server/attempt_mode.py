"""`rgbridge serve --start-task TASK`: the MCP server of one `rgbridge run` attempt.

The run (bridge/agents/attempt/lifecycle.py) starts this server before the agent, outside the agent's
process tree. The server opens the attempt's session itself, so that from the session's start the
recorder and the golden-file watch run in this one process, whatever the agent does and whenever
it connects (or if it never does). It serves streamable HTTP on loopback to one client, the agent,
whose credential is minted from a server token that never leaves this process (nothing else can
call this server) and owns the attempt's session only. Once all of that holds it tells the run
where it listens through the ready file (mode 0600, written whole). It holds the session until
the run ends it: SIGTERM, or the end of its standard input (a run that died), taken like the end
of a stdio client's input (recorders checkpoint and stop, the session is released, a submitted
session's scoring process carries on).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bridge.agents.attempt.server import ServerReady
from bridge.credentials import is_client_token, mint_client_credential
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.sessions.answers import StartTaskResult
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ClientInfo
from bridge.sessions.verbs import START
from bridge.sessions.verbspec import CallContext
from mcp_server.ownership import CREDENTIAL_PREFIX, Caller
from mcp_server.workspace import find_root, resolve_workspace

if TYPE_CHECKING:
    from mcp_server.tools import BridgeTools

log = logging.getLogger("mcp_server.attempt_mode")


class AttemptModeError(BridgeError):
    """The attempt mode's options do not hold together."""


def check_options(args: argparse.Namespace) -> None:
    """`--start-task` serves one attempt: HTTP, a workspace, a ready file (all named by the run)."""
    if not args.start_task:
        if args.ready_file or args.client_name or args.client_version:
            raise AttemptModeError("--ready-file, --client-name and --client-version go with --start-task")
        return
    missing = [
        option
        for option, given in (
            ("--transport http", args.transport == "http"),
            ("--workspace DIR", args.workspace is not None),
            ("--ready-file FILE", args.ready_file is not None),
        )
        if not given
    ]
    if missing:
        raise AttemptModeError(f"--start-task needs {', '.join(missing)}")


def server_token(given: str | None) -> str:
    """The server's secret: the one given, else a fresh one that only this process ever holds
    (never written to the recordings folder: no other client can mint a credential from it)."""
    if given and (is_client_token(given) or len(given) < 16):
        raise AttemptModeError("the server token given must be a server token of at least 16 characters")
    return given or secrets.token_urlsafe(32)


@dataclass(frozen=True)
class OpenAttempt:
    session_id: str
    client_id: str
    credential: str  # the agent's bearer token


def open_attempt(args: argparse.Namespace, manager: SessionManager, token: str) -> OpenAttempt:
    """Open the attempt's session in `--workspace` (its recorder and golden watch are running
    when this returns) for a fresh client credential minted from `token`."""
    root = find_root(args.workspace)
    context = CallContext(
        client=ClientInfo(name=args.client_name or "rgbridge-run", version=args.client_version or ""),
        locate=partial(resolve_workspace, root),
        within=root.path if root else None,
    )
    opened = START.invoke(manager, None, context=context, task_id=args.start_task, workspace=None)
    credential = mint_client_credential(token)
    attempt = OpenAttempt(cast(StartTaskResult, opened).session_id, credential.client_id, credential.token)
    log.info("attempt session %s of %s open for client %s", attempt.session_id, args.start_task, attempt.client_id)
    return attempt


def claim(server: Any, attempt: OpenAttempt) -> None:
    """The session belongs to the attempt's credential: its calls without a session id mean it,
    and no other caller may use it (mcp_server/ownership.py)."""
    tools: BridgeTools = server.bridge_tools
    tools.owners.started(Caller(key=CREDENTIAL_PREFIX + attempt.client_id, over_http=True), attempt.session_id)


def write_ready(path: Path, url: str, attempt: OpenAttempt) -> None:
    """The ready file, whole or not at all, readable by this user only (mkstemp's 0600)."""
    ready = ServerReady(url=url, credential=attempt.credential, session_id=attempt.session_id, pid=os.getpid())
    write_json_atomic(path, ready.model_dump(mode="json"))
    os.chmod(path, 0o600)


def end_with_stdin(signal_self: int) -> None:
    """End this server (as `signal_self` would) when its standard input ends: the run that
    started it holds the other end, so a run that dies, however, does not leave a server holding
    the attempt's session."""

    def watch() -> None:
        try:
            while os.read(sys.stdin.fileno(), 4096):
                pass
        except (OSError, ValueError):
            pass
        log.info("standard input ended: letting the session go")
        os.kill(os.getpid(), signal_self)

    threading.Thread(target=watch, name="rgbridge-stdin-watch", daemon=True).start()
