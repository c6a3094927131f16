"""Transports: stdio (what IDEs spawn) and streamable HTTP on loopback with a bearer token.

HTTP security (the MCP specification's security warning for the streamable HTTP transport): bind 127.0.0.1 by default; every request must carry
`Authorization: Bearer <token>` (constant-time compare, 401 otherwise); the SDK's DNS-rebinding
protection validates Host and Origin (421/403); a non-loopback bind needs `--allow-remote`.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.credentials import SERVER_TOKEN_FILE, is_client_token, verify_client_token
from bridge.errors import BridgeError
from mcp_server.ownership import CREDENTIAL_SCOPE_KEY

if TYPE_CHECKING:  # the MCP SDK is imported where it is used: an attempt's server opens its
    # session and announces itself before it pays for the SDK (mcp_server/attempt_mode.py)
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

log = logging.getLogger("mcp_server.transport")

LOOPBACK_NAMES = ("localhost",)


class TransportError(BridgeError):
    """The requested transport cannot be served safely."""


def configure_logging(level: str = "INFO") -> None:
    """All logging to stderr: in stdio mode stdout belongs to the protocol. Called before
    MCPServer is constructed (its constructor calls logging.basicConfig)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_or_create_token(given: str | None, token_dir: Path) -> tuple[str, Path]:
    """The bearer token (given, or a fresh `secrets.token_urlsafe(32)`), written to a 0600 file."""
    token = given or secrets.token_urlsafe(32)
    if is_client_token(token):
        raise TransportError(
            "the server token given (--token or RGBRIDGE_TOKEN) is a client credential (rgbc1...), "
            "which is what IDE configs send: give the server its own token, or none for a fresh one"
        )
    if len(token) < 16:
        raise TransportError("the HTTP bearer token must be at least 16 characters")
    token_dir.mkdir(parents=True, exist_ok=True)
    path = token_dir / SERVER_TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file may have had wider permissions
        os.write(fd, (token + "\n").encode("ascii"))
    finally:
        os.close(fd)
    return token, path


def security_settings(host: str, port: int, allowed_hosts: list[str] | None = None) -> TransportSecuritySettings:
    """Host/Origin allow-lists: loopback names on our port, plus the bound host and any extras."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    origins = {f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://[::1]:{port}"}
    for extra in [host, *(allowed_hosts or [])]:
        if extra in ("0.0.0.0", "::", ""):
            continue
        name = f"[{extra}]" if ":" in extra and not extra.startswith("[") else extra
        hosts.add(f"{name}:{port}")
        origins.add(f"http://{name}:{port}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(hosts),
        allowed_origins=sorted(origins),
    )


class BearerTokenMiddleware:
    """Pure ASGI: rejects HTTP requests without the right bearer token; passes lifespan through
    (the wrapped Starlette app's lifespan runs the SDK session manager).

    Two kinds of token pass: the server's own (shared; the caller is known by its MCP connection,
    mcp_server/ownership.py) and a client credential minted from it (bridge/credentials.py), whose
    client id the middleware puts into the request's ASGI scope: the caller's identity, checked
    here and never read from anything the client could choose."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        given = b""
        for key, value in scope.get("headers") or []:
            if key.lower() == b"authorization":
                given = value
                break
        scope.pop(CREDENTIAL_SCOPE_KEY, None)
        client_id = None
        if not hmac.compare_digest(given, self._expected) and given.startswith(b"Bearer "):
            client_id = verify_client_token(self._token, given[len(b"Bearer ") :].decode("latin-1"))
            if client_id is not None:
                scope[CREDENTIAL_SCOPE_KEY] = client_id
        if client_id is None and not hmac.compare_digest(given, self._expected):
            body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="rgbridge"'),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, *, host: str, port: int, token: str, allowed_hosts: list[str] | None = None) -> Any:
    """The ASGI app: bearer check around the SDK's streamable HTTP app (SSE responses kept
    for progress: json_response=False)."""
    inner = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=False,
        host=host,
        transport_security=security_settings(host, port, allowed_hosts),
    )
    return BearerTokenMiddleware(inner, token)


def check_bind(host: str, *, allow_remote: bool, token_given: bool) -> None:
    if is_loopback(host):
        return
    if not allow_remote:
        raise TransportError(f"refusing to bind {host}: not a loopback address (add --allow-remote to insist)")
    if not token_given:
        raise TransportError(f"binding {host} needs an explicit --token (or RGBRIDGE_TOKEN) as well as --allow-remote")


def bind_http(host: str, port: int) -> socket.socket:
    """The listening socket of the HTTP transport, bound before anything is announced: a busy
    port is one error naming the option to change, and nobody else can take the port between
    the check and the server starting (uvicorn serves on this very socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))  # listening starts once the token file is written (`listen_http`)
    except OSError as exc:
        sock.close()
        reason = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise TransportError(f"cannot listen on {host}:{port}: {reason}; choose another port with --port N") from None
    sock.set_inheritable(True)
    return sock


def listen_http(sock: socket.socket) -> None:
    """Start accepting on a socket from `bind_http`: only after the token file exists, so a client
    that connects as soon as the port answers can read it."""
    sock.listen(128)


def run_http(
    server: MCPServer,
    *,
    host: str,
    port: int,
    token: str,
    allowed_hosts: list[str] | None = None,
    sock: socket.socket | None = None,
) -> None:
    import uvicorn

    app = http_app(server, host=host, port=port, token=token, allowed_hosts=allowed_hosts)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    raise_if_ended()  # a signal whose Ended was lost before the server started

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if RECEIVED:  # one that came between the check above and uvicorn's own handlers
                self.should_exit = True

    server_ = Server(config)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM (the lifespan closes the manager); a hang-up
    # is one more way to end the server (`end_on_signals`), taken the same graceful way
    if threading.current_thread() is threading.main_thread():  # handlers can only be set there
        signal.signal(signal.SIGHUP, lambda _sig, frame: server_.handle_exit(signal.SIGTERM, frame))
    server_.run(sockets=[sock] if sock is not None else None)
    raise_if_ended()  # ended by an early signal: leave as a signal ends the server


def run_stdio(server: MCPServer) -> None:
    server.run("stdio")


#: how IDEs end a stdio server (README, "Agent CLIs"): Claude Code SIGINT then SIGTERM ~100 ms
#: later, Codex SIGTERM, a closed terminal SIGHUP
END_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Ended(KeyboardInterrupt):
    """The server was told to end by a signal (a KeyboardInterrupt, so the event loop unwinds
    and the lifespan closes the manager exactly as at the end of stdin)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: the end signals received: an exception raised by a signal handler while the interpreter runs a
#: finalizer or a C callback is reported and dropped ("Exception ignored in ..."), and later
#: signals are ignored by then, so the server checks this before it serves (`raise_if_ended`)
RECEIVED: list[int] = []


def raise_if_ended() -> None:
    """Raise the Ended of an end signal that came earlier, if its exception was lost."""
    if RECEIVED:
        raise Ended(RECEIVED[0])


def end_on_signals() -> None:
    """Treat SIGINT, SIGTERM and SIGHUP like the end of stdin: the first one unwinds the server
    (recorders checkpoint and stop, sessions are released); later ones are ignored so they
    cannot cut that orderly close short. Scores do not depend on it: they are computed in
    detached scoring processes (bridge/sessions/score_process.py)."""

    def handler(signum: int, _frame: object) -> None:
        for sig in END_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        RECEIVED.append(signum)
        raise Ended(signum)

    if threading.current_thread() is not threading.main_thread():  # embedded: the host handles signals
        return
    for sig in END_SIGNALS:
        signal.signal(sig, handler)
