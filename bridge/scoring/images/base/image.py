"""The rootfs image builder, the base image and the official Python image the compat profile prefers.

``rgbridge-base`` is the rootfs (``rootfs.py``) imported with ``docker import``;
``ensure_rootfs_image`` is the one lock, tarball cache and import step of every image made
without a registry (the base here, the Java image in ``bridge/scoring/java/images.py``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

import docker
from docker.errors import APIError, DockerException

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.base.build import LABEL_RECIPE, build_lock, image_exists, say
from bridge.scoring.images.base.recipe import BASE_PATH, BASE_REPO, PIP_DEFAULT_TIMEOUT, VENV, base_recipe_hash
from bridge.scoring.images.base.rootfs import Beside, build_rootfs
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE
from bridge.scoring.types import ProgressFn


def _base_changes(recipe: str) -> list[str]:
    return [
        f"ENV PATH={BASE_PATH}",
        f"ENV VIRTUAL_ENV={VENV}",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONUNBUFFERED=1",
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1",
        "ENV PIP_NO_INPUT=1",
        f"ENV PIP_DEFAULT_TIMEOUT={PIP_DEFAULT_TIMEOUT}",
        "WORKDIR /repo",
        'CMD ["/bin/bash"]',
        f"LABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}=base {LABEL_RECIPE}={recipe}",
    ]


def rootfs_tar_path(kind: str, recipe: str) -> Path:
    """Where the root filesystem tarball of a ``kind`` image is cached (the base's file name
    predates the Java image's, and is kept so existing caches stay valid)."""
    return cache_dir() / "rootfs" / (f"{recipe}.tar" if kind == "base" else f"{kind}-{recipe}.tar")


def ensure_rootfs_image(
    client: docker.DockerClient,
    *,
    kind: str,
    repo: str,
    recipe: str,
    make_tar: Callable[[Path, ProgressFn | None], None],
    changes: list[str],
    progress: ProgressFn | None = None,
    force: bool = False,
) -> str:
    """``repo:recipe``, imported with ``docker import`` from a root filesystem tarball that
    ``make_tar(dest, progress)`` writes, cached under the cache dir by recipe. The one builder of
    the images made without a registry (the Python base, the Java image): one lock per recipe
    across threads and processes, the tarball reused when only the image is gone."""
    tag = f"{repo}:{recipe}"
    if not force and image_exists(client, tag):
        return tag
    with build_lock(f"{kind}-{recipe}"):
        if not force and image_exists(client, tag):
            return tag
        tar_path = rootfs_tar_path(kind, recipe)
        tar_path.parent.mkdir(parents=True, exist_ok=True)
        if force or not tar_path.is_file():
            started = time.monotonic()
            make_tar(tar_path, progress)
            say(progress, f"{kind} rootfs built in {time.monotonic() - started:.0f}s")
        say(progress, f"importing {tag}")
        started = time.monotonic()
        try:
            client.api.import_image(src=str(tar_path), repository=repo, tag=recipe, changes=changes)
        except (APIError, DockerException) as exc:
            raise ScoringError(f"docker import of {tag} failed: {exc}") from exc
        if not image_exists(client, tag):
            raise ScoringError(f"docker import did not produce {tag}")
        say(progress, f"imported {tag} in {time.monotonic() - started:.0f}s")
        return tag


def ensure_base_image(
    client: docker.DockerClient,
    *,
    progress: ProgressFn | None = None,
    force: bool = False,
    beside: Beside | None = None,
) -> str:
    """Tag of the base image, building it (rootfs cached under the cache dir) if missing;
    ``beside`` runs in the new root when one is made (``rootfs.Beside``), else not at all."""
    recipe = base_recipe_hash()
    return ensure_rootfs_image(
        client,
        kind="base",
        repo=BASE_REPO,
        recipe=recipe,
        make_tar=functools.partial(build_rootfs, beside=beside),
        changes=_base_changes(recipe),
        progress=progress,
        force=force,
    )


OFFICIAL_PYTHON = "python:3.10-slim"
_official_checked: dict[str, str | None] = {}


def official_python_image(
    client: docker.DockerClient, *, ref: str = OFFICIAL_PYTHON, pull_timeout: int = 20
) -> str | None:
    """``ref`` if present locally or pullable within a short timeout, else None (cached)."""
    if ref in _official_checked and _official_checked[ref] is not None:
        if image_exists(client, ref):
            return ref
    if image_exists(client, ref):
        _official_checked[ref] = ref
        return ref
    if ref in _official_checked:
        return _official_checked[ref]
    result: str | None = None
    try:
        # A separate short-timeout client from the same environment as get_client().
        quick = docker.from_env(timeout=pull_timeout)
        try:
            repo, _, tag = ref.rpartition(":")
            deadline = time.monotonic() + pull_timeout
            for _chunk in quick.api.pull(repo, tag=tag, stream=True, decode=True):
                if time.monotonic() > deadline:  # a slow pull counts as unavailable
                    break
            result = ref if image_exists(client, ref) else None
        finally:
            quick.close()
    except Exception:  # no registry, DNS failure, read timeout: all mean "not available"
        result = None
    _official_checked[ref] = result
    return result
