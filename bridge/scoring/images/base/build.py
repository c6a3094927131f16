"""Build primitives of the scoring images: locks, hashes, labels, the legacy builder, build results.

The legacy builder runs with a real wall-clock limit; a build returns a ``BuildResult`` or raises
``DependencyInstallError``. ``load_layer_image`` makes an image as a base plus one layer tarball
with ``docker load`` (no container, no commit): the tester image and the sets kept as layers."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import re
import secrets
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound, NotFound

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE
from bridge.scoring.types import ProgressFn

LABEL_RECIPE = "rgbridge.recipe"
LABEL_BUILD = "rgbridge.build"  # per-build token: lets a timeout find the build's RUN containers

LOG_TAIL_CHARS = 3000


class LayerLoadError(ScoringError):
    """An image could not be made as its base plus one layer (``load_layer_image``)."""


class DependencyInstallError(ScoringError):
    """pip could not install a requirements file (a deployment failure, never swallowed)."""

    def __init__(self, message: str, *, log_tail: str = "", timed_out: bool = False) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.timed_out = timed_out


@dataclass
class BuildResult:
    ok: bool
    tag: str
    seconds: float
    log_tail: str
    error: str = ""
    timed_out: bool = False
    #: ``name==version`` of what a layer build installed
    installed: list[str] = field(default_factory=list)
    #: how a layer build installed: "index" (uv, accepted by pip), "pip" or "local"
    installer: str = ""


def hash12(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def say(progress: ProgressFn | None, text: str) -> None:
    if progress is not None:
        progress(text)


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


def volume_exists(client: docker.DockerClient, name: str) -> bool:
    try:
        client.volumes.get(name)
        return True
    except NotFound:
        return False


_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@contextlib.contextmanager
def build_lock(name: str) -> Iterator[None]:
    """Serialise builds of one thing across threads (a lock) and processes (flock)."""
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(name, threading.Lock())
    with tlock:
        with open(_lock_path(name), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _lock_path(name: str) -> Path:
    lock_dir = cache_dir() / "locks"
    lock_dir.mkdir(exist_ok=True)
    return lock_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock"


def try_build_lock(name: str) -> contextlib.ExitStack | None:
    """``build_lock`` taken only when free at once: the held lock (close it to release it, from
    any thread), or None when a build of ``name`` holds it in this process or another."""
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(name, threading.Lock())
    if not tlock.acquire(blocking=False):
        return None
    held = contextlib.ExitStack()
    held.callback(tlock.release)
    try:
        fh = held.enter_context(open(_lock_path(name), "w"))
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.close()
        return None
    held.callback(fcntl.flock, fh, fcntl.LOCK_UN)
    return held


def _tar_context(files: dict[str, bytes], dirs: dict[str, Path]) -> tempfile.SpooledTemporaryFile[bytes]:
    ctx = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)
    with tarfile.open(fileobj=ctx, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
        for arcdir, src in sorted(dirs.items()):
            for path in sorted(src.iterdir()):
                if path.is_file() and not path.is_symlink():
                    info = tar.gettarinfo(str(path), arcname=f"{arcdir}/{path.name}")
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
            if not any(src.iterdir()):
                info = tarfile.TarInfo(arcdir)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    ctx.seek(0)
    return ctx


def _kill_build_containers(client: docker.DockerClient, token: str) -> None:
    try:
        found = client.containers.list(all=True, filters={"label": f"{LABEL_BUILD}={token}"})
    except DockerException:
        return
    for c in found:
        with contextlib.suppress(DockerException):
            c.kill()


def _remove_build_leftovers(client: docker.DockerClient, token: str) -> None:
    """Drop the intermediate images a failed legacy build keeps (newest first)."""
    with contextlib.suppress(DockerException):
        found = client.images.list(all=True, filters={"label": f"{LABEL_BUILD}={token}"})
        found.sort(key=lambda i: str(i.attrs.get("Created", "")), reverse=True)
        for img in found:
            if img.tags:
                continue
            with contextlib.suppress(DockerException):
                client.images.remove(img.id, force=False, noprune=False)


def docker_build(
    client: docker.DockerClient,
    *,
    dockerfile_body: str,
    base: str,
    tag: str,
    kind: str,
    files: dict[str, bytes] | None = None,
    dirs: dict[str, Path] | None = None,
    buildargs: dict[str, str] | None = None,
    timeout: float = 600,
    progress: ProgressFn | None = None,
) -> BuildResult:
    """Build ``FROM base`` + body with the legacy builder, with a real wall-clock limit.

    A LABEL with a per-build token comes first, so the RUN step containers carry it; on timeout
    those containers are killed, which ends the step and the build stream. Intermediate images
    of a failed build are dangling but labelled, so ``remove_images``/``sweep`` find them.
    """
    token = secrets.token_hex(8)
    args = dict(buildargs or {})
    arg_lines = "".join(f"ARG {k}\n" for k in sorted(args))
    # One LABEL step only: every legacy-builder step is a commit, slow on fuse-overlayfs.
    dockerfile = (
        f"FROM {base}\nLABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}={kind} "
        f"{LABEL_BUILD}={token}\n{arg_lines}{dockerfile_body.rstrip()}\n"
    )
    ctx_files = {"Dockerfile": dockerfile.encode(), **(files or {})}
    ctx = _tar_context(ctx_files, dirs or {})
    tail: deque[str] = deque(maxlen=400)
    state: dict[str, Any] = {"error": "", "image_id": None}
    started = time.monotonic()

    def consume() -> None:
        try:
            stream = client.api.build(
                fileobj=ctx,
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                buildargs=args,
                timeout=max(int(timeout) + 120, 300),
            )
            for chunk in stream:
                if "stream" in chunk:
                    for line in str(chunk["stream"]).splitlines():
                        tail.append(line)
                        if line.strip():
                            say(progress, line)
                if "aux" in chunk and isinstance(chunk["aux"], dict):
                    state["image_id"] = chunk["aux"].get("ID") or state["image_id"]
                if "error" in chunk or "errorDetail" in chunk:
                    msg = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")
                    state["error"] = str(msg).strip() or "build failed"
                    tail.append(state["error"])
        except Exception as exc:  # socket errors while the engine streams
            state["error"] = f"{type(exc).__name__}: {exc}"
            tail.append(state["error"])

    worker = threading.Thread(target=consume, name=f"build-{tag}", daemon=True)
    worker.start()
    worker.join(timeout)
    timed_out = worker.is_alive()
    if timed_out:
        deadline = time.monotonic() + 60
        while worker.is_alive() and time.monotonic() < deadline:
            _kill_build_containers(client, token)
            worker.join(2)
    ctx.close()
    seconds = time.monotonic() - started
    log_tail = "\n".join(tail)[-LOG_TAIL_CHARS:]
    if timed_out or state["error"]:
        _remove_build_leftovers(client, token)
    if timed_out:
        return BuildResult(False, tag, seconds, log_tail, f"build timed out after {timeout:.0f}s", timed_out=True)
    if state["error"] or not image_exists(client, tag):
        return BuildResult(False, tag, seconds, log_tail, state["error"] or "no image produced")
    return BuildResult(True, tag, seconds, log_tail)


class Background:
    """Threads left running after a build, off the score's path (cache fills, bytecode): not
    daemons by default, so a process lets them finish before it exits (``daemon``: the owner
    sees to what they leave at exit); ``wait`` lets a caller (a benchmark, a test) wait for them."""

    def __init__(self, *, daemon: bool = False) -> None:
        self._threads: list[threading.Thread] = []
        self._guard = threading.Lock()
        self._daemon = daemon

    def start(self, target: Callable[..., object], name: str, *args: object, **kwargs: object) -> None:
        thread = threading.Thread(target=target, name=name, args=args, kwargs=kwargs, daemon=self._daemon)
        with self._guard:
            self._threads[:] = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float) -> bool:
        """True when none is left running after at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._guard:
            pending = list(self._threads)
        for thread in pending:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in pending)


