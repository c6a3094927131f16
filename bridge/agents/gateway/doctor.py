"""`rgbridge doctor`'s "gateway" line: the model gateway starts on 127.0.0.1 here, a call through
it reaches a provider on loopback (a canned one this check starts) with the key the gateway adds
and without the agent's placeholder, the answer's usage is read, and the placeholder is refused
once revoked; then which provider keys
the environment holds (names only) and where `rgbridge run` would send their calls.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from bridge.agents.adapters.keys import KEY_SOURCES
from bridge.agents.gateway.ledger import Ledger
from bridge.agents.gateway.server import AttemptWire, Gateway
from bridge.agents.gateway.upstream import DEFAULT_HOSTS, Providers
from bridge.scoring.doctor import Check

PROBE_KEY = "rgbridge-doctor-probe-key"
ANSWER = (
    b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


class _Provider(BaseHTTPRequestHandler):
    seen: list[str]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(str(self.headers.get("x-api-key") or ""))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(ANSWER)))
        # one answer a connection: the handler's thread ends with it instead of waiting on the
        # gateway's kept-alive connection after the probe (the check's server would outlive it)
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(ANSWER)


def probe() -> str | None:
    """None when a call through a fresh gateway behaves; else what went wrong."""
    seen: list[str] = []
    handler = type("Provider", (_Provider,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        providers = Providers.from_env(f"http://127.0.0.1:{server.server_address[1]}", {"ANTHROPIC_API_KEY": PROBE_KEY})
        with Gateway(providers) as gateway:
            ledger = Ledger("doctor", time.monotonic() + 30)
            token = gateway.open(AttemptWire(ledger))
            body = {"model": "probe", "max_tokens": 1, "stream": True, "messages": []}
            answer = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": token}, json=body, timeout=30)
            if answer.status_code != 200 or answer.content != ANSWER:
                return f"a call through the gateway came back {answer.status_code}, not the provider's answer"
            if seen != [PROBE_KEY]:
                return "the provider did not receive the key the gateway adds"
            tokens = ledger.summary()["tokens"]
            if tokens["input"] != 3 or tokens["output"] != 2:
                return f"the answer's usage was not read ({json.dumps(tokens)})"
            gateway.close(token)
            late = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": token}, json=body, timeout=30)
            if late.status_code != 401 or len(seen) != 1:
                return "a revoked placeholder was not refused"
    except Exception as exc:  # doctor reports, never raises
        return f"{type(exc).__name__}: {exc}"
    finally:
        server.shutdown()
        server.server_close()
    return None


def gateway_check() -> Check:
    error = probe()
    if error is not None:
        return Check("gateway", False, f"the model gateway does not work here: {error}", "see README 'Model gateway'")
    keys = [var for sources in KEY_SOURCES.values() for var, _ in sources if os.environ.get(var)]
    where = ", ".join(f"{api} {host}" for api, host in DEFAULT_HOSTS.items())
    detail = (
        "the model gateway works on 127.0.0.1 (the key added on the host, placeholders swapped for it and refused once revoked, usage read); "
        + (f"keys set: {', '.join(keys)}" if keys else "no provider key set")
        + f"; calls go to {where} unless --model-base-url names another endpoint"
    )
    return Check("gateway", True, detail, "" if keys else "set the key of your agent's provider (README)", "warning")
