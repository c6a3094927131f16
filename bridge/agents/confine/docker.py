"""Docker: the agent in a container of the bridge's own base image (the image scoring uses),
with the same allow-list as bubblewrap mounted at the same paths: the CLI and what it needs
read-only, the workspace, HOME and TMPDIR read-write, protected paths under a mount masked.

The container runs as the caller's uid:gid with every capability dropped, no-new-privileges, a
read-only root and a tmpfs /tmp, its own PID namespace (an init reaps and forwards signals), the
host's network (loopback reaches the bridge's MCP server and the model endpoint), and the memory
and pids limits. It is labelled like the scoring containers (owner, kind, the bridge's pid and
host), so the sweeps of bridge/scoring/run remove it if this process dies; ending the attempt
stops, kills and removes it, and every process in it goes with it.

The engine must see the bound paths: an engine on another machine (DOCKER_HOST over TCP) does
not, and cannot run a confined attempt of this host.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container
from docker.types import LogConfig, Mount

from bridge.agents.confine.binds import BindPlan, plan
from bridge.agents.confine.cgroups import counted_hit, counters_of
from bridge.agents.confine.model import Confinement, SandboxError, required
from bridge.errors import ScoringError
from bridge.scoring.images.base import base_image_tag, image_exists
from bridge.scoring.run.runner import LABEL_PID
from bridge.scoring.sandbox.containers import remove_container
from bridge.scoring.sandbox.docker_client import engine_available, get_client, make_labels

KIND_LABEL = "agent"
MONITOR_PERIOD = 1.0
TMPFS_BYTES = 512 * 1024**2
MASK_BYTES = 64 * 1024


def mounts(binds: BindPlan) -> list[Mount]:
    found = []
    for path, op in binds.ordered():
        if op in ("ro", "rw"):
            found.append(Mount(str(path), str(path), type="bind", read_only=op == "ro"))
        elif op == "mask_dir":
            # writable (a few KiB, private to the container): a bind inside it needs its mount point
            found.append(Mount(str(path), None, type="tmpfs", tmpfs_size=MASK_BYTES))
        else:
            found.append(Mount(str(path), "/dev/null", type="bind", read_only=True))
    found.append(Mount("/tmp", None, type="tmpfs", tmpfs_size=TMPFS_BYTES, tmpfs_mode=0o1777))
    return found


def _pump(frames: Any, stdout_fd: int, stderr: IO[bytes]) -> None:
    """The container's output, attached before it started (nothing is missed however fast it
    exits): stdout into the pipe the run reads, stderr into the attempt's stderr file."""
    try:
        for out, err in frames:
            if out:
                os.write(stdout_fd, out)
            if err:
                stderr.write(err)
                stderr.flush()
    except (DockerException, requests.RequestException, OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(stdout_fd)


@dataclass
class DockerRunning:
    container: Container
    stdout: IO[bytes]
    enforced_by: str = "docker"
    _code: int | None = None
    _exited: threading.Event = field(default_factory=threading.Event)
    _hit: str | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _counters: tuple[Path, str, Path] | None = None

    def watch(self, frames: Any, stderr: IO[bytes], write_fd: int) -> None:
        for target, args in ((_pump, (frames, write_fd, stderr)), (self._wait, ())):
            thread = threading.Thread(target=target, args=args, daemon=True)
            thread.start()
            self._threads.append(thread)
        monitor = threading.Thread(target=self._monitor, daemon=True)
        monitor.start()

    def _wait(self) -> None:
        try:
            self._code = int(self.container.wait().get("StatusCode", -1))
        except (DockerException, requests.RequestException):
            self._code = None
        self._exited.set()

    def _monitor(self) -> None:
        while not self._exited.is_set() and self._hit is None:
            self._check()
            self._exited.wait(MONITOR_PERIOD)

    def _check(self) -> None:
        try:
            self.container.reload()
            state = self.container.attrs.get("State", {}) or {}
            if self._counters is None and state.get("Pid"):
                self._counters = counters_of(int(state["Pid"]))
            if state.get("OOMKilled"):
                self._hit = "memory"
            elif self._counters is not None:
                self._hit = counted_hit(self._counters)
            elif state.get("Running"):  # the engine's cgroups are not visible from here: ask it
                stats = self.container.stats(stream=False, one_shot=True)
                pids = stats.get("pids_stats", {}) or {}
                if pids.get("limit") and int(pids.get("current", 0)) >= int(pids["limit"]):
                    self._hit = "pids"
        except (DockerException, requests.RequestException, ValueError):
            pass

    def wait(self, timeout: float) -> int | None:
        return self._code if self._exited.wait(timeout) else None

    def limit_hit(self) -> str | None:
        return self._hit

    def end(self, grace: float) -> int | None:
        with contextlib.suppress(DockerException, requests.RequestException):
            if not self._exited.is_set():
                self.container.stop(timeout=max(0, int(round(grace))))
        self._exited.wait(30)
        if self._hit is None:
            self._check()  # the OOM flag and the counters, before the container goes
        with contextlib.suppress(DockerException, requests.RequestException):
            remove_container(self.container)
        for thread in self._threads:
            thread.join(timeout=10)
        return self._code


class DockerConfiner:
    kind = "docker"

    def __init__(self, image: str | None = None) -> None:
        self.image = image or base_image_tag()
        self._engine: str | None = None

    def version(self) -> str:
        if self._engine is None:
            ok, reason = engine_available()
            self._engine = reason.removeprefix("Docker Engine ").split(" ")[0] if ok else "unavailable"
        return f"engine {self._engine}, image {self.image}"

    def check(self) -> None:
        ok, reason = engine_available()
        if not ok:
            raise SandboxError(f"--sandbox docker: {reason}; start the engine, or install bubblewrap")
        try:
            present = image_exists(get_client(), self.image)
        except (ScoringError, DockerException, requests.RequestException) as exc:
            raise SandboxError(f"--sandbox docker: {exc}") from None
        if not present:
            raise SandboxError(f"--sandbox docker: the base image {self.image} is missing; run: rgbridge images build")
        self._trial()

    def _trial(self) -> None:
        """A container reads a file this process just wrote, bound at its host path: the engine
        sees this machine's files (a remote DOCKER_HOST does not)."""
        token = secrets.token_hex(8)
        with tempfile.TemporaryDirectory(prefix="rgbridge-probe-") as folder:
            probe = Path(folder)
            (probe / "probe").write_text(token, encoding="ascii")
            with open(os.devnull, "wb") as sink:
                running = self.start(
                    ["/bin/cat", str(probe / "probe")],
                    env={},
                    cwd=probe,
                    stderr=sink,
                    confinement=Confinement(workspace=probe, home=probe, tmp=probe),
                )
                try:
                    seen = running.stdout.read(64).decode("ascii", "replace")
                finally:
                    running.end(0)
        if seen != token:
            raise SandboxError(
                "--sandbox docker: the engine does not see this machine's files (a remote DOCKER_HOST?); "
                "the attempt's folders are bind-mounted at their host paths: run the engine here, or use bwrap"
            )

    def describe(self, confinement: Confinement | None) -> dict[str, Any]:
        confinement = required(self.kind, confinement)
        return {
            "kind": self.kind,
            "version": self.version(),
            "binds": plan(confinement).as_dict(system=False),  # /usr, /etc: the image's own
            "limits": confinement.limits.as_dict(),
        }

    def start(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, stderr: IO[bytes], confinement: Confinement | None
    ) -> DockerRunning:
        confinement = required(self.kind, confinement)
        binds = plan(confinement)
        limits = confinement.limits
        try:
            client = get_client()
            container = client.containers.create(
                self.image,
                entrypoint=[argv[0]],
                command=argv[1:],
                name=f"rgbridge-agent-{os.getpid()}-{secrets.token_hex(4)}",
                labels=make_labels(
                    kind=KIND_LABEL, extra={LABEL_PID: str(os.getpid()), "rgbridge.host": os.uname().nodename}
                ),
                environment=dict(env),
                working_dir=str(cwd),
                user=f"{os.getuid()}:{os.getgid()}",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                network_mode="host",
                init=True,
                read_only=True,
                mem_limit=limits.memory_bytes,
                memswap_limit=limits.memory_bytes,
                pids_limit=limits.pids,
                mounts=mounts(binds),
                log_config=LogConfig(type="json-file", config={"max-size": "20m", "max-file": "5"}),
                detach=True,
            )
        except (ScoringError, DockerException, requests.RequestException) as exc:
            raise SandboxError(f"--sandbox docker: cannot create the agent's container: {exc}") from None
        read_fd, write_fd = os.pipe()
        running = DockerRunning(container, os.fdopen(read_fd, "rb"))
        try:
            frames = container.attach(stdout=True, stderr=True, stream=True, logs=True, demux=True)
            container.start()
            running.watch(frames, stderr, write_fd)
        except (DockerException, requests.RequestException) as exc:
            with contextlib.suppress(OSError):
                os.close(write_fd)
            running.end(0)
            raise SandboxError(f"--sandbox docker: the agent's container did not start: {exc}") from None
        return running


def leftover_agent_containers(client: docker.DockerClient) -> list[str]:
    """Names of this process's agent containers still on the engine (tests assert none)."""
    try:
        found = client.containers.list(
            all=True, filters={"label": [f"rgbridge.kind={KIND_LABEL}", f"{LABEL_PID}={os.getpid()}"]}
        )
    except (DockerException, requests.RequestException, NotFound):
        return []
    return [c.name for c in found]
