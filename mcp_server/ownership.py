"""Which MCP client a call comes from, and which sessions belong to it.

Over streamable HTTP several clients share one server. A session belongs to the client that
started it: a call without `session_id` means the caller's own session, never another's, and a
call naming a session another client owns is refused.

Identity, strongest first:
1. A client credential (bridge/credentials.py): `rgbridge ide-config --transport http` writes one
   per config. The bearer check (mcp_server/transport.py) verifies it and leaves its client id in
   the request's ASGI scope. It is the same in every request whatever the protocol era (a
   2026-07-28 client such as Claude Code over HTTP sends each request on its own) and outlives
   connections: an IDE that restarts keeps its sessions, and so does a restarted server (which
   sessions belong to which credential is kept in `<recordings>/http-owners.json`).
2. With the shared server token only: the SDK's per-connection state (`Connection.state`, which
   persists across the requests of one connection), never a header (headers are client input).
   On the handshake era a connection is one `Mcp-Session-Id`; a 2026-07-28 request sent with the
   server token has no connection and so no identity: it must name its session, and the sessions
   it starts are reachable by their id only. When a connection closes (the client quit, or its MCP
   session expired after 30 idle minutes) its sessions are released: the next client that names
   one adopts it, so an IDE that reconnects can carry on with its session.
stdio (and in-process) serves exactly one client, so nothing changes there.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.errors import SessionError
from bridge.fs.files import write_json_atomic

_STATE_KEY = "rgbridge.client"
LOCAL = "local"
#: where the bearer check (mcp_server/transport.py) leaves the client id of a verified credential
CREDENTIAL_SCOPE_KEY = "rgbridge.credential"
CREDENTIAL_PREFIX = "credential:"
#: the file in the recordings folder that keeps which credential owns which session
OWNERS_FILE = "http-owners.json"
log = logging.getLogger("mcp_server.ownership")
_SESSION_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _load_owners(store: Path | None) -> dict[str, str]:
    """The kept owners (untrusted file: anything malformed is left out)."""
    if store is None:
        return {}
    try:
        data = json.loads(store.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("ignoring %s: %s", store, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        sid: key
        for sid, key in data.items()
        if isinstance(sid, str)
        and _SESSION_ID.fullmatch(sid)
        and isinstance(key, str)
        and key.startswith(CREDENTIAL_PREFIX)
        and len(key) <= 128
        and (store.parent / sid).is_dir()  # a recording removed since is forgotten
    }


@dataclass(frozen=True)
class Caller:
    key: str | None  # this connection's identity; None when it has none (2026 HTTP request)
    over_http: bool


def caller_of(request_context: Any, on_close: Callable[[str], None] | None = None) -> Caller:
    """The caller of a request, from the SDK's ServerRequestContext (tool ctx or middleware).
    `on_close(key)` runs when the caller's connection closes (registered once per connection)."""
    request = getattr(request_context, "request", None)
    if request is None:
        return Caller(key=LOCAL, over_http=False)  # stdio / in-process: the one client there is
    scope = getattr(request, "scope", None)
    credential = scope.get(CREDENTIAL_SCOPE_KEY) if isinstance(scope, dict) else None
    if isinstance(credential, str) and credential:
        # A client credential: the same identity in every request, whatever the protocol era,
        # and it outlives any connection (never released on close).
        return Caller(key=CREDENTIAL_PREFIX + credential, over_http=True)
    connection = getattr(getattr(request_context, "session", None), "_connection", None)
    state = getattr(connection, "state", None)
    if not isinstance(state, dict):
        return Caller(key=None, over_http=True)
    if getattr(connection, "session_id", None) is None:
        return Caller(key=None, over_http=True)  # a single-exchange request: a fresh connection each time
    key = state.get(_STATE_KEY)
    if key is None:
        key = state[_STATE_KEY] = secrets.token_hex(16)
        stack = getattr(connection, "exit_stack", None)
        if on_close is not None and stack is not None:
            stack.callback(on_close, key)
    return Caller(key=key, over_http=True)


class Owners:
    """Session id → owning client key, and each client's current session.

    `store`: a file where sessions owned by a client credential are kept, so that they stay their
    client's after a server restart (the manager re-attaches open sessions; a credential is the same
    before and after). Connection keys die with their connection and are never kept."""

    def __init__(self, store: Path | None = None) -> None:
        self._owner: dict[str, str] = {}
        self._current: dict[str | None, str] = {}
        self._gone: set[str] = set()  # sessions whose owning connection has closed
        self._lock = threading.Lock()
        self._store = store
        self._owner.update(_load_owners(store))

    def caller(self, request_context: Any) -> Caller:
        return caller_of(request_context, on_close=self.release)

    def release(self, key: str) -> None:
        """The connection `key` closed (client quit, or its MCP session expired): its sessions may
        be adopted by the next client that names them (an IDE reconnecting to its own session)."""
        with self._lock:
            for sid, owner in list(self._owner.items()):
                if owner == key:
                    del self._owner[sid]
                    self._gone.add(sid)
            self._current.pop(key, None)

    def started(self, caller: Caller, session_id: str) -> None:
        with self._lock:
            if caller.over_http and caller.key is not None:
                self._owner[session_id] = caller.key
            self._current[caller.key] = session_id
            if self._store is not None and caller.key is not None and caller.key.startswith(CREDENTIAL_PREFIX):
                kept = {sid: key for sid, key in self._owner.items() if key.startswith(CREDENTIAL_PREFIX)}
                try:
                    write_json_atomic(self._store, kept)
                except OSError as exc:  # the session is still owned in this process
                    log.warning("could not keep the owners of HTTP sessions in %s: %s", self._store, exc)

    def current(self, caller: Caller) -> str | None:
        return self._current.get(caller.key)

    def owner(self, session_id: str) -> str | None:
        return self._owner.get(session_id)

    def check(self, caller: Caller, session_id: str) -> None:
        """Refuse a session another HTTP client owns (stdio serves one client: no check)."""
        if not caller.over_http:
            return
        with self._lock:
            if session_id in self._gone and caller.key is not None:
                self._gone.discard(session_id)  # adopted by the client that named it
                self._owner[session_id] = caller.key
                self._current[caller.key] = session_id
        owner = self._owner.get(session_id)
        if owner is not None and owner != caller.key:
            raise SessionError(
                f"session {session_id} belongs to another MCP client; a client can only use the sessions it started"
            )

    def mine(self, caller: Caller, session_ids: list[str]) -> list[str]:
        """The sessions a call without session_id may mean."""
        if not caller.over_http:
            return session_ids
        if caller.key is None:
            raise SessionError(
                "this client has no MCP session (each 2026-07-28 request stands alone) and no credential "
                "of its own: pass the session_id that start_task returned, or connect with the config "
                "`rgbridge ide-config --transport http` writes"
            )
        return [sid for sid in session_ids if self._owner.get(sid) == caller.key]
