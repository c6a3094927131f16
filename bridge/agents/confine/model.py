"""What confining one attempt means, as data: the limits, what the agent may see, and the two
interfaces every sandbox kind implements (the sandbox, and one attempt running in it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from bridge.errors import BridgeError

GIB = 1024**3


class SandboxError(BridgeError):
    """A sandbox cannot start here, or a confinement asks for something it refuses; the message
    names the fix (install bubblewrap, enable user namespaces, use --sandbox docker)."""


@dataclass(frozen=True)
class Limits:
    """Per-attempt limits. An attempt that reaches one ends as `resource_limit` (still scored).

    memory_bytes: resident memory of every process of the attempt together (tmpfs files count:
        the sandbox's /tmp lives in memory); the kernel's OOM killer acting in the attempt's
        cgroup ends the attempt.
    pids: processes and threads alive at once; a fork refused at the limit ends the attempt.
    workspace_bytes: disk used by the attempt's folders (workspace, home, tmp), polled.
    """

    memory_bytes: int = 4 * GIB
    pids: int = 1024
    workspace_bytes: int = 2 * GIB

    def as_dict(self) -> dict[str, int]:
        return {"memory_bytes": self.memory_bytes, "pids": self.pids, "workspace_bytes": self.workspace_bytes}


@dataclass(frozen=True)
class Confinement:
    """What ONE attempt may see: an allow-list. Everything else of the machine is absent, and a
    `protected` path that would be exposed by a bind is masked (or the bind refused)."""

    workspace: Path  # read-write
    home: Path  # read-write: the attempt's own HOME (and CODEX_HOME)
    tmp: Path  # read-write: the attempt's own TMPDIR
    read_only: tuple[Path, ...] = ()  # the CLI and what it needs (needs_of), every --agent-bind PATH
    protected: tuple[Path, ...] = ()  # never visible: tasks, dataset, recordings, caches, the socket
    limits: Limits = field(default_factory=Limits)

    @property
    def read_write(self) -> tuple[Path, ...]:
        return (self.workspace, self.home, self.tmp)


def required(kind: str, confinement: Confinement | None) -> Confinement:
    if confinement is None:
        raise SandboxError(f"--sandbox {kind}: an attempt needs its Confinement (what it may see)")
    return confinement


class Running(Protocol):
    """One attempt's process tree inside a sandbox."""

    #: the agent's stdout (its event stream), read until EOF
    stdout: IO[bytes]
    #: what enforces the memory and pids limits: "cgroup2", "cgroup1", "watch", "docker" or "none"
    enforced_by: str

    def wait(self, timeout: float) -> int | None:
        """The main process's exit code, or None if it still runs after `timeout` seconds."""
        ...

    def limit_hit(self) -> str | None:
        """The limit the kernel enforced ("memory" or "pids"), once it did (checked between waits)."""
        ...

    def end(self, grace: float) -> int | None:
        """SIGTERM to the attempt's processes, SIGKILL after `grace` seconds; when it returns no
        process of the attempt is alive. The main process's exit code (None if killed)."""
        ...


class Confiner(Protocol):
    """A sandbox kind of `--sandbox` (bubblewrap, a Docker container, or none); named apart from
    scoring's `Sandbox` (bridge/scoring/sandbox/protocol.py), the container a profile runs in."""

    kind: str  # "bwrap" | "docker" | "none"

    def version(self) -> str: ...

    def check(self) -> None:
        """Raises SandboxError naming the fix when this sandbox cannot start here."""
        ...

    def start(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, stderr: IO[bytes], confinement: Confinement | None
    ) -> Running:
        """Start `argv` confined (only kind "none" runs without a confinement); SandboxError when
        it cannot start."""
        ...

    def describe(self, confinement: Confinement | None) -> dict[str, Any]:
        """What the recording keeps: kind, version, binds (ro/rw/masked), limits."""
        ...
