"""The attempt's network (`rgbridge run --network closed|allow|host`) and its doors.

- `closed` (the default): the sandbox has its own network namespace (bubblewrap `--unshare-net`,
  Docker `--network none`) holding only a loopback. The agent reaches exactly the attempt's doors:
  each is a TCP endpoint on the host's 127.0.0.1 (the attempt's MCP server, the model gateway)
  that appears at the SAME port on the sandbox's own 127.0.0.1, so every `http://127.0.0.1:P/`
  URL works unchanged in every mode. The host end of a door is a unix socket in a folder only
  this process can list (mode 0700, never bound); the socket alone is bound into the sandbox,
  where bridge/agents/confine/forwarder.py relays to it, as Claude Code's sandbox runtime does.
- `allow`: closed, plus an HTTP(S) proxy door (bridge/agents/confine/proxy.py) letting through
  only the `--allow-host` names and logging every host asked for.
- `host`: the host's network, shared (the behaviour before issue 38); rows are marked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bridge.agents.confine.forwarder import CHUNK

NetworkMode = Literal["closed", "allow", "host"]
NETWORK_MODES: tuple[NetworkMode, ...] = ("closed", "allow", "host")
#: where the doors' sockets appear inside the sandbox (a read-only tmpfs holding only them)
INSIDE = Path("/run/rgbridge-doors")
#: a door's relay gives up connecting to its host endpoint after this long
CONNECT_SECONDS = 10.0


@dataclass(frozen=True)
class Door:
    """One endpoint the sandbox may reach: host 127.0.0.1:`port`, seen inside at the same port."""

    name: str  # what it is: "mcp", "gateway", "proxy"
    port: int
    socket: Path  # the host end (a unix socket this process listens on)

    @property
    def inside(self) -> Path:
        return INSIDE / f"{self.port}.sock"


def isolated(mode: str) -> bool:
    """The sandbox gets its own network namespace (everything but `host`)."""
    return mode != "host"


def forwarded(argv: list[str], doors: tuple[Door, ...], python: str = "python3") -> list[str]:
    """The agent's command line behind the forwarder: the doors listen before the agent starts."""
    source = Path(__file__).with_name("forwarder.py").read_text(encoding="utf-8")
    specs = [f"{door.port}={door.inside}" for door in doors]
    # -I: the agent's PYTHON* variables and user site do not reach it; -S: no site imports
    return [python, "-I", "-S", "-c", source, *specs, "--", *argv]


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


#: a unix socket's path is at most 107 bytes (sun_path); a deep TMPDIR would not fit one
SOCKET_PATH_MAX = 107


def _socket_base() -> str:
    """The temp folder, or /tmp when the temp folder is too deep for a socket path in it."""
    base = tempfile.gettempdir()
    room = len(os.fsencode(base)) + len("/rgbridge-doors-XXXXXXXX/65535.sock")
    return base if room <= SOCKET_PATH_MAX else "/tmp"


def stop_listening(listener: socket.socket) -> None:
    """End a listener another thread accepts on: shut it down (its accept fails at once) and let
    that thread close it. Closing it from here would free its descriptor while the thread may be
    about to accept on that number, which the next socket opened (another attempt's door) reuses."""
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)


class Doors:
    """The host ends of one attempt's doors: a private folder of unix sockets, each relayed to
    its endpoint on the host's loopback by a thread of this process. `close()` ends them all."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rgbridge-doors-", dir=_socket_base()))
        self.folder.chmod(0o700)
        self.doors: list[Door] = []
        self._listeners: list[socket.socket] = []

    def open(self, name: str, port: int) -> Door:
        path = self.folder / f"{port}.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        # the agent may run as another user (an unprivileged bubblewrap run): it must connect
        path.chmod(0o666)
        listener.listen(128)
        self._listeners.append(listener)
        thread = threading.Thread(target=self._serve, args=(listener, port), daemon=True)
        thread.start()
        door = Door(name, port, path)
        self.doors.append(door)
        return door

    def _serve(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # shut down by close(): this thread alone closes it (see stop_listening)
                listener.close()
                return
            threading.Thread(target=self._relay, args=(conn, port), daemon=True).start()

    def _relay(self, conn: socket.socket, port: int) -> None:
        try:
            up = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_SECONDS)
            up.settimeout(None)
        except OSError:
            conn.close()
            return
        back = threading.Thread(target=pump, args=(up, conn), daemon=True)
        back.start()
        pump(conn, up)
        back.join()
        conn.close()
        up.close()

    def close(self) -> None:
        for listener in self._listeners:
            stop_listening(listener)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Doors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def host_python() -> str:
    """The interpreter the forwarder runs under in a bubblewrap sandbox: the system's own, which
    the sandbox binds anyway (/usr), never the bridge's virtual environment."""
    for name in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(name, os.X_OK):
            return name
    return "python3"
