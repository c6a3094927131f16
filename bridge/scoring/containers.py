"""Container primitives for the scoring profiles (docker-py, no ``containers.run()``).

Typical sequence for one container::

    c = create_container(client, image, name=..., command=[...], labels=make_labels(...),
                         env={...}, limits=ContainerLimits())
    with managed(c):                       # always removed (force) on exit
        put_directory(c, snapshot_dir, "/repo")      # before start(); ownership 10001:10001
        c.start()
        outcome = wait_with_timeout(c, 300)          # real wall-clock limit, OOM classified
        log = read_logs(c)                           # capped, ANSI stripped
        report = fetch_file(c, "/results/report.xml", max_bytes=5_000_000)

For a service + tester pair: start the service (``network_mode="none"``), then create the tester
with ``network_mode=f"container:{service.id}"``; the two share only the loopback interface.
``exec_with_timeout`` runs commands in a running container under an in-container
``timeout -k 5 N`` plus a host-side limit.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import secrets
import stat as _stat
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container

from bridge.errors import ScoringError
from bridge.fs.ignore import UPSTREAM_COPY_IGNORE
from bridge.scoring.docker_client import LABEL_OWNER, OWNER_VALUE

APP_UID = 10001
APP_GID = 10001
# Fixed mtime for files copied in: stable archives across runs. 2000-01-01, not the epoch,
# because zipfile and some build tools reject timestamps before 1980.
NORMALISED_MTIME = 946684800
# Names excluded at any depth when copying a tree in (upstream ignores the same set); a staged
# snapshot has already lost these and more (bridge/fs/ignore.py).
DEFAULT_EXCLUDE: tuple[str, ...] = UPSTREAM_COPY_IGNORE
DEFAULT_LOG_CAP = 1_000_000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


class UnsafeArchiveError(ScoringError):
    """An archive fetched from a container holds something we refuse to read."""


@dataclass
class ContainerLimits:
    """Security profile and resource limits of a scoring container (docker-py create kwargs).

    ``read_only`` defaults to False: generated services routinely write next to their code
    (SQLite files in /repo, upload dirs, ``__pycache__``), upstream runs them on a writable
    filesystem, and a read-only root would turn those into deployment failures. The writable
    layer is private to the container and discarded with it; ``tmpfs`` can still be used for
    /tmp. Network defaults to none; ``network_mode`` given to ``create_container`` overrides it.
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

    def create_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "user": self.user,
            "cap_drop": list(self.cap_drop),
            "security_opt": list(self.security_opt),
            "pids_limit": self.pids_limit,
            "mem_limit": self.mem_limit,
            "memswap_limit": self.memswap_limit or self.mem_limit,
            "nano_cpus": int(self.nano_cpus),
            "init": self.init,
            "network_mode": self.network_mode,
            "read_only": self.read_only,
        }
        if self.cap_add:
            kwargs["cap_add"] = list(self.cap_add)
        if self.tmpfs:
            kwargs["tmpfs"] = dict(self.tmpfs)
        if self.nofile:
            kwargs["ulimits"] = [docker.types.Ulimit(name="nofile", soft=self.nofile, hard=self.nofile)]
        if self.runtime:
            kwargs["runtime"] = self.runtime
        if self.log_max_size:
            kwargs["log_config"] = docker.types.LogConfig(
                type="json-file", config={"max-size": self.log_max_size, "max-file": str(self.log_max_files)}
            )
        return kwargs


SecurityProfile = ContainerLimits


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
    limits: ContainerLimits | None = None,
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
    limits = limits or ContainerLimits()
    kwargs = limits.create_kwargs()
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


def _excluded(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in patterns)


