"""Can `--network closed|allow` start here: which mode a run gets from its options, and a trial
of the closed network in the run's sandbox. The trial opens two listeners on this host's
127.0.0.1, gives the sandbox a door to the first only, and runs a probe inside that must read the
first's token through the door and be refused by the second (the loopback inside is the
sandbox's own). `rgbridge doctor` prints its line; the run's pre-flight refuses a mode that fails
it before any agent starts. Probes are cached per process and sandbox kind."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from bridge.agents.confine.model import Confinement, Confiner, SandboxError
from bridge.agents.confine.network import NETWORK_MODES, Doors, host_python, stop_listening
from bridge.scoring.doctor import Check

#: the probe run inside: argv = door port, other port; prints what each gave
PROBE = """
import socket, sys
def ask(port):
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
            s.settimeout(5)
            return s.recv(64).decode("ascii", "replace") or "empty"
    except OSError as exc:
        return "refused:" + type(exc).__name__
print(ask(sys.argv[1]) + " " + ask(sys.argv[2]))
"""
_checked: dict[str, str | None] = {}


def resolve_network(network: str | None, sandbox_kind: str, allow_hosts: Sequence[str]) -> str:
    """The run's mode: `--network` as given, by default `closed` (`host` under `--sandbox none`,
    which has no namespace to close; its rows are marked unconfined anyway). SandboxError when
    the options contradict each other."""
    mode = network or ("host" if sandbox_kind == "none" else "closed")
    if mode not in NETWORK_MODES:
        raise SandboxError(f"--network {mode}: one of {', '.join(NETWORK_MODES)}")
    if mode != "host" and sandbox_kind == "none":
        raise SandboxError(
            f"--network {mode} needs a sandbox (--sandbox bwrap or docker); --sandbox none shares the host's"
        )
    if allow_hosts and mode != "allow":
        raise SandboxError("--allow-host needs --network allow")
    if mode == "allow" and not allow_hosts:
        raise SandboxError("--network allow needs at least one --allow-host HOST")
    return mode


def _token_server(token: str) -> tuple[socket.socket, int]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                listener.close()
                return
            with contextlib.suppress(OSError), conn:
                conn.sendall(token.encode("ascii"))

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def trial(sandbox: Confiner) -> None:
    """SandboxError naming what failed when the closed network does not work in `sandbox`."""
    door_token, other_token = secrets.token_hex(6), secrets.token_hex(6)
    door_listener, door_port = _token_server(door_token)
    other_listener, other_port = _token_server(other_token)
    python = host_python() if sandbox.kind == "bwrap" else "python3"
    try:
        with Doors() as doors, tempfile.TemporaryDirectory(prefix="rgbridge-netcheck-") as folder:
            probe = Path(folder)
            os.chmod(probe, 0o777)  # an unprivileged sandbox user writes nothing here, but may enter
            door = doors.open("check", door_port)
            confinement = Confinement(workspace=probe, home=probe, tmp=probe, network="closed", doors=(door,))
            with open(os.devnull, "wb") as sink:
                running = sandbox.start(
                    [python, "-I", "-S", "-c", PROBE, str(door_port), str(other_port)],
                    env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                    cwd=probe,
                    stderr=sink,
                    confinement=confinement,
                )
                try:
                    seen = running.stdout.read(256).decode("ascii", "replace").split()
                finally:
                    running.end(0)
    finally:
        stop_listening(door_listener)
        stop_listening(other_listener)
    if len(seen) != 2 or seen[0] != door_token:
        raise SandboxError(
            f"--network closed: the {sandbox.kind} sandbox did not reach its door (saw {' '.join(seen) or 'nothing'}; "
            f"the doors' forwarder runs under {python} inside it); use --network host (rows are marked), "
            "or fix the sandbox (rgbridge doctor)"
        )
    if seen[1] == other_token:
        raise SandboxError(
            f"--network closed: the {sandbox.kind} sandbox reached the host's loopback beyond its doors; "
            "its network namespace is not its own"
        )


def network_check(sandbox: Confiner) -> None:
    """`trial`, once per process and sandbox kind (a run asks once; its attempts reuse it)."""
    if sandbox.kind not in _checked:
        try:
            trial(sandbox)
            _checked[sandbox.kind] = None
        except SandboxError as exc:
            _checked[sandbox.kind] = str(exc)
    failed = _checked[sandbox.kind]
    if failed is not None:
        raise SandboxError(failed)


def forget_network_checks() -> None:
    _checked.clear()


def network_facts(kind: str = "auto") -> dict[str, object]:
    """Does `--network closed` (the default) work in the sandbox `kind` here: the trial, as
    `{"ok", "detail", "fix"}` (plain data: a Ray node's pre-flight sends it to the driver)."""
    from bridge.agents.confine.choose import ready_sandbox

    if kind == "none":
        return {"ok": True, "detail": "--sandbox none: the host's network (rows marked)", "fix": ""}
    try:
        sandbox = ready_sandbox(kind)
    except SandboxError as exc:
        return {"ok": False, "detail": "no sandbox: --network closed cannot start here", "fix": str(exc)}
    try:
        network_check(sandbox)
    except SandboxError as exc:
        return {"ok": False, "detail": f"--network closed does not work in {sandbox.kind}", "fix": str(exc)}
    detail = f"--network closed works in {sandbox.kind}: its own namespace, only the doors reach the host"
    return {"ok": True, "detail": detail, "fix": ""}


def network_fact_check(name: str, facts: object) -> list[Check]:
    """The doctor's line of `network_facts` (none for a node whose bridge sends none)."""
    if not isinstance(facts, dict):
        return []
    return [Check(name, bool(facts.get("ok")), str(facts.get("detail")), str(facts.get("fix") or ""), "warning")]


def network_line() -> Check:
    """`rgbridge doctor`'s "network" line: does `--network closed` (the default) work in the
    sandbox `--sandbox auto` picks here."""
    return network_fact_check("network", network_facts("auto"))[0]
