"""The bridge's images on this engine: list them, remove them (children first).

A dependency set kept in a volume (``env_volume.py``) is a ``rgbridge-deps`` tag on its base
image plus the volume: it is listed as a ``deps`` image and removed with its volume."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import docker
from docker.errors import APIError, NotFound
from docker.models.images import Image

from bridge.scoring.docker_client import LABEL_KIND, owner_filter
from bridge.scoring.images.env_volume import remove_env_volumes

_DEPS_REPO = "rgbridge-deps"


def _kind(tag: str, labels: dict[str, str]) -> str:
    return "deps" if tag.rpartition(":")[0] == _DEPS_REPO else labels.get(LABEL_KIND, "?")


@dataclass
class ImageInfo:
    tag: str
    id: str
    kind: str
    size_mb: float
    created: str
    labels: dict[str, str] = field(default_factory=dict)


def list_images(client: docker.DockerClient, *, include_dangling: bool = True) -> list[ImageInfo]:
    """Images labelled as ours (build intermediates included as ``<none>`` when dangling)."""
    out = []
    for img in client.images.list(all=include_dangling, filters={"label": owner_filter()}):
        labels = img.labels or {}
        tags = img.tags or ["<none>"]
        for tag in tags:
            out.append(
                ImageInfo(
                    tag=tag,
                    id=img.short_id,
                    kind=_kind(tag, labels),
                    size_mb=round(img.attrs.get("Size", 0) / 1e6, 1),
                    created=str(img.attrs.get("Created", "")),
                    labels=labels,
                )
            )
    return out


def remove_images(
    client: docker.DockerClient, *, kinds: Sequence[str] | None = None, keep: Sequence[str] = ()
) -> list[str]:
    """Remove our labelled images (optionally only some kinds); returns removed tags/ids.

    Children go first (deps/tester before base). Images in use by a container are skipped.
    """
    order = {"deps": 0, "deps-build": 0, "tester": 1, "tester-build": 1, "base": 2}
    images = client.images.list(all=True, filters={"label": owner_filter()})
    images.sort(key=lambda i: order.get((i.labels or {}).get(LABEL_KIND, ""), 0))
    removed: list[str] = []

    def wanted(kind: str) -> bool:
        return kinds is None or kind in kinds or kind.removesuffix("-build") in kinds

    # Tags of sets kept in volumes go first: they sit on a base image (removing one untags it).
    for img in images:
        if (img.labels or {}).get(LABEL_KIND) == "deps" or not wanted("deps"):
            continue
        for tag in img.tags:
            if _kind(tag, {}) == "deps" and tag not in keep:
                _remove(client, tag, removed)
    for img in images:
        kind = (img.labels or {}).get(LABEL_KIND, "")
        if not wanted(kind):
            continue
        tags = _all_tags(client, img)
        if any(t in keep for t in tags):
            continue
        for name in tags or [img.id]:
            _remove(client, name, removed)
    # The volumes of removed sets (and of sets whose tag went another way); kept tags keep theirs.
    kept = {t for t in keep if _kind(t, {}) == "deps"}
    removed.extend(remove_env_volumes(client, keep_tags=kept if wanted("deps") else None))
    return removed


def _all_tags(client: docker.DockerClient, img: Image) -> list[str]:
    """The image's tags now (an earlier removal may have untagged some)."""
    try:
        return list(client.images.get(img.id).tags)
    except NotFound:
        return []


def _remove(client: docker.DockerClient, name: str, removed: list[str]) -> None:
    try:
        client.images.remove(name, force=False, noprune=False)
        removed.append(name)
    except NotFound:
        pass
    except APIError:
        pass  # in use or has dependent children still referenced elsewhere
