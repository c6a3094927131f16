"""The bridge's images on this engine: list them, remove them (children first)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import docker
from docker.errors import APIError, NotFound

from bridge.scoring.docker_client import LABEL_KIND, owner_filter


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
                    kind=labels.get(LABEL_KIND, "?"),
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
    removed = []
    for img in images:
        kind = (img.labels or {}).get(LABEL_KIND, "")
        if kinds is not None and kind not in kinds and kind.removesuffix("-build") not in kinds:
            continue
        if any(t in keep for t in img.tags):
            continue
        names = img.tags or [img.id]
        for name in names:
            try:
                client.images.remove(name, force=False, noprune=False)
                removed.append(name)
            except NotFound:
                pass
            except APIError:
                pass  # in use or has dependent children still referenced elsewhere
    return removed
