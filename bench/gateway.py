"""The model gateway's added latency per call, on loopback.

    python bench/gateway.py [--calls 200] [--json FILE]

A canned provider on loopback (below: a fixed streamed answer of each API, written event by
event with TCP_NODELAY, as a provider's server does) is called `--calls` times directly and
`--calls` times through the gateway (bridge/agents/gateway/), alternating, each path on one
kept-alive connection as a CLI keeps its own: streamed Anthropic Messages calls (SSE), then streamed
OpenAI Responses calls. (tests/scripted_model.py is not used: its server writes small SSE
events without TCP_NODELAY, so the client's delayed ACK adds ~40 ms per event on either path.) The added latency of a call is the time
to its last byte through the gateway minus the time directly; the bench prints the median and
the 90th percentile per API. The gateway should add under 5 ms (median) per call.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bridge.agents.gateway.ledger import Ledger  # noqa: E402
from bridge.agents.gateway.server import AttemptWire, Gateway  # noqa: E402
from bridge.agents.gateway.upstream import Providers  # noqa: E402

KEY = "sk-bench-key-0000000000"
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages",
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    "openai": ("/v1/responses", {"model": "gpt-5", "stream": True, "input": "hi"}),
}


def _sse(events: list[dict[str, Any]]) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


ANSWERS: dict[str, list[bytes]] = {
    "/v1/messages": _sse(
        [
            {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 12, "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
            {"type": "message_stop"},
        ]
    ),
    "/v1/responses": _sse(
        [
            {"type": "response.created", "response": {"id": "r"}},
            {"type": "response.output_text.delta", "delta": "ok"},
            {"type": "response.completed", "response": {"id": "r", "usage": {"input_tokens": 12, "output_tokens": 2}}},
        ]
    ),
}


class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        events = ANSWERS[self.path]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(sum(map(len, events))))
        self.end_headers()
        for event in events:
            self.wfile.write(event)
            self.wfile.flush()


def timed(client: httpx.Client, base: str, api: str, credential: str) -> float:
    path, body = BODIES[api]
    headers = {"x-api-key": credential, "anthropic-version": "2023-06-01"}
    if api == "openai":
        headers = {"authorization": f"Bearer {credential}"}
    started = time.perf_counter()
    with client.stream("POST", base + path, headers=headers, json=body) as r:
        for _ in r.iter_raw():
            pass
        assert r.status_code == 200, r.status_code
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        providers = Providers.from_env(base, {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY})
        with Gateway(providers) as gateway:
            token = gateway.open(AttemptWire(Ledger("bench.a1", time.monotonic() + 3600)))
            # one kept-alive client per path, as a CLI keeps its connection to its endpoint
            direct_client = httpx.Client(timeout=30)
            gateway_client = httpx.Client(timeout=30)
            for api in BODIES:
                for _ in range(5):  # warm both paths (imports, first connections)
                    timed(direct_client, base, api, KEY)
                    timed(gateway_client, gateway.url, api, token)
                added: list[float] = []
                direct: list[float] = []
                for _ in range(args.calls):
                    d = timed(direct_client, base, api, KEY)
                    g = timed(gateway_client, gateway.url, api, token)
                    direct.append(d)
                    added.append(g - d)
                added.sort()
                results[api] = {
                    "calls": args.calls,
                    "direct_median_ms": round(statistics.median(direct) * 1000, 3),
                    "added_median_ms": round(statistics.median(added) * 1000, 3),
                    "added_p90_ms": round(added[int(len(added) * 0.9) - 1] * 1000, 3),
                }
                print(
                    f"{api:9} direct {results[api]['direct_median_ms']:7.2f} ms   gateway adds "
                    f"median {results[api]['added_median_ms']:6.2f} ms, p90 {results[api]['added_p90_ms']:6.2f} ms"
                )
    finally:
        server.shutdown()
        server.server_close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
