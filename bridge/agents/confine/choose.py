"""Which sandbox: `sandbox_for(kind)`, the `auto` choice (bubblewrap if a trial run works here,
else Docker if the engine answers and the base image is there, else a refusal naming the fix),
and the line `rgbridge doctor` prints about it. Probes are cached per process: a run asks once."""

from __future__ import annotations

import threading
from typing import Literal, get_args

from bridge.agents.confine.bwrap import BwrapConfiner
from bridge.agents.confine.docker import DockerConfiner
from bridge.agents.confine.model import Confiner, SandboxError
from bridge.agents.confine.none import NoConfiner
from bridge.scoring.doctor import Check

SandboxKind = Literal["auto", "bwrap", "docker", "none"]
KINDS: tuple[SandboxKind, ...] = get_args(SandboxKind)

_lock = threading.Lock()
_probed: dict[str, SandboxError | None] = {}


def _probe(sandbox: Confiner) -> SandboxError | None:
    """The sandbox's check, once per process (None when it works)."""
    with _lock:
        if sandbox.kind not in _probed:
            try:
                sandbox.check()
                _probed[sandbox.kind] = None
            except SandboxError as exc:
                _probed[sandbox.kind] = exc
        return _probed[sandbox.kind]


def forget_probes() -> None:
    """Probe again (tests; after the user fixed the machine)."""
    with _lock:
        _probed.clear()


def sandbox_for(kind: str) -> Confiner:
    """The sandbox of that kind (not checked, except `auto`, which picks one that works)."""
    if kind == "bwrap":
        return BwrapConfiner()
    if kind == "docker":
        return DockerConfiner()
    if kind == "none":
        return NoConfiner()
    if kind != "auto":
        raise SandboxError(f"--sandbox {kind}: unknown (one of {', '.join(KINDS)})")
    bwrap, docker = BwrapConfiner(), DockerConfiner()
    bwrap_error = _probe(bwrap)
    if bwrap_error is None:
        return bwrap
    docker_error = _probe(docker)
    if docker_error is None:
        return docker
    raise SandboxError(
        f"no sandbox works here: {bwrap_error}; {docker_error}. "
        "Fix one of them, or run unconfined with --sandbox none (rows are marked unconfined)"
    )


def ready_sandbox(kind: str) -> Confiner:
    """The run's pre-flight: the sandbox of that kind, checked (a trial run, once per process);
    SandboxError naming the fix before any agent runs."""
    sandbox = sandbox_for(kind)
    error = _probe(sandbox)
    if error is not None:
        raise error
    return sandbox


def sandbox_check() -> Check:
    """`rgbridge doctor`'s "sandbox" line: which kind `auto` picks here, and how to enable the others."""
    sandboxes: dict[str, Confiner] = {"bwrap": BwrapConfiner(), "docker": DockerConfiner()}
    errors = {kind: _probe(sb) for kind, sb in sandboxes.items()}
    working = [f"{kind} ({sandboxes[kind].version()})" for kind, error in errors.items() if error is None]
    fixes = "; ".join(f"{kind}: {error}" for kind, error in errors.items() if error is not None)
    if not working:
        return Check(
            "sandbox",
            False,
            "no sandbox for `rgbridge run` works here (agents would need --sandbox none: unconfined)",
            fixes,
            "warning",
        )
    detail = f"`rgbridge run --sandbox auto` uses {working[0]}" + (
        f"; --sandbox {working[1]} works too" if len(working) > 1 else ""
    )
    return Check("sandbox", True, detail, fixes, "warning" if fixes else "error")
