"""Dependency sets (rgbridge-deps): a requirements file in a base or tester image's venv, either store.

A base or tester image + a requirements file installed into its active venv, keyed by the
normalised requirements; ``ensure`` is the one flow over either store (``store.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import docker

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.base import (
    Background,
    build_lock,
    check_requirements,
    ensure_base_image,
    hash12,
    host_fetch,
    index_reachable_from_containers,
    prepare_wheelhouse,
    reqfile,
    say,
    wheelhouse_digest,
)
from bridge.scoring.images.disk import DEPS_REPO, WheelCache, lease, make_room
from bridge.scoring.images.sets.env_volume import venv_path, volume_for
from bridge.scoring.images.sets.layer import LayerStore
from bridge.scoring.images.sets.store import DepSet, DepsImage, DepStore, InstallSource
from bridge.scoring.images.sets.twin import claim, offered
from bridge.scoring.images.sets.volume_store import VolumeStore
from bridge.scoring.types import ProgressFn

# 3: one container installs requirements then extras; the layer is the exported venv
# 4: one pip check over all the files; bytecode compiled once; sets in volumes (env_volume)
DEPS_RECIPE_VERSION = "4"
#: build.log's note when pip rejected uv's install and the score was run again with pip's
REJECTED_NOTE = "pip does not accept what uv installed: installed again with pip and scored again\n"
FILL_TIMEOUT = 900.0


def deps_scope(base: str, wheelhouse: Path | str | None = None, *, in_volume: bool = False) -> str:
    """What a set's key holds besides its requirement files: the recipe, the base, the wheel
    source and the store."""
    mode = "auto" if wheelhouse is None else f"dir:{wheelhouse_digest(Path(wheelhouse))}"
    return hash12("deps-scope", DEPS_RECIPE_VERSION, base, mode, in_volume)


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
# download what its build already installed.
_fills = Background()


def _start_cache_fill(pins: list[str], dest: Path, cache: WheelCache, tag: str) -> None:
    text = "".join(f"{pin}\n" for pin in pins)
    _fills.start(host_fetch, f"cache-fill-{tag}", text, dest, None, FILL_TIMEOUT, cache, no_deps=True)


# Daemon threads: a process that exits first leaves a view behind, swept by a later build
# (``WheelCache.view``); nothing is lost.
_cleanups = Background(daemon=True)


def _close_view(views: ExitStack, cache: WheelCache | None) -> None:
    views.close()
    if cache is not None:
        cache.evict()


def wait_for_cache_fills(timeout: float = FILL_TIMEOUT) -> bool:
    """Wait for the host's pending cache fills; True when none is left running."""
    return _fills.wait(timeout)


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
    allow_pending_check: bool = False,
    installer: str | None = None,
    before_build: Callable[[], None] | None = None,
    twin: bool = False,
) -> DepsImage:
    """An image with ``requirements`` (then ``extra_packages``) installed in the active venv.

    The active venv is the first ``python`` on the base image's PATH (``/opt/venv`` for the base
    image). Blank requirements and no extras return the base image itself. Failures raise
    DependencyInstallError with pip's output tail; the limit is wall-clock over the build.
    Local-path requirements are refused (UnsafeRequirementError) before anything runs.

    Where the wheels come from: the host's package cache always (read-only), then the index
    (containers reach it) or a wheelhouse the host fetched (binary wheels only) or was given.
    Versions are chosen by pip's rules (see ``assets/install_set.sh``: uv resolves, pip must
    accept its choice, else pip installs; ``installer="pip"`` skips uv).

    ``env_volume``: when the base's environment is a venv, the set lives in a volume the
    sandboxes mount (``DepsImage.mounts``; ``env_volume.py``) instead of a layer. With
    ``allow_pending_check`` too, a uv install returns as soon as it is final, pip's check still running:
    the caller scores with it, then calls ``DepsImage.settle()`` (a rejection means scoring
    again with ``installer="pip"``).

    ``before_build`` is called when the set is not on disk, before it is built (the scoring
    context's turn, ``workdir.SetTurns``).

    ``twin`` (sets in volumes, with extras): the build also makes the set of ``requirements``
    alone on the same base, from its environment after that file (``twin.py``), when that set
    is on no disk yet: what strict asks for when compat's base is strict's.
    """
    base = base or ensure_base_image(client, progress=progress)
    reqs = reqfile.normalise(requirements)
    extras = [p.strip() for p in extra_packages if p.strip()]
    if not reqs and not extras:
        return DepsImage(tag=base, cached=True, seconds=0.0)
    check_requirements(reqs)
    path = venv_path(client, base) if env_volume else None
    store: DepStore = VolumeStore(client, path) if path is not None else LayerStore(client)
    extras_txt = "".join(f"{p}\n" for p in extras)
    want = DepSet(
        base=base,
        tag=deps_image_tag(base, requirements, extras, wheelhouse, in_volume=path is not None),
        files={name: text for name, text in (("requirements.txt", reqs), ("extras.txt", extras_txt)) if text},
        scope=deps_scope(base, wheelhouse, in_volume=path is not None),
    )
    alone = None
    if twin and path is not None and reqs and extras_txt:
        alone = DepSet(
            base=base,
            tag=deps_image_tag(base, requirements, (), wheelhouse, in_volume=True),
            files={"requirements.txt": reqs},
            scope=want.scope,
        )
    return ensure(
        client,
        store,
        want,
        wheelhouse=wheelhouse,
        progress=progress,
        timeout=timeout,
        allow_pending_check=allow_pending_check,
        installer=installer,
        before_build=before_build,
        twin=alone,
    )


