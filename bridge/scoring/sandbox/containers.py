"""Container primitives for the scoring profiles (docker-py, no ``containers.run()``).

Typical sequence for one container::

    c = create_container(client, image, name=..., command=[...], labels=make_labels(...),
                         env={...}, limits=SandboxLimits())
    with managed(c):                       # always removed (force) on exit
        put_directory(c, snapshot_dir, "/repo")      # before start(); ownership 10001:10001
        c.start()
        outcome = wait_with_timeout(c, 300)          # real wall-clock limit, OOM classified
        log = read_logs(c)                           # capped, ANSI stripped
        report = fetch_file(c, "/results/report.xml", max_bytes=5_000_000)

For a service + tester pair: start the service (``network_mode="none"``), then create the tester
with ``network_mode=f"container:{service.id}"``; the two share only the loopback interface.
``exec_with_timeout`` runs commands in a running container under an in-container
``timeout -k 5 N`` plus a host-side limit. Tar building and archive checks live in
bridge/scoring/sandbox/archives.py, output capping in bridge/scoring/sandbox/capture.py; the scoring profiles
reach all this through the Sandbox interface (bridge/scoring/sandbox/docker_sandbox.py).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container

from bridge.errors import ScoringError
from bridge.scoring.sandbox.archives import (
    DEFAULT_EXCLUDE,
    UnsafeArchiveError,
    build_directory_tar,
    read_one_file,
)
from bridge.scoring.sandbox.capture import HeadTail
from bridge.scoring.sandbox.docker_client import LABEL_OWNER, OWNER_VALUE
from bridge.scoring.sandbox.protocol import (
    APP_GID,
    APP_UID,
    DEFAULT_LOG_CAP,
    ExecOutcome,
    SandboxLimits,
    WaitOutcome,
)


def create_kwargs(limits: SandboxLimits) -> dict[str, Any]:
    """The security profile and limits as docker-py ``containers.create`` keyword arguments."""
    kwargs: dict[str, Any] = {
        "user": limits.user,
        "cap_drop": list(limits.cap_drop),
        "security_opt": list(limits.security_opt),
        "pids_limit": limits.pids_limit,
        "mem_limit": limits.mem_limit,
        "memswap_limit": limits.memswap_limit or limits.mem_limit,
        "nano_cpus": int(limits.nano_cpus),
        "init": limits.init,
        "network_mode": limits.network_mode,
        "read_only": limits.read_only,
    }
    if limits.cap_add:
        kwargs["cap_add"] = list(limits.cap_add)
    if limits.tmpfs:
        kwargs["tmpfs"] = dict(limits.tmpfs)
    if limits.nofile:
        kwargs["ulimits"] = [docker.types.Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile)]
    if limits.runtime:
        kwargs["runtime"] = limits.runtime
    if limits.log_max_size:
        kwargs["log_config"] = docker.types.LogConfig(
            type="json-file", config={"max-size": limits.log_max_size, "max-file": str(limits.log_max_files)}
        )
    return kwargs


# ----------------------------------------------------------------------------- create / remove


def _is_conflict(exc: APIError) -> bool:
    return getattr(exc, "status_code", None) == 409 or "Conflict" in str(exc)


def create_container(
    client: docker.DockerClient,
    image: str,
    *,
    name: str,
    command: Sequence[str] | str | None,
    labels: dict[str, str],
    env: dict[str, str] | None = None,
    limits: SandboxLimits | None = None,
    working_dir: str | None = None,
    network_mode: str | None = None,
    **extra: Any,
) -> Container:
    """Create (not start) a container; never pulls. A ghost with the same name is removed
    first; on a 409 name conflict the name gets a random suffix (up to three tries)."""
    try:
        client.images.get(image)
    except ImageNotFound as exc:
        raise ScoringError(f"image {image} not found locally; run `rgbridge images build`") from exc
    limits = limits or SandboxLimits()
    kwargs = create_kwargs(limits)
    if network_mode is not None:
        kwargs["network_mode"] = network_mode
    labels = {LABEL_OWNER: OWNER_VALUE, **labels}
    with contextlib.suppress(NotFound):
        remove_container(client.containers.get(name))
    attempt_name = name
    for attempt in range(4):
        try:
            return client.containers.create(
                image,
                command=command,
                name=attempt_name,
                labels=labels,
                environment=dict(env or {}),
                working_dir=working_dir,
                detach=True,
                **kwargs,
                **extra,
            )
        except APIError as exc:
            if not _is_conflict(exc) or attempt == 3:
                raise ScoringError(f"cannot create container {attempt_name}: {exc.explanation or exc}") from exc
            attempt_name = f"{name}-{secrets.token_hex(2)}"
    raise AssertionError("unreachable")


def remove_container(container: Container) -> None:
    """Force-remove with anonymous volumes; a container already gone is fine."""
    try:
        container.remove(force=True, v=True)
    except NotFound:
        pass
    except APIError as exc:
        if "already in progress" not in str(exc):
            raise


@contextlib.contextmanager
def managed(container: Container) -> Iterator[Container]:
    """Yield the container and always remove it afterwards."""
    try:
        yield container
    finally:
        with contextlib.suppress(DockerException, requests.RequestException):
            remove_container(container)


# ----------------------------------------------------------------------------- copy in


def put_directory(
    container: Container,
    src_dir: Path,
    dest: str,
    *,
    uid: int = APP_UID,
    gid: int = APP_GID,
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
    max_bytes: int | None = 2 * 1024**3,
) -> None:
    """Copy ``src_dir``'s contents to ``dest`` in a created or running container.

    The archive is extracted at ``/`` and carries an entry for ``dest`` itself, so ``dest`` need
    not exist in the image (its missing parents are created by the engine as root 0755). The
    base image already has /repo, /tests and /results owned by 10001.
    """
    archive = build_directory_tar(src_dir, dest, uid=uid, gid=gid, exclude=exclude, max_bytes=max_bytes)
    try:
        ok = container.put_archive("/", archive)
    except APIError as exc:
        raise ScoringError(f"copy into container failed: {exc.explanation or exc}") from exc
    finally:
        archive.close()
    if not ok:
        raise ScoringError(f"copy into container {container.name} failed")


# ----------------------------------------------------------------------------- wait / exec


def _state(container: Container) -> dict[str, Any]:
    container.reload()
    return container.attrs.get("State", {}) or {}


def wait_with_timeout(container: Container, seconds: float) -> WaitOutcome:
    """Wait for exit up to ``seconds`` wall-clock; then kill. Exit code/OOM from inspect."""
    timed_out = False
    try:
        container.wait(timeout=max(1, seconds))
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        timed_out = True
    if timed_out or _state(container).get("Running"):
        timed_out = True
        with contextlib.suppress(APIError, NotFound):
            container.kill()
        with contextlib.suppress(requests.RequestException, APIError):
            container.wait(condition="not-running", timeout=60)
    state = _state(container)
    code = state.get("ExitCode")
    return WaitOutcome(
        exit_code=None if state.get("Running") else code, timed_out=timed_out, oom_killed=bool(state.get("OOMKilled"))
    )


def exec_with_timeout(
    container: Container,
    cmd: Sequence[str],
    seconds: float,
    *,
    user: str | None = None,
    workdir: str | None = None,
    env: dict[str, str] | None = None,
    cap_bytes: int = DEFAULT_LOG_CAP,
) -> ExecOutcome:
    """Run ``cmd`` in a running container under ``timeout -k 5 N`` (kills the whole command
    in the container) and a host-side limit of N+15 s. 124, or 137 at/after the limit, means
    timed out."""
    api = container.client.api
    limit = max(1, int(seconds))
    wrapped = ["timeout", "-k", "5", str(limit), *cmd]
    try:
        exec_id = api.exec_create(
            container.id, wrapped, stdout=True, stderr=True, user=user or "", workdir=workdir, environment=env
        )["Id"]
    except APIError as exc:
        raise ScoringError(f"exec in {container.name} failed: {exc.explanation or exc}") from exc
    buf = HeadTail(cap_bytes)

    def pump() -> None:
        with contextlib.suppress(Exception):  # socket errors: exec_inspect has the truth
            for chunk in api.exec_start(exec_id, stream=True):
                buf.add(chunk)

    started = time.monotonic()
    worker = threading.Thread(target=pump, daemon=True)
    worker.start()
    worker.join(limit + 15)
    elapsed = time.monotonic() - started
    info = api.exec_inspect(exec_id)
    if info.get("Running"):
        return ExecOutcome(exit_code=None, output=buf.text(), timed_out=True)
    code = info.get("ExitCode")
    timed_out = code == 124 or (code == 137 and elapsed >= limit)
    return ExecOutcome(exit_code=code, output=buf.text(), timed_out=timed_out)


# ----------------------------------------------------------------------------- logs / files


def read_logs(
    container: Container, *, cap_bytes: int = DEFAULT_LOG_CAP, stdout: bool = True, stderr: bool = True
) -> str:
    """Logs of the container (both streams), streamed and capped to head + tail."""
    buf = HeadTail(cap_bytes)
    try:
        for chunk in container.logs(stdout=stdout, stderr=stderr, stream=True, follow=False):
            buf.add(chunk)
    except NotFound:
        pass
    return buf.text()


def fetch_file(container: Container, path: str, *, max_bytes: int) -> bytes | None:
    """Contents of the regular file ``path``; None if it does not exist.

    Raises UnsafeArchiveError for anything but one regular file (symlinks, directories,
    devices, absolute or ``..`` member names) or when the file exceeds ``max_bytes``. Nothing
    is written to disk: the member is read from the (size-capped) archive stream.
    """
    try:
        stream, st = container.get_archive(path)
    except NotFound:
        return None
    if st.get("linkTarget"):
        raise UnsafeArchiveError(f"{path} in the container is a symlink; refusing to read it")
    if int(st.get("size", 0)) > max_bytes:
        raise UnsafeArchiveError(f"{path} is {st.get('size')} bytes (limit {max_bytes})")
    return read_one_file(stream, path, max_bytes=max_bytes)
