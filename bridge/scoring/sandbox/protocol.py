"""The sandbox interface the scoring profiles run on: create, copy in, exec, copy out, remove.

A runner never sees a container runtime: it asks a `SandboxRuntime` for a `Sandbox` built from a
`SandboxSpec` (image, command, env, limits, whose loopback to share) and drives it through the
small `Sandbox` protocol below. Docker (docker-py) is the first runtime
(bridge/scoring/sandbox/docker_sandbox.py); another runtime is one new class implementing both
protocols. The same idea as SWE-bench's `TestSpec` over its Docker harness and Harbor's
environments: what a scoring step does is data, where it runs is a replaceable backend.

Security defaults live in `SandboxLimits`: non-root user, every capability dropped,
no-new-privileges, pids/memory/CPU limits, no network. A sandbox is removed on leaving its
`with` block, whatever happened inside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

APP_UID = 10001
APP_GID = 10001
DEFAULT_LOG_CAP = 1_000_000


@dataclass
class SandboxLimits:
    """Security profile and resource limits of a scoring sandbox.

    ``read_only`` defaults to False: generated services routinely write next to their code
    (SQLite files in /repo, upload dirs, ``__pycache__``), upstream runs them on a writable
    filesystem, and a read-only root would turn those into deployment failures. The writable
    layer is private to the sandbox and discarded with it; ``tmpfs`` can still be used for
    /tmp. Network defaults to none.
    """

    user: str = f"{APP_UID}:{APP_GID}"
    cap_drop: list[str] = field(default_factory=lambda: ["ALL"])
    cap_add: list[str] = field(default_factory=list)
    security_opt: list[str] = field(default_factory=lambda: ["no-new-privileges:true"])
    pids_limit: int = 256
    mem_limit: str = "2g"
    memswap_limit: str | None = None  # None = same as mem_limit (no swap)
    nano_cpus: int = 1_000_000_000
    init: bool = True
    network_mode: str = "none"
    read_only: bool = False
    tmpfs: dict[str, str] | None = None  # e.g. {"/tmp": "size=256m,mode=1777"}
    nofile: int | None = 8192
    runtime: str | None = None  # e.g. "runsc" where gVisor is installed
    # Our own json-file rotation: engines often set a small daemon default (this one keeps
    # 3 x 10 MB), which silently drops the *start* of a chatty container's log (where the
    # phase markers are). 5 x 20 MB keeps the head for anything below 100 MB and caps disk.
    log_max_size: str = "20m"
    log_max_files: int = 5


@dataclass(frozen=True)
class WaitOutcome:
    exit_code: int | None
    timed_out: bool
    oom_killed: bool


@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int | None
    output: str
    timed_out: bool


@dataclass(frozen=True)
class SandboxState:
    running: bool
    exit_code: int | None
    oom_killed: bool


@dataclass
class SandboxSpec:
    """What to create: the runtime maps it to its own objects (a container for Docker).

    ``share_network_of`` puts the new sandbox in another one's network namespace: the pair
    shares the loopback interface only (the tester reaches the service on ``127.0.0.1``, and
    neither reaches anything else). ``kind``, ``run_id``, ``task_id`` and ``metadata`` tag the
    sandbox so the runtime can sweep what a run left behind (Docker: labels).
    """

    image: str
    name: str
    command: Sequence[str] | None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    kind: str = "sandbox"
    run_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    share_network_of: Sandbox | None = None
    #: read-only volumes (name -> path): a dependency environment kept in a volume
    #: (bridge/scoring/images/sets/env_volume.py); a volume that does not exist is an error, never
    #: an empty one created on the fly
    volumes: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Sandbox(Protocol):
    """One isolated process tree with its own filesystem, created but not yet started."""

    @property
    def image_id(self) -> str:
        """The content id of the image it runs (cache keys depend on it)."""
        ...

    def copy_in(self, host_dir: Path, dest: str, *, uid: int = APP_UID, gid: int = APP_GID) -> None:
        """Copy ``host_dir``'s contents to the absolute path ``dest``, owned by uid:gid; symlinks
        are copied as links, never followed."""
        ...

    def start(self) -> None: ...

    def exec(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        max_output: int = DEFAULT_LOG_CAP,
        user: str | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecOutcome:
        """Run ``argv`` in the started sandbox; the whole command is killed after ``timeout``
        seconds, and its combined output is capped to ``max_output`` bytes (head and tail)."""
        ...

    def wait(self, timeout: float) -> WaitOutcome:
        """Wait for the main command to exit, killing it after ``timeout`` seconds."""
        ...

    def state(self) -> SandboxState: ...

    def attach(self, *, stdout: bool) -> Iterable[bytes]:
        """The live stdout (or stderr) of the main command, from now on: attach before start
        to miss nothing."""
        ...

    def logs(self, *, max_bytes: int = DEFAULT_LOG_CAP, stdout: bool = True, stderr: bool = True) -> str:
        """The main command's output so far, capped (head and tail), ANSI stripped."""
        ...

    def copy_out(self, path: str, *, max_bytes: int) -> bytes | None:
        """The regular file at ``path`` (None if absent); anything else, or a file over
        ``max_bytes``, raises bridge.scoring.sandbox.archives.UnsafeArchiveError."""
        ...

    def remove(self) -> None:
        """Kill and delete; idempotent."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class SandboxRuntime(Protocol):
    """Makes sandboxes: Docker today (docker_sandbox.DockerRuntime), one class per runtime."""

    name: str

    def create(self, spec: SandboxSpec) -> Sandbox: ...
