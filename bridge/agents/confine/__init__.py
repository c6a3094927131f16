"""Confined agent runs: what one attempt of `rgbridge run` may see and use (an allow-list of
binds), the sandbox it runs in (bubblewrap, a Docker container, or none), its limits (memory,
processes, disk of its folders), the guarantee that none of its processes outlives it, the
agent's process itself (``process``) and the paths it must never see (``protected``)."""

from bridge.agents.confine.binds import protected_defaults
from bridge.agents.confine.choose import (
    KINDS,
    SandboxKind,
    forget_probes,
    ready_sandbox,
    sandbox_check,
    sandbox_for,
)
from bridge.agents.confine.model import Confinement, Confiner, Limits, Running, SandboxError
from bridge.agents.confine.needs import needs_of, needs_of_template
from bridge.agents.confine.scope import confinement_for

__all__ = [
    "KINDS",
    "Confinement",
    "Limits",
    "Running",
    "Confiner",
    "SandboxError",
    "SandboxKind",
    "confinement_for",
    "forget_probes",
    "needs_of",
    "needs_of_template",
    "protected_defaults",
    "ready_sandbox",
    "sandbox_check",
    "sandbox_for",
]
