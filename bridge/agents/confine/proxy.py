"""The allow-list proxy of `rgbridge run --network allow`: an HTTP proxy on the host's loopback,
reached from the sandbox through a door (bridge/agents/confine/network.py), that tunnels `CONNECT
host:port` (HTTPS) and relays absolute-form requests (`GET http://host/...`) only to the
`--allow-host` names, answers 403 to everything else, and logs every host asked for, allowed or
refused (the recording's `network_request` events, docs/recording-format.md).

A name matches exactly (case aside): `--allow-host pypi.org` does not let `files.pypi.org`
through. The agent is told of the proxy by HTTP_PROXY/HTTPS_PROXY (and their lower-case forms),
with the doors' own 127.0.0.1 kept direct by NO_PROXY."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from bridge.agents.confine.network import CONNECT_SECONDS, pump, stop_listening

#: a request head larger than this is refused (a proxy request's head is a few hundred bytes)
HEAD_BYTES = 65536
#: how many asks one attempt's log keeps (a looping agent does not fill the recording)
LOG_LIMIT = 10000


@dataclass(frozen=True)
class Asked:
    """One request the agent made of the proxy."""

    asked_at: str  # when (UTC, ISO)
    method: str  # CONNECT, GET, ...
    host: str
    port: int
    allowed: bool
    status: int  # what the proxy answered: 200 (tunnel), the upstream's own status, 403, 502, 400

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def normal_host(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def proxy_env(port: int) -> dict[str, str]:
    """What tells the agent's programs (curl, pip, git, Node, Python) to use the proxy."""
    url = f"http://127.0.0.1:{port}"
    direct = "127.0.0.1,localhost,::1"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": direct,
        "no_proxy": direct,
    }


def _target(method: str, target: str) -> tuple[str, int, str] | None:
    """(host, port, origin-form path) of a proxy request, or None when it names no host."""
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            return None
        return normal_host(host), int(port), ""
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        return None
    try:
        number = parts.port or 80
    except ValueError:
        return None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return normal_host(parts.hostname), number, path


class AllowProxy:
    """One attempt's proxy: `port` on the host's 127.0.0.1, `asked` its log."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self.allowed = frozenset(normal_host(h) for h in allowed)
        self.asked: list[Asked] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # shut down by close(): this thread alone closes it
                self._listener.close()
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _log(self, method: str, host: str, port: int, allowed: bool, status: int) -> None:
        with self._lock:
            if len(self.asked) < LOG_LIMIT:
                now = datetime.now(UTC).isoformat(timespec="milliseconds")
                self.asked.append(Asked(now, method, host, port, allowed, status))

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            conn.settimeout(CONNECT_SECONDS)
            head = b""
            while b"\r\n\r\n" not in head:
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                head += chunk
                if len(head) > HEAD_BYTES:
                    return _answer(conn, 431, "Request Header Fields Too Large")
            line, _, rest = head.partition(b"\r\n")
            words = line.decode("latin-1").split()
            if len(words) != 3:
                return _answer(conn, 400, "Bad Request")
            method, target, version = words
            found = _target(method.upper(), target)
            if found is None:
                return _answer(conn, 400, "Bad Request")
            host, port, path = found
            if host not in self.allowed:
                self._log(method.upper(), host, port, False, 403)
                return _answer(conn, 403, "Forbidden: host not in --allow-host")
            try:
                up = socket.create_connection((host, port), timeout=CONNECT_SECONDS)
            except OSError:
                self._log(method.upper(), host, port, True, 502)
                return _answer(conn, 502, "Bad Gateway")
            self._log(method.upper(), host, port, True, 200)
            conn.settimeout(None)
            up.settimeout(None)
            with contextlib.closing(up):
                if method.upper() == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    leftover = rest.partition(b"\r\n\r\n")[2]
                else:
                    leftover = f"{method} {path} {version}\r\n".encode("latin-1") + rest
                if leftover:
                    up.sendall(leftover)
                back = threading.Thread(target=pump, args=(up, conn), daemon=True)
                back.start()
                pump(conn, up)
                back.join()

    def log(self) -> list[dict[str, object]]:
        with self._lock:
            return [a.as_dict() for a in self.asked]

    def close(self) -> None:
        stop_listening(self._listener)


def _answer(conn: socket.socket, status: int, reason: str) -> None:
    body = (reason + "\n").encode("latin-1")
    with contextlib.suppress(OSError):
        conn.sendall(
            f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            + body
        )
