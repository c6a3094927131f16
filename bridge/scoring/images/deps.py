"""Dependency images (``rgbridge-deps``): a base or tester image + a requirements file installed
into its active venv, keyed by the normalised requirements."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring import reqfile
from bridge.scoring.images.base import ensure_base_image
from bridge.scoring.images.build import DependencyInstallError, ProgressFn, build_lock, hash12, image_exists, say
from bridge.scoring.images.layer import build_layer
from bridge.scoring.images.wheelhouse import (
    check_requirements,
    host_fetch,
    index_reachable_from_containers,
    prepare_wheelhouse,
    wheelhouse_digest,
)
from bridge.scoring.pkgcache import WheelCache

# 3: one container installs requirements then extras; the layer is the exported venv
DEPS_RECIPE_VERSION = "3"
DEPS_REPO = "rgbridge-deps"
FILL_TIMEOUT = 900.0


@dataclass(frozen=True)
class DepsImage:
    tag: str
    cached: bool
    seconds: float
    log_tail: str = ""
    #: what the build installed that the package cache lacked (the host then fetched it)
    uncached: tuple[str, ...] = ()


def deps_image_tag(
    base: str, requirements: str, extra_packages: Sequence[str] = (), wheelhouse: Path | str | None = None
) -> str:
    mode = "auto" if wheelhouse is None else f"dir:{wheelhouse_digest(Path(wheelhouse))}"
    key = hash12("deps", DEPS_RECIPE_VERSION, base, reqfile.normalise(requirements), list(extra_packages), mode)
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
) -> DepsImage:
    """An image with ``requirements`` (then ``extra_packages``) installed in the active venv.

    The active venv is the first ``python`` on the base image's PATH (``/opt/venv`` for the base
    image). Blank requirements and no extras return the base image itself. Failures raise
    DependencyInstallError with pip's output tail; the limit is wall-clock over the build.
    Local-path requirements are refused (UnsafeRequirementError) before anything runs.

    Where the wheels come from: the host's package cache always (read-only), then the index
    (containers reach it) or a wheelhouse the host fetched (binary wheels only) or was given.
    Versions are chosen by pip's rules (see ``layer._layer_script``: uv resolves, pip must accept
    its choice, else pip installs).
    """
    base = base or ensure_base_image(client, progress=progress)
    reqs = reqfile.normalise(requirements)
    extras = [p.strip() for p in extra_packages if p.strip()]
    if not reqs and not extras:
        return DepsImage(tag=base, cached=True, seconds=0.0)
    check_requirements(reqs)
    tag = deps_image_tag(base, requirements, extras, wheelhouse)
    if image_exists(client, tag):
        return DepsImage(tag=tag, cached=True, seconds=0.0)
    started = time.monotonic()
    with build_lock(tag):
        if image_exists(client, tag):
            return DepsImage(tag=tag, cached=True, seconds=time.monotonic() - started)
        extras_txt = "".join(f"{p}\n" for p in extras)
        files = {name: text for name, text in (("requirements.txt", reqs), ("extras.txt", extras_txt)) if text}
        # pip installs the requirements, then the extras into that environment: one container
        # runs both steps from the base, so compat's layer is built beside strict's instead of
        # waiting for it (measured faster on an idle two-core machine; docs/measurements.md).
        layer_base = base
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
                    mode, wheels = "index", None
                else:
                    say(progress, "containers cannot reach the package index: downloading binary wheels on the host")
                    prepare_wheelhouse(
                        text, fetched, cache_index=view / "simple", progress=progress, timeout=remaining()
                    )
                    cache.import_dir(fetched)
                    mode, wheels = "local", fetched
                res = build_layer(
                    client,
                    base=layer_base,
                    tag=tag,
                    kind="deps",
                    requirement_files=files,
                    mode=mode,
                    view=view,
                    wheels=wheels,
                    progress=progress,
                    timeout=remaining(),
                    on_installed=fill_cache if mode != "local" else None,
                )
            if res.ok:
                cache.evict()
        finally:
            if not uncached:
                shutil.rmtree(fetched, ignore_errors=True)
        if not res.ok:
            if res.timed_out:
                msg = f"dependency install timed out after {timeout:.0f}s"
            else:
                msg = f"dependency install failed: {_last_error_line(res.log_tail)}"
            raise DependencyInstallError(msg, log_tail=res.log_tail, timed_out=res.timed_out)
        return DepsImage(
            tag=tag,
            cached=False,
            seconds=time.monotonic() - started,
            log_tail=res.log_tail,
            uncached=tuple(uncached),
        )