def ensure(
    client: docker.DockerClient,
    store: DepStore,
    want: DepSet,
    *,
    wheelhouse: Path | str | None = None,
    progress: ProgressFn | None = None,
    timeout: float = 600,
    allow_pending_check: bool = False,
    installer: str | None = None,
    before_build: Callable[[], None] | None = None,
    twin: DepSet | None = None,
) -> DepsImage:
    """The one flow over any store: the set ready on disk, else (after ``before_build``) the
    set another build of this process makes as its twin (``twin.py``), else built under its
    lock after room was made for it in the disk budget, with ``twin`` (its first files' set)
    when the store can make it and nobody has it."""
    # In use from here on (an eviction under way finishes first, so ``ready`` then sees the
    # truth); kept until this profile's score ends (usage.holding), never evicted meanwhile.
    kept_as = store.books_name(want.tag)
    lease(client, kept_as)
    found = store.ready(want.tag)
    if found is not None:
        return found
    if before_build is not None:
        before_build()
    started = time.monotonic()
    made = claim(want.tag, allow_pending_check=allow_pending_check)
    if made is not None:
        say(progress, f"{want.tag}: made by another set's build from its first files")
        return dataclasses.replace(made, seconds=time.monotonic() - started)
    with ExitStack() as lock:
        lock.enter_context(build_lock(want.tag))
        found = store.ready(want.tag)
        if found is not None:
            return dataclasses.replace(found, seconds=time.monotonic() - started)
        lease(client, kept_as)  # the first lease may hold the file of a set just evicted
        make_room(client, kind=store.budget_kind, progress=progress)
        uncached: list[str] = []
        with _source(client, want, uncached, wheelhouse, progress, timeout, installer) as source:
            source.allow_pending_check = allow_pending_check
            if not isinstance(store, VolumeStore) or twin is None or source.mode != "index":
                ready = store.build(want, source, lock)
            else:
                twin_volume = volume_for(twin.tag, store.path)
                twin_ready = store.ready(twin.tag) is not None
                with offered(client, twin, twin_volume, after=1, ready=twin_ready) as offer:
                    ready = store.build(want, source, lock, twin=offer)
        return dataclasses.replace(ready, seconds=time.monotonic() - started, uncached=tuple(uncached))


@contextlib.contextmanager
def _source(
    client: docker.DockerClient,
    want: DepSet,
    uncached: list[str],
    wheelhouse: Path | str | None,
    progress: ProgressFn | None,
    timeout: float,
    installer: str | None,
) -> Iterator[InstallSource]:
    """Where the build's wheels come from (see ``ensure_deps_image``) while it runs; ``uncached``
    gets the pins the package cache lacked (the host fetches them)."""
    started = time.monotonic()
    cache = WheelCache()
    fetch_root = cache_dir() / "outbox"
    fetch_root.mkdir(parents=True, exist_ok=True)
    for stale in fetch_root.glob("build-*"):  # fetch folders of builds whose process died
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > 86400:
                shutil.rmtree(stale, ignore_errors=True)
    fetched = Path(tempfile.mkdtemp(prefix="build-", dir=fetch_root))
    text = "".join(want.files.values())

    def remaining() -> float:
        return max(5.0, timeout - (time.monotonic() - started))

    views = ExitStack()
    built = False
    try:
        view = views.enter_context(cache.view())

        def fill_cache(pins: list[str]) -> None:
            # The cache is filled by the host, never by the build: the host's pip fetches
            # the wheels the build installed and the cache lacks (binary wheels of named
            # versions only; nothing of the agent's runs), while the set is saved.
            missing = cache.missing(pins)
            uncached.extend(missing)
            if missing:
                say(progress, f"package cache: fetching {len(missing)} wheel(s) on the host")
                _start_cache_fill(missing, fetched, cache, want.tag)

        if wheelhouse is not None:
            mode, wheels = "local", Path(wheelhouse).expanduser()
            if not wheels.is_dir():
                raise ScoringError(f"wheelhouse directory not found: {wheels}")
        elif index_reachable_from_containers(client, base=want.base):
            mode, wheels = ("pip" if installer == "pip" else "index"), None
        else:
            say(progress, "containers cannot reach the package index: downloading binary wheels on the host")
            prepare_wheelhouse(text, fetched, cache_index=view / "simple", progress=progress, timeout=remaining())
            cache.import_dir(fetched)
            mode, wheels = "local", fetched
        yield InstallSource(
            mode=mode,
            view=view,
            wheels=wheels,
            timeout=remaining(),
            progress=progress,
            on_installed=fill_cache if mode != "local" else None,
            cached=wait_for_cache_fills,
        )
        built = True
    finally:
        if not uncached:
            shutil.rmtree(fetched, ignore_errors=True)
        # The view (a link and a page per cached wheel: thousands on a machine that has scored
        # for a while) is removed, and the cache trimmed after a build that succeeded, off the
        # score's path: the build hands over its set as soon as it is ready.
        _cleanups.start(_close_view, "wheel-view-cleanup", views, cache if built else None)