def _image_config(
    base_attrs: dict[str, Any], diff_id: str, labels: dict[str, str], comment: str, env: dict[str, str]
) -> bytes:
    config = dict(base_attrs.get("Config") or {})
    config["Labels"] = {**(config.get("Labels") or {}), **labels}
    if env:  # the base's variables, those named here replaced (as a Dockerfile's ENV does)
        kept = [item for item in (config.get("Env") or []) if item.partition("=")[0] not in env]
        config["Env"] = [*kept, *(f"{name}={value}" for name, value in env.items())]
    base_layers = list((base_attrs.get("RootFS") or {}).get("Layers") or [])
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    history = [{"created": created, "created_by": "base layer"} for _ in base_layers]
    history.append({"created": created, "created_by": comment})
    body = {
        "architecture": base_attrs.get("Architecture") or "amd64",
        "os": base_attrs.get("Os") or "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [*base_layers, diff_id]},
        "history": history,
    }
    return json.dumps(body, sort_keys=True).encode()


def layer_diff_id(layer_tar: Path) -> str:
    """The diff ID of an uncompressed layer tarball: the sha256 of its bytes."""
    digest = hashlib.sha256()
    with layer_tar.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def load_layer_image(
    client: docker.DockerClient,
    *,
    base: str,
    tag: str,
    layer_tar: Path,
    diff_id: str,
    labels: dict[str, str],
    comment: str,
    env: dict[str, str] | None = None,
) -> None:
    """Tag ``tag`` = ``base`` + the layer at ``layer_tar``, with base's run config (``env``
    replacing variables of it) and ``labels``; ``LayerLoadError`` when that fails."""
    try:
        base_attrs = client.images.get(base).attrs
    except DockerException as exc:
        raise LayerLoadError(f"base image {base} unavailable: {exc}") from exc
    base_layers = list((base_attrs.get("RootFS") or {}).get("Layers") or [])
    config = _image_config(base_attrs, diff_id, labels, comment, env or {})
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    # Layers the engine already has are never read from the archive (it looks each one up by
    # chain ID first), so the base's entries name files the archive does not carry.
    layers = [f"base-{i}/layer.tar" for i in range(len(base_layers))] + ["new/layer.tar"]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": layers}]).encode()
    with tempfile.TemporaryFile(prefix="rgbridge-load-") as bundle:
        with tarfile.open(fileobj=bundle, mode="w") as out:
            out.add(str(layer_tar), arcname="new/layer.tar")
            for name, data in ((config_name, config), ("manifest.json", manifest)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))
        bundle.seek(0)
        try:
            client.images.load(bundle)
        except DockerException as exc:
            raise LayerLoadError(f"docker load failed: {exc}") from exc
    try:
        loaded = client.images.get(tag).attrs
    except DockerException as exc:
        raise LayerLoadError(f"loaded image {tag} not found: {exc}") from exc
    if (loaded.get("RootFS") or {}).get("Layers") != [*base_layers, diff_id]:
        raise LayerLoadError(f"loaded image {tag} does not have the expected layers")
