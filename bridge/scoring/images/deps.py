"""Dependency images (``rgbridge-deps``): a base or tester image + a requirements file installed
into its active venv, keyed by the normalised requirements."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images import reqfile
from bridge.scoring.images.base import ensure_base_image
from bridge.scoring.images.budget import make_room
from bridge.scoring.images.build import BuildResult, DependencyInstallError, build_lock, hash12, image_exists, say
from bridge.scoring.images.env_volume import (
    EnvVolume,
    PendingCheck,
    VolumeBuild,
    build_in_volume,
    mark_complete,
    remove_volume,
    venv_path,
    volume_exists,
    volume_for,
)
from bridge.scoring.images.layer import build_layer
from bridge.scoring.images.pkgcache import WheelCache
from bridge.scoring.images.usage import lease
from bridge.scoring.images.wheelhouse import (
    check_requirements,
    host_fetch,
    index_reachable_from_containers,
    prepare_wheelhouse,
    wheelhouse_digest,
)
from bridge.scoring.types import ProgressFn

# 3: one container installs requirements then extras; the layer is the exported venv
# 4: one pip check over all the files; bytecode compiled once; sets in volumes (env_volume)
DEPS_RECIPE_VERSION = "4"
DEPS_REPO = "rgbridge-deps"
#: build.log's note when pip rejected uv's install and the score was run again with pip's
REJECTED_NOTE = "pip does not accept what uv installed: installed again with pip and scored again\n"
FILL_TIMEOUT = 900.0


@dataclass(frozen=True)
class DepsImage:
    tag: str
    cached: bool
    seconds: float
    log_tail: str = ""
    #: what the build installed that the package cache lacked (the host then fetched it)
    uncached: tuple[str, ...] = ()
    #: the environment's volume, mounted read-only at its path by the sandboxes (``env_volume``)
    volume: EnvVolume | None = None
    #: pip's verdict on a uv install still being checked (``defer_check``); see ``confirm``
    pending: Settlement | None = None

    @property
    def mounts(self) -> dict[str, str]:
        """Volume name -> path for ``SandboxSpec.volumes``."""
        return {self.volume.name: self.volume.path} if self.volume is not None else {}

    def confirm(self) -> bool:
        """Wait for pip's check of a deferred build: True = accepted (the set is kept), False =
        rejected (the set is gone; score again with ``installer="pip"``). True when nothing is
        pending. Callers of ``defer_check`` must call it, also when their score fails."""
        return self.pending.wait() if self.pending is not None else True

    def build_log(self) -> str:
        """The build's log tail, pip's check included once ``confirm`` returned."""
        return (self.pending.log_tail if self.pending is not None else "") or self.log_tail


class Settlement:
    """The end of a deferred build: pip's verdict, then the tag (accepted) or the volume's
    removal (rejected), then the build lock released. ``wait`` is idempotent."""

    def __init__(
        self,
        client: docker.DockerClient,
        check: PendingCheck,
        *,
        base: str,
        tag: str,
        volume: EnvVolume,
        lock: ExitStack,
    ) -> None:
        self._client, self._check, self._base, self._tag, self._volume = client, check, base, tag, volume
        self._lock = lock
        self._guard = threading.Lock()
        self._verdict: bool | None = None
        self.log_tail = ""

    def wait(self) -> bool:
        with self._guard:
            if self._verdict is None:
                try:
                    accepted, self.log_tail = self._check.wait()
                    if accepted:
                        mark_complete(self._client, self._base, self._tag)
                    else:
                        remove_volume(self._client, self._volume.name)
                    self._verdict = accepted
                except DockerException:
                    remove_volume(self._client, self._volume.name)
                    self._verdict = False
                finally:
                    self._lock.close()
            return self._verdict


def deps_image_tag(
    base: str,
    requirements: str,
    extra_packages: Sequence[str] = (),
    wheelhouse: Path | str | None = None,
    *,
    in_volume: bool = False,
) -> str:
    mode = "auto" if wheelhouse is None else f"dir:{wheelhouse_digest(Path(wheelhouse))}"
    storage = ["volume"] if in_volume else []
    key = hash12(
        "deps", DEPS_RECIPE_VERSION, base, reqfile.normalise(requirements), list(extra_packages), mode, *storage
    )
    return f"{DEPS_REPO}:{key}"


# Cache fills run after the build, off the score's path: a score does not wait for the host to
# download what its build already installed. The threads are not daemons, so a process finishes
# its fills before it exits; ``wait_for_cache_fills`` lets a caller (a benchmark, a test) wait.
_fills: list[threading.Thread] = []
_fills_guard = threading.Lock()


def _start_cache_fill(pins: list[str], dest: Path, cache: WheelCache, tag: str) -> None:
    thread = threading.Thread(
        target=host_fetch,
        name=f"cache-fill-{tag}",
        args=("".join(f"{pin}\n" for pin in pins), dest, None, FILL_TIMEOUT, cache),
        kwargs={"no_deps": True},
    )
    with _fills_guard:
        _fills[:] = [t for t in _fills if t.is_alive()]
        _fills.append(thread)
    thread.start()


def wait_for_cache_fills(timeout: float = FILL_TIMEOUT) -> bool:
    """Wait for the host's pending cache fills; True when none is left running."""
    deadline = time.monotonic() + timeout
    with _fills_guard:
        pending = list(_fills)
    for thread in pending:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in pending)


