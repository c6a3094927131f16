"""Docker (docker-py) as the first Sandbox runtime: one sandbox is one container.

`DockerRuntime(client).create(spec)` creates (never pulls, never starts) a container with the
spec's security profile and the bridge's labels; `DockerSandbox` drives it through the
primitives of bridge/scoring/sandbox/containers.py. Sharing a sandbox's network is Docker's
`network_mode=container:<id>`. Labels, Container objects and tar streams stay in here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.models.containers import Container

from bridge.errors import ScoringError
from bridge.scoring.sandbox.containers import (
    create_container,
    exec_with_timeout,
    fetch_file,
    put_directory,
    read_logs,
    remove_container,
    wait_with_timeout,
)
from bridge.scoring.sandbox.docker_client import make_labels
from bridge.scoring.sandbox.protocol import (
    APP_GID,
    APP_UID,
    DEFAULT_LOG_CAP,
    ExecOutcome,
    SandboxSpec,
    SandboxState,
    WaitOutcome,
)


class DockerSandbox:
    """A created container behind the Sandbox protocol; removed (force) on `remove()`/exit."""

    def __init__(self, container: Container) -> None:
        self.container = container

    @property
    def id(self) -> str:
        return str(self.container.id)

    @property
    def image_id(self) -> str:
        return str(self.container.image.id)

    def copy_in(self, host_dir: Path, dest: str, *, uid: int = APP_UID, gid: int = APP_GID) -> None:
        put_directory(self.container, host_dir, dest, uid=uid, gid=gid)

    def start(self) -> None:
        self.container.start()

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
        return exec_with_timeout(
            self.container, argv, timeout, user=user, workdir=workdir, env=env, cap_bytes=max_output
        )

    def wait(self, timeout: float) -> WaitOutcome:
        return wait_with_timeout(self.container, timeout)

    def state(self) -> SandboxState:
        self.container.reload()
        state = self.container.attrs.get("State", {}) or {}
        return SandboxState(
            running=bool(state.get("Running")), exit_code=state.get("ExitCode"), oom_killed=bool(state.get("OOMKilled"))
        )

    def attach(self, *, stdout: bool) -> Iterable[bytes]:
        # Attaching reads the container's stdio directly: `logs(follow=True)` reads the engine's
        # log file and stops early when a flood makes the json-file driver rotate it (seen on
        # 20.10). Socket errors end the stream quietly: `wait` and `state` have the truth.
        stream = self.container.attach(stdout=stdout, stderr=not stdout, stream=True, logs=False)

        def chunks() -> Iterable[bytes]:
            with contextlib.suppress(DockerException, requests.RequestException, OSError):
                yield from stream

        return chunks()

    def logs(self, *, max_bytes: int = DEFAULT_LOG_CAP, stdout: bool = True, stderr: bool = True) -> str:
        return read_logs(self.container, cap_bytes=max_bytes, stdout=stdout, stderr=stderr)

    def copy_out(self, path: str, *, max_bytes: int) -> bytes | None:
        return fetch_file(self.container, path, max_bytes=max_bytes)

    def remove(self) -> None:
        with contextlib.suppress(DockerException, requests.RequestException):
            remove_container(self.container)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.remove()


class DockerRuntime:
    """Sandboxes as containers of one Docker engine."""

    name = "docker"

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def create(self, spec: SandboxSpec) -> DockerSandbox:
        extra: dict[str, Any] = {}
        if spec.share_network_of is not None:
            if not isinstance(spec.share_network_of, DockerSandbox):
                raise TypeError("a Docker sandbox can only share the network of another Docker sandbox")
            extra["network_mode"] = f"container:{spec.share_network_of.id}"
        if spec.volumes:
            for name in spec.volumes:
                # Docker would create a missing named volume, seeded from the image: a sandbox
                # without its dependencies. Refuse instead.
                try:
                    self.client.volumes.get(name)
                except NotFound as exc:
                    raise ScoringError(f"dependency volume {name} not found; score again to rebuild it") from exc
            extra["mounts"] = [
                docker.types.Mount(path, name, type="volume", read_only=True, no_copy=True)
                for name, path in sorted(spec.volumes.items())
            ]
        container = create_container(
            self.client,
            spec.image,
            name=spec.name,
            command=list(spec.command) if spec.command is not None else None,
            labels=make_labels(kind=spec.kind, run_id=spec.run_id, task=spec.task_id, extra=spec.metadata),
            env=dict(spec.env),
            limits=spec.limits,
            working_dir=spec.workdir,
            **extra,
        )
        return DockerSandbox(container)