def _dir_info(arcname: str, mode: int, uid: int, gid: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.type, info.mode = tarfile.DIRTYPE, mode
    info.uid, info.gid, info.mtime = uid, gid, NORMALISED_MTIME
    return info


def build_directory_tar(
    src_dir: Path,
    dest: str,
    *,
    uid: int = APP_UID,
    gid: int = APP_GID,
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
    max_bytes: int | None = 2 * 1024**3,
) -> tempfile.SpooledTemporaryFile:
    """A tar rooted at ``/`` holding ``dest`` and the contents of ``src_dir`` below it.

    Owners are normalised to uid/gid, mtimes to NORMALISED_MTIME, permission bits kept (exec
    bits matter for start.sh). Symlinks are stored as symlinks and never followed; sockets,
    fifos and devices are skipped; hard links become regular files.
    """
    src = Path(src_dir)
    if not src.is_dir():
        raise ScoringError(f"not a directory: {src}")
    dest_rel = PurePosixPath(dest).relative_to("/") if dest.startswith("/") else None
    if dest_rel is None or ".." in dest_rel.parts or not dest_rel.parts:
        raise ScoringError(f"destination must be an absolute path below /: {dest}")
    out = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)
    total = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_dir_info(str(dest_rel), 0o755, uid, gid))
        for root, dirs, files in os.walk(src, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not _excluded(d, exclude))
            rel_root = Path(root).relative_to(src)
            for d in list(dirs):
                st = os.lstat(os.path.join(root, d))
                arc = str(dest_rel / PurePosixPath(*rel_root.parts, d))
                if _stat.S_ISLNK(st.st_mode):  # os.walk lists dir symlinks under dirs
                    dirs.remove(d)
                    files.append(d)
                    continue
                tar.addfile(_dir_info(arc, _stat.S_IMODE(st.st_mode) | 0o700, uid, gid))
            for f in sorted(files):
                if _excluded(f, exclude):
                    continue
                path = os.path.join(root, f)
                st = os.lstat(path)
                info = tarfile.TarInfo(str(dest_rel / PurePosixPath(*rel_root.parts, f)))
                info.uid, info.gid, info.mtime = uid, gid, NORMALISED_MTIME
                info.mode = _stat.S_IMODE(st.st_mode)
                if _stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                    tar.addfile(info)
                elif _stat.S_ISREG(st.st_mode):
                    info.size = st.st_size
                    total += st.st_size
                    if max_bytes is not None and total > max_bytes:
                        raise ScoringError(f"{src} exceeds the copy limit of {max_bytes} bytes")
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
    out.seek(0)
    return out


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


class _HeadTail:
    """Keep the first and last ``cap/2`` bytes of a stream, counting what was dropped."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if len(self.head) < self.head_cap:
            take = self.head_cap - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
            self.tail_len -= len(self.tail[0])
            self.dropped += len(self.tail.popleft())
        if self.tail_len > self.tail_cap:  # trim the oldest chunk partially
            cut = self.tail_len - self.tail_cap
            self.tail[0] = self.tail[0][cut:]
            self.tail_len -= cut
            self.dropped += cut

    def text(self) -> str:
        body = bytes(self.head)
        if self.dropped:
            body += f"\n[... {self.dropped} bytes truncated ...]\n".encode()
        body += b"".join(self.tail)
        return strip_ansi(body.decode("utf-8", errors="replace"))


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


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
    buf = _HeadTail(cap_bytes)

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
    buf = _HeadTail(cap_bytes)
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
    limit = max_bytes + 1024 * 1024  # tar headers and padding
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    try:
        size = 0
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise UnsafeArchiveError(f"archive of {path} exceeds {limit} bytes")
            spool.write(chunk)
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r:") as tar:
            members = tar.getmembers()
            if len(members) != 1:
                raise UnsafeArchiveError(f"{path}: expected one file, archive has {len(members)} members")
            m = members[0]
            name = PurePosixPath(m.name)
            if name.is_absolute() or ".." in name.parts or len(name.parts) != 1:
                raise UnsafeArchiveError(f"{path}: unsafe member name {m.name!r}")
            if not m.isreg():
                raise UnsafeArchiveError(f"{path} is not a regular file")
            if m.size > max_bytes:
                raise UnsafeArchiveError(f"{path} is {m.size} bytes (limit {max_bytes})")
            fh = tar.extractfile(m)
            return fh.read(max_bytes + 1)[:max_bytes] if fh else None
    except tarfile.TarError as exc:
        raise UnsafeArchiveError(f"{path}: unreadable archive ({exc})") from exc
    finally:
        spool.close()