def _last_error_line(log: str) -> str:
    lines = [x.strip() for x in log.splitlines() if x.strip()]
    for line in reversed(lines):
        if line.startswith("ERROR:") or "error:" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def ensure_deps_image(
    client: docker.DockerClient,
    requirements: str,
    *,
    extra_packages: Sequence[str] = (),
    base: str | None = None,
    wheelhouse: Path | str | None = None,
    progress: ProgressFn | None = None,
    timeout: float = 600,
    env_volume: bool = False,
    defer_check: bool = False,
    installer: str | None = None,
) -> DepsImage:
    """An image with ``requirements`` (then ``extra_packages``) installed in the active venv.

    The active venv is the first ``python`` on the base image's PATH (``/opt/venv`` for the base
    image). Blank requirements and no extras return the base image itself. Failures raise
    DependencyInstallError with pip's output tail; the limit is wall-clock over the build.
    Local-path requirements are refused (UnsafeRequirementError) before anything runs.

    Where the wheels come from: the host's package cache always (read-only), then the index
    (containers reach it) or a wheelhouse the host fetched (binary wheels only) or was given.
    Versions are chosen by pip's rules (see ``layer._layer_script``: uv resolves, pip must accept
    its choice, else pip installs; ``installer="pip"`` skips uv).

    ``env_volume``: when the base's environment is a venv, the set lives in a volume the
    sandboxes mount (``DepsImage.mounts``; ``env_volume.py``) instead of a layer. With
    ``defer_check`` too, a uv install returns as soon as it is final, pip's check still running:
    the caller scores with it, then calls ``DepsImage.confirm()`` (a rejection means scoring
    again with ``installer="pip"``).
    """
    base = base or ensure_base_image(client, progress=progress)
    reqs = reqfile.normalise(requirements)
    extras = [p.strip() for p in extra_packages if p.strip()]
    if not reqs and not extras:
        return DepsImage(tag=base, cached=True, seconds=0.0)
    check_requirements(reqs)
    path = venv_path(client, base) if env_volume else None
    tag = deps_image_tag(base, requirements, extras, wheelhouse, in_volume=path is not None)
    volume = volume_for(tag, path) if path is not None else None

    def built() -> bool:
        if not image_exists(client, tag):
            return False
        if volume is not None and not volume_exists(client, volume.name):
            _untag(client, tag)  # its volume was removed behind our back: build it again
            return False
        return True

    # In use from here on (an eviction under way finishes first, so ``built`` then sees the
    # truth); kept until this profile's score ends (usage.holding), never evicted meanwhile.
    kept_as = volume.name if volume is not None else tag  # the set's name in the disk books
    lease(client, kept_as)
    if built():
        return DepsImage(tag=tag, cached=True, seconds=0.0, volume=volume)
    started = time.monotonic()
    with ExitStack() as lock:
        lock.enter_context(build_lock(tag))
        if built():
            return DepsImage(tag=tag, cached=True, seconds=time.monotonic() - started, volume=volume)
        lease(client, kept_as)  # the first lease may hold the file of a set just evicted
        make_room(client, kind="python-set" if volume is not None else "python-layer", progress=progress)
        extras_txt = "".join(f"{p}\n" for p in extras)
        files = {name: text for name, text in (("requirements.txt", reqs), ("extras.txt", extras_txt)) if text}
        res, uncached = _build(
            client,
            base=base,
            tag=tag,
            files=files,
            volume=volume,
            wheelhouse=wheelhouse,
            progress=progress,
            timeout=timeout,
            defer_check=defer_check,
            installer=installer,
        )
        if not res.ok:
            if res.timed_out:
                msg = f"dependency install timed out after {timeout:.0f}s"
            else:
                msg = f"dependency install failed: {_last_error_line(res.log_tail)}"
            raise DependencyInstallError(msg, log_tail=res.log_tail, timed_out=res.timed_out)
        seconds = time.monotonic() - started
        if volume is None:
            return DepsImage(tag=tag, cached=False, seconds=seconds, log_tail=res.log_tail, uncached=uncached)
        pending = res.pending if isinstance(res, VolumeBuild) else None
        if pending is None:
            mark_complete(client, base, tag)
            return DepsImage(
                tag=tag, cached=False, seconds=seconds, log_tail=res.log_tail, uncached=uncached, volume=volume
            )
        # pip's check still runs: the base + the volume score now; the tag (and the lock, held
        # until then so no other build of this set starts) wait for pip's verdict.
        settlement = Settlement(client, pending, base=base, tag=tag, volume=volume, lock=lock.pop_all())
        return DepsImage(
            tag=base,
            cached=False,
            seconds=seconds,
            log_tail=res.log_tail,
            uncached=uncached,
            volume=volume,
            pending=settlement,
        )


