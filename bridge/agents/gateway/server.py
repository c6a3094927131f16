"""The gateway's HTTP server: one per run, on 127.0.0.1 (an ephemeral port) on the host, outside
every sandbox. Each request is mapped by its placeholder credential to its attempt (unknown or
revoked: refused), stripped of that credential, given the real key, and forwarded with httpx
(streamed: bytes pass to the agent as they arrive, usage is read on the side). Rate limits and
outages are retried here with backoff (`Retry-After` first) within the attempt's time; a 401/403
is not retried and ends the attempt (`Ledger.on_auth`); once `--max-cost` or
`--max-cost-per-attempt` is reached the next billed call is refused (`Ledger.on_cost_limit`), and
under a cap a billed call for a model no price lists is refused before it leaves (`Ledger.on_unpriced`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route as StarletteRoute

from bridge.agents.adapters.failures import classify_text, from_status
from bridge.agents.adapters.keys import Api
from bridge.agents.gateway import protocols, transcript
from bridge.agents.gateway.credentials import Placeholders
from bridge.agents.gateway.ledger import Call, Ledger
from bridge.agents.gateway.upstream import MARGIN_SECONDS, RETRY_STATUSES, Providers, backoff
from bridge.agents.gateway.usage import Usage, UsageReader
from bridge.errors import BridgeError

#: request headers never forwarded (hop-by-hop, the agent's credential, its encodings: the
#: gateway asks for identity so that it can read usage on the side)
DROP_REQUEST = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "accept-encoding"}
    | {"proxy-authorization", "proxy-connection", *protocols.CREDENTIAL_HEADERS}
)
DROP_RESPONSE = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
MAX_TRIES = 8
MAX_ERROR_BODY = 64 * 1024
#: what a call the gateway refuses itself is answered (a client error: retrying cannot help)
REFUSED_STATUS = 400
START_SECONDS = 30.0


class GatewayError(BridgeError):
    """The gateway could not start."""


@dataclass
class AttemptWire:
    """What the gateway keeps for one attempt: its ledger and, if any, its transcript file."""

    ledger: Ledger
    transcript: transcript.Transcript | None = None


def _error(status: int, message: str) -> JSONResponse:
    # one shape the three APIs' clients all read: Anthropic's `type: error`, an `error.message`
    return JSONResponse(
        {"type": "error", "error": {"type": "rgbridge_gateway", "code": status, "message": message}}, status
    )


class Gateway:
    """`with Gateway(providers) as gw: token = gw.open(wire); ... gw.close(token)`."""

    def __init__(self, providers: Providers) -> None:
        self.providers = providers
        self.attempts: Placeholders[AttemptWire] = Placeholders()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Gateway:
        # proto IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
        # sockets that say they are TCP, and without it each streamed event waits for the
        # client's delayed ACK (~40 ms on Linux)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._socket = sock
        app = Starlette(
            routes=[StarletteRoute("/{path:path}", self._handle, methods=["GET", "POST", "DELETE"])],
            lifespan=self._lifespan,
        )
        config = uvicorn.Config(
            app,
            log_level="error",
            lifespan="on",
            access_log=False,
            timeout_keep_alive=30,
            # the run is over: a call still waiting on the provider is not waited for
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="rgbridge-gateway", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise GatewayError("the model gateway did not start on 127.0.0.1")
            time.sleep(0.01)
        return self

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            # the provider leg's pooled connections end with the server, in its own event loop
            # (the client was made there): a process that runs many gateways keeps no sockets
            client, self._client = self._client, None
            if client is not None:
                await client.aclose()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    @property
    def port(self) -> int:
        if self._socket is None:
            raise GatewayError("the model gateway is not running")
        return int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self, wire: AttemptWire) -> str:
        """A placeholder credential for one attempt's agent."""
        return self.attempts.mint(wire)

    def close(self, token: str) -> None:
        """The attempt has ended: its placeholder is refused from now on."""
        self.attempts.revoke(token)

    # ------------------------------------------------------------------ one request
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # made in the server's own event loop, on its first request
            # TCP_NODELAY: a request's head and body go out at once (with Nagle's algorithm the
            # body waits for the provider's delayed ACK of the head: ~40 ms per call on Linux)
            transport = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            )
            self._client = httpx.AsyncClient(
                transport=transport,
                timeout=httpx.Timeout(connect=30.0, read=900.0, write=60.0, pool=30.0),
                trust_env=False,  # the provider leg never goes through a proxy the environment names
            )
        return self._client

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        query = dict(request.query_params)
        wire = self.attempts.owner(protocols.agent_credential(headers, query))
        if wire is None:
            return _error(401, "rgbridge gateway: unknown credential, or its attempt has ended")
        path = request.url.path
        route = protocols.route(request.method, path, headers)
        body = protocols.parse_body(raw)
        names = protocols.tool_names(body)
        call = Call(
            at=time.time(),
            api=route.api,
            kind=route.kind,
            billed=route.billed,
            model=protocols.model_of(route, body),
            tools=len(names),
            bridge_tools=protocols.carries_bridge_tools(names),
        )
        ledger = wire.ledger
        if route.billed and ledger.refuse_for_cost():
            return self._refuse(
                wire, call, request, len(raw), "cost_limit", f"{ledger.cap_message()}; no further model calls"
            )
        if route.billed and ledger.refuse_unpriced(call.model):
            return self._refuse(wire, call, request, len(raw), "unpriced", ledger.unpriced_failure().message)
        url, out_headers = self._outgoing(request, route.api, path)
        stream = protocols.streamed(route, path, request.url.query, body)
        record: dict[str, Any] = {
            "at": call.at,
            "request": {
                "method": request.method,
                "path": path,
                "query": transcript.redact_query(request.url.query),
                "headers": transcript.redact_headers(dict(request.headers)),
                "body": transcript.body_text(raw, self._secrets(wire)),
            },
        }
        started = time.monotonic()
        client = self._http()
        while True:
            try_started = time.monotonic()
            try:
                upstream = await client.send(
                    client.build_request(request.method, url, headers=out_headers, content=raw), stream=True
                )
            except httpx.HTTPError as exc:
                call.error = f"{type(exc).__name__}: {exc}"[:500]
                if await self._wait_retry(call, ledger, None, try_started):
                    continue
                call.failure = "provider_unavailable"
                return self._answer_failed(wire, call, record, started, 502, call.error)
            status = upstream.status_code
            if status < 400:
                return self._stream(wire, call, record, started, upstream, stream)
            error_body = await _read_capped(upstream)
            if status in RETRY_STATUSES and await self._wait_retry(
                call, ledger, upstream.headers.get("retry-after"), try_started
            ):
                continue
            text = error_body.decode("utf-8", "replace")
            call.status = status
            call.error = " ".join(text.split())[:500]
            call.failure = from_status(status)
            if call.failure is None and status == 400 and classify_text(text) == "context_overflow":
                call.failure = "context_overflow"
            call.seconds = time.monotonic() - started
            ledger.record(call)  # a 401/403 ends the attempt from here (Ledger.on_auth)
            record["response"] = {
                "status": status,
                "headers": transcript.redact_headers(dict(upstream.headers)),
                "body": transcript.body_text(error_body, self._secrets(wire)),
            }
            self._write(wire, call, record)
            headers_back = {k: v for k, v in upstream.headers.items() if k.lower() not in DROP_RESPONSE}
            return Response(error_body, status, headers=headers_back)

    def _refuse(
        self, wire: AttemptWire, call: Call, request: Request, size: int, reason: str, message: str
    ) -> Response:
        """A call the gateway answers itself, never forwarded: in the ledger and the transcript as
        refused (no tokens, no cost), its request by size only (the body is not kept; no header is,
        so no credential either)."""
        call.refused = reason
        call.usage, call.cost_usd = Usage(), 0.0
        wire.ledger.record(call)
        record = {
            "at": call.at,
            "request": {
                "method": request.method,
                "path": request.url.path,
                "query": transcript.redact_query(request.url.query),
                "bytes": size,
            },
            "refusal": {"reason": reason, "status": REFUSED_STATUS, "message": message},
        }
        self._write(wire, call, record)
        return _error(REFUSED_STATUS, f"rgbridge gateway: {message}")

    def _outgoing(self, request: Request, api: Api, path: str) -> tuple[str, dict[str, str]]:
        """The provider's URL and the headers sent there: the agent's credential (header or `key=`
        parameter) dropped, the real key added."""
        forward_query = "&".join(p for p in request.url.query.split("&") if p and not p.lower().startswith("key="))
        url = self.providers.url(api, path, forward_query)
        out_headers = {k: v for k, v in request.headers.items() if k.lower() not in DROP_REQUEST}
        out_headers["accept-encoding"] = "identity"
        key = self.providers.keys.get(api)
        if key is not None:
            out_headers.update(key.headers())
        return url, out_headers

    async def _wait_retry(self, call: Call, ledger: Ledger, retry_after: str | None, try_started: float) -> bool:
        """Wait before the next try if one fits in the attempt's time; False: give up."""
        delay = backoff(call.tries, retry_after)
        if call.tries >= MAX_TRIES or ledger.remaining() < delay + MARGIN_SECONDS or ledger.auth is not None:
            call.waited_seconds += time.monotonic() - try_started
            return False
        await asyncio.sleep(delay)
        call.waited_seconds += time.monotonic() - try_started
        call.tries += 1
        return True

    def _answer_failed(
        self, wire: AttemptWire, call: Call, record: dict[str, Any], started: float, status: int, message: str
    ) -> Response:
        call.seconds = time.monotonic() - started
        wire.ledger.record(call)
        record["response"] = {"status": None, "error": message}
        self._write(wire, call, record)
        return _error(status, f"rgbridge gateway: the provider did not answer ({message})")

    def _stream(
        self,
        wire: AttemptWire,
        call: Call,
        record: dict[str, Any],
        started: float,
        upstream: httpx.Response,
        stream: bool,
    ) -> Response:
        call.status = upstream.status_code
        reader = UsageReader(call.api, streamed=stream)  # type: ignore[arg-type]
        kept = bytearray()
        headers_back = {k: v for k, v in upstream.headers.items() if k.lower() not in DROP_RESPONSE}

        async def body() -> Any:
            try:
                async for chunk in upstream.aiter_raw():
                    reader.feed(chunk)
                    if len(kept) < transcript.MAX_BODY_CHARS:
                        kept.extend(chunk)
                    yield chunk
            except httpx.HTTPError as exc:  # the provider's stream broke off
                call.error = f"stream broke off: {type(exc).__name__}: {exc}"[:500]
                call.failure = "provider_unavailable"
            finally:
                reader.close()
                call.seconds = time.monotonic() - started
                call.usage = reader.usage
                if reader.error and call.failure is None:
                    call.error = reader.error
                    call.failure = classify_text(reader.error) or "provider_unavailable"
                if call.billed and call.ok:
                    call.cost_usd = wire.ledger.rules.prices.cost(call.model, call.usage)
                wire.ledger.record(call)
                record["response"] = {
                    "status": call.status,
                    "headers": transcript.redact_headers(dict(upstream.headers)),
                    "body": transcript.body_text(bytes(kept), self._secrets(wire)),
                }
                self._write(wire, call, record)
                await upstream.aclose()

        return StreamingResponse(body(), status_code=upstream.status_code, headers=headers_back)

    def _secrets(self, wire: AttemptWire) -> list[str]:
        del wire  # every attempt's transcript hides every real key of the run
        return self.providers.secrets()

    def _write(self, wire: AttemptWire, call: Call, record: dict[str, Any]) -> None:
        if wire.transcript is not None:
            wire.transcript.write({**record, "call": call.as_dict()})


async def _read_capped(response: httpx.Response) -> bytes:
    out = bytearray()
    try:
        async for chunk in response.aiter_raw():
            if len(out) < MAX_ERROR_BODY:
                out.extend(chunk[: MAX_ERROR_BODY - len(out)])
    except httpx.HTTPError:
        pass
    finally:
        await response.aclose()
    return bytes(out)
