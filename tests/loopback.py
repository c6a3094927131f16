"""A test's HTTP server on loopback that leaves nothing running once closed.

`http.server.ThreadingHTTPServer`'s shutdown() and server_close() stop accepting, but a request
thread still holding a kept-alive connection (HTTP/1.1, a client that never closed its pool, such
as the gateway's) goes on waiting for the next request after the test; when that connection
finally breaks, its handler prints a traceback into whichever test runs then. `LoopbackServer`
ends those connections and joins every thread it started when it is closed.

    with LoopbackServer(Handler) as server:
        ... server.url ...
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: how long close() waits for a request thread once its connection is ended
JOIN_SECONDS = 10.0


class LoopbackServer(ThreadingHTTPServer):
    """Serves on its own thread from construction; `close()` (or leaving the `with`) ends it all."""

    def __init__(self, handler: Callable[..., BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        super().__init__((host, 0), handler)
        self._lock = threading.Lock()
        self._requests: dict[socket.socket, threading.Thread] = {}
        self._closing = False
        self._serving = threading.Thread(target=self.serve_forever, name=f"loopback-http-{self.port}", daemon=True)
        self._serving.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        # registered before it starts, so close() never misses a request accepted before shutdown()
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"loopback-http-{self.port}-request",
            daemon=True,
        )
        with self._lock:
            self._requests[request] = thread
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._requests.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a connection close() cut under a handler is not the handler's error
        if not self._closing:
            super().handle_error(request, client_address)

    def close(self) -> None:
        """Stop serving, end the open connections, join every thread; RuntimeError if one lingers."""
        self._closing = True
        if self._serving.is_alive():
            self.shutdown()
            self._serving.join(JOIN_SECONDS)
        with self._lock:
            requests = dict(self._requests)
        for request in requests:
            with contextlib.suppress(OSError):  # already closed by its handler
                request.shutdown(socket.SHUT_RDWR)
        for thread in requests.values():
            thread.join(JOIN_SECONDS)
        self.server_close()
        lingering = [t.name for t in (self._serving, *requests.values()) if t.is_alive()]
        if lingering:
            raise RuntimeError(f"loopback server threads still running after close: {', '.join(lingering)}")

    def __exit__(self, *exc: object) -> None:
        self.close()


def server_threads_alive() -> list[threading.Thread]:
    """Threads serving a test's socketserver (its accept loop or one of its requests).

    A server the bridge makes (the Maven cache's, the doctor's) is left out: it runs inside a
    scoring job or a check, and a job may go on after the test that started it (jobs end in the
    background by design), so a later test would be blamed for it."""
    found = []
    for thread in threading.enumerate():
        target = getattr(thread, "_target", None)  # a Thread keeps its target until it ends
        owner = getattr(target, "__self__", None)
        if not isinstance(owner, socketserver.BaseServer):
            continue
        if getattr(target, "__name__", "") not in ("serve_forever", "process_request_thread"):
            continue
        handler_module = str(getattr(owner.RequestHandlerClass, "__module__", ""))
        if not handler_module.startswith("bridge."):
            found.append(thread)
    return found