def _untag(client: docker.DockerClient, tag: str) -> None:
    with contextlib.suppress(DockerException):
        client.images.remove(tag, force=False)


def _build(
    client: docker.DockerClient,
    *,
    base: str,
    tag: str,
    files: dict[str, str],
    volume: EnvVolume | None,
    wheelhouse: Path | str | None,
    progress: ProgressFn | None,
    timeout: float,
    defer_check: bool,
    installer: str | None,
) -> tuple[BuildResult, tuple[str, ...]]:
    """Build the set as a layer (``layer.build_layer``) or into ``volume`` (``build_in_volume``);
    also returns the pins the package cache lacked (the host fetches them)."""
    started = time.monotonic()
    cache = WheelCache()
    fetch_root = cache_dir() / "outbox"
    fetch_root.mkdir(parents=True, exist_ok=True)
    for stale in fetch_root.glob("build-*"):  # fetch folders of builds whose process died
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > 86400:
                shutil.rmtree(stale, ignore_errors=True)
    fetched = Path(tempfile.mkdtemp(prefix="build-", dir=fetch_root))
    text = "".join(files.values())

    def remaining() -> float:
        return max(5.0, timeout - (time.monotonic() - started))

    uncached: list[str] = []
    try:
        with cache.view() as view:

            def fill_cache(pins: list[str]) -> None:
                # The cache is filled by the host, never by the build: the host's pip fetches
                # the wheels the build installed and the cache lacks (binary wheels of named
                # versions only; nothing of the agent's runs), while the layer is saved.
                missing = cache.missing(pins)
                uncached.extend(missing)
                if missing:
                    say(progress, f"package cache: fetching {len(missing)} wheel(s) on the host")
                    _start_cache_fill(missing, fetched, cache, tag)

            if wheelhouse is not None:
                mode, wheels = "local", Path(wheelhouse).expanduser()
                if not wheels.is_dir():
                    raise ScoringError(f"wheelhouse directory not found: {wheels}")
            elif index_reachable_from_containers(client, base=base):
                mode, wheels = ("pip" if installer == "pip" else "index"), None
            else:
                say(progress, "containers cannot reach the package index: downloading binary wheels on the host")
                prepare_wheelhouse(text, fetched, cache_index=view / "simple", progress=progress, timeout=remaining())
                cache.import_dir(fetched)
                mode, wheels = "local", fetched
            fill = fill_cache if mode != "local" else None
            if volume is not None:
                result: BuildResult = build_in_volume(
                    client,
                    base=base,
                    tag=tag,
                    volume=volume,
                    requirement_files=files,
                    mode=mode,
                    view=view,
                    wheels=wheels,
                    progress=progress,
                    timeout=remaining(),
                    defer_check=defer_check,
                    on_installed=fill,
                )
            else:
                # pip installs the requirements, then the extras into that environment: one
                # container runs both steps from the base, so compat's layer is built beside
                # strict's instead of waiting for it (docs/measurements.md).
                result = build_layer(
                    client,
                    base=base,
                    tag=tag,
                    kind="deps",
                    requirement_files=files,
                    mode=mode,
                    view=view,
                    wheels=wheels,
                    progress=progress,
                    timeout=remaining(),
                    on_installed=fill,
                )
        if result.ok:
            cache.evict()
        return result, tuple(uncached)
    finally:
        if not uncached:
            shutil.rmtree(fetched, ignore_errors=True)
