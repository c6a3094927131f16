"""tests/loopback.py: a test's HTTP server leaves no thread behind, and the conftest guard sees one that does."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback import LoopbackServer, server_threads_alive


class _KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the connection stays open for a next request

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def _kept_alive_call(port: int) -> http.client.HTTPConnection:
    """One answered request whose connection the client keeps open (as an unclosed pool does)."""
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    client.request("GET", "/")
    assert client.getresponse().read() == b"ok"
    return client


def _new_server_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in server_threads_alive() if t not in before]


def test_close_ends_a_kept_alive_connection_and_joins_every_thread() -> None:
    before = set(server_threads_alive())
    with LoopbackServer(_KeepAlive) as server:
        client = _kept_alive_call(server.port)
        assert _new_server_threads(before)  # serving, and the request's thread waits on the client
    try:
        assert _new_server_threads(before) == []  # at once: close() joined them
    finally:
        client.close()


def test_a_plain_server_shut_down_still_leaves_the_request_thread_the_guard_reports() -> None:
    """What the conftest guard catches: shutdown() and server_close() end the accept loop, not a
    request thread on a connection its client kept open."""
    before = set(server_threads_alive())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    client = _kept_alive_call(server.server_address[1])
    server.shutdown()
    server.server_close()
    serving.join(10)
    try:
        assert [t for t in _new_server_threads(before) if "process_request_thread" in t.name]
    finally:
        client.close()  # the handler reads the end of the connection and its thread ends
    for thread in _new_server_threads(before):
        thread.join(10)
    assert _new_server_threads(before) == []


def test_a_server_the_bridge_makes_is_not_counted_as_the_tests() -> None:
    """A scoring job's server (the Maven cache's) may outlive the test that started the job."""
    bridges = type("BridgeHandler", (_KeepAlive,), {"__module__": "bridge.scoring.java.mavencache"})
    before = set(server_threads_alive())
    server = ThreadingHTTPServer(("127.0.0.1", 0), bridges)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        assert _new_server_threads(before) == []
    finally:
        server.shutdown()
        server.server_close()
        serving.join(10)
