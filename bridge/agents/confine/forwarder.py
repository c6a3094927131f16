"""The doors' inside end: run in the sandbox's own network namespace before the agent, it listens
on the sandbox's 127.0.0.1 at each door's port and relays every connection to the door's unix
socket (bound into the sandbox), then becomes the agent (exec). Stdlib only, Python 3.8+: it runs
under whatever interpreter the sandbox shows (the host's /usr under bubblewrap, the image's under
Docker), as the first words of the agent's own command line (`python3 -I -S -c SOURCE
PORT=SOCKET... -- AGENT...`).

The listeners are bound before the agent exists, so its first connection is queued even if the
relaying child has not run yet. The relaying child holds no terminal or pipe of the run (its
standard streams are /dev/null) and dies with the sandbox: bubblewrap's init and Docker's end
every process of the namespace when the agent's main process exits."""

from __future__ import annotations

import os
import socket
import sys
import threading

CHUNK = 65536


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(conn: socket.socket, path: str) -> None:
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        up.close()
        return
    back = threading.Thread(target=_pump, args=(up, conn), daemon=True)
    back.start()
    _pump(conn, up)
    back.join()
    conn.close()
    up.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(conn, path), daemon=True).start()


def listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("rgbridge forwarder: usage: PORT=SOCKET... -- PROGRAM [ARGS...]\n")
        return 2
    cut = argv.index("--")
    agent = argv[cut + 1 :]
    doors = []
    for spec in argv[:cut]:
        port, _, path = spec.partition("=")
        doors.append((listen(int(port)), path))
    if not agent:
        sys.stderr.write("rgbridge forwarder: no program to run\n")
        return 2
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        threads = [threading.Thread(target=_serve, args=door, daemon=True) for door in doors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        os._exit(0)
    for listener, _ in doors:
        listener.close()  # the agent holds none of them (the child does)
    try:
        os.execvp(agent[0], agent)
    except OSError as exc:
        sys.stderr.write(f"rgbridge forwarder: cannot run {agent[0]}: {exc}\n")
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
