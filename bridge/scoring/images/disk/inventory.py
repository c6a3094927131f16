"""The bridge's images on this engine and everything it keeps on disk, with sizes and last use.

Images are listed and removed (children first); kept things (sets, caches, staged archives) are
the one inventory behind ``rgbridge cache``, ``cleanup`` and the disk budget (``budget.py``).

A dependency set kept in a volume (``sets/env_volume.py``) is a ``rgbridge-deps`` tag on its base
image plus the volume: it is listed as a ``deps`` image and removed with its volume."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from docker.models.images import Image

from bridge.scoring.images.disk.labels import DEPS_REPO, HOLDER_NAME, LABEL_DEPS_TAG, SEED_KIND, VOLUME_KIND
from bridge.scoring.sandbox.docker_client import LABEL_KIND, owner_filter


def _kind(tag: str, labels: dict[str, str]) -> str:
    return "deps" if tag.rpartition(":")[0] == DEPS_REPO else labels.get(LABEL_KIND, "?")


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
    remove_holder(client)  # it keeps an image in use; the next build makes it again
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


def remove_env_volumes(client: docker.DockerClient, *, keep_tags: set[str] | None = None) -> list[str]:
    """Remove our environment volumes (and base seeds) not in use, except those of ``keep_tags``
    (None: keep every volume whose deps tag or base still exists, i.e. remove orphans only)."""
    removed = []
    for vol in client.volumes.list(filters={"label": owner_filter()}):
        labels = vol.attrs.get("Labels") or {}
        if labels.get(LABEL_KIND) not in (VOLUME_KIND, SEED_KIND):
            continue
        tag = labels.get(LABEL_DEPS_TAG, "")
        if keep_tags is None:
            try:
                client.images.get(tag)
                continue
            except DockerException:
                pass
        elif tag in keep_tags:
            continue
        with contextlib.suppress(APIError, NotFound):
            vol.remove()
            removed.append(vol.name)
    return removed


def remove_holder(client: docker.DockerClient) -> bool:
    """Remove the build namespace's holder (sets/buildnet.py makes it again at the next build);
    False when there was none."""
    from bridge.scoring.sandbox.containers import remove_container

    try:
        remove_container(client.containers.get(HOLDER_NAME))
        return True
    except (DockerException, requests.RequestException):
        return False


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


# ---------------------------------------------------------------- what the bridge keeps on disk


#: kinds of kept things: dependency sets (Python sets in volumes or layers, Java layers) are the
#: units of eviction; caches are trimmed least-recently-used entry by entry; staged archives
#: (host-side wheelhouses of builds) are removed when stale; images and their seeds are fixed.
SET_KINDS = ("python-set", "python-layer", "java-layer")
CACHE_KINDS = ("wheel-cache", "maven-cache")
STAGED_KIND = "staged"
STAGED_STALE_SECONDS = 3600.0


@dataclass
class KeptItem:
    kind: str
    name: str
    bytes: int
    last_used: float
    in_use: bool = False
    #: counted against the disk budget (fixed images and their rootfs are shown, not counted)
    budgeted: bool = True
    #: a set still being built (its volume in use, not yet tagged): it will grow
    building: bool = False
    path: str = ""


@dataclass
class Inventory:
    items: list[KeptItem]
    #: sets on the engine that no bridge using this cache folder has used since it kept books
    untracked: int = 0

    @property
    def budgeted_bytes(self) -> int:
        return sum(i.bytes for i in self.items if i.budgeted)

    def sets(self) -> list[KeptItem]:
        return [i for i in self.items if i.kind in SET_KINDS]


def _walk_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                total += st.st_blocks * 512 // max(1, st.st_nlink)
    return total


def _mtime(path: Path) -> float:
    with contextlib.suppress(OSError):
        return path.stat().st_mtime
    return 0.0


def _engine_uses(client: docker.DockerClient) -> tuple[set[str], set[str], set[str]]:
    """Volume names and image ids any container on the engine (running or not) refers to, and
    the volumes our build containers write into (a set accepted while its bytecode is still
    being compiled, ``assets/install_set.sh``, is still growing)."""
    volumes: set[str] = set()
    images: set[str] = set()
    building: set[str] = set()
    for c in client.api.containers(all=True):
        images.add(str(c.get("ImageID", "")))
        build = str((c.get("Labels") or {}).get(LABEL_KIND, "")).endswith("-build")
        for m in c.get("Mounts") or []:
            if m.get("Name"):
                volumes.add(str(m["Name"]))
                if build and m.get("RW"):
                    building.add(str(m["Name"]))
    return volumes, images, building


def _volume_size(client: docker.DockerClient, vol_attrs: dict[str, Any]) -> int:
    """A volume's size: its folder walked on this host when readable, else the engine's count."""
    mount = str(vol_attrs.get("Mountpoint") or "")
    if mount and os.access(mount, os.R_OK | os.X_OK):
        return _walk_size(mount)
    with contextlib.suppress(DockerException):
        for v in client.df().get("Volumes") or []:
            if v.get("Name") == vol_attrs.get("Name"):
                return int((v.get("UsageData") or {}).get("Size") or 0)
    return 0


def _own_size(img: Image, others: list[Image]) -> int:
    """What an image adds to the engine: its size minus that of the image whose layers are the
    longest prefix of its own (its base)."""
    layers = (img.attrs.get("RootFS") or {}).get("Layers") or []
    parent = 0
    best = 0
    for other in others:
        theirs = (other.attrs.get("RootFS") or {}).get("Layers") or []
        if other.id != img.id and best < len(theirs) < len(layers) and layers[: len(theirs)] == theirs:
            best, parent = len(theirs), int(other.attrs.get("Size") or 0)
    return max(0, int(img.attrs.get("Size") or 0) - parent)


def kept_inventory(client: docker.DockerClient, *, caches: bool = True) -> Inventory:
    """Everything the bridge keeps for this engine and this cache folder, with sizes, last use
    and whether a container or a score uses it now (bridge/scoring/images/usage.py)."""
    from bridge.scoring.images.disk.pkgcache import WheelCache, maven_cache_root
    from bridge.scoring.images.disk.usage import books_dir, last_use, load_sizes, save_sizes

    books = books_dir(client)
    known = load_sizes(books)
    sizes = dict(known)
    used_volumes, used_images, building = _engine_uses(client)
    items: list[KeptItem] = []
    untracked = 0

    def tracked(name: str) -> float | None:
        return last_use(books, name)

    images = client.images.list(filters={"label": owner_filter()})
    all_tags = {tag for img in images for tag in img.tags}
    measured: set[str] = set()  # sizes of unfinished sets are measured, not remembered
    for vol in client.volumes.list(filters={"label": owner_filter()}):
        labels = vol.attrs.get("Labels") or {}
        kind = labels.get(LABEL_KIND)
        if kind not in (VOLUME_KIND, SEED_KIND):
            continue
        used = tracked(vol.name)
        if kind == VOLUME_KIND and used is None:
            untracked += 1
            continue
        if vol.name not in sizes:
            sizes[vol.name] = _volume_size(client, vol.attrs)
            if kind == VOLUME_KIND and (labels.get(LABEL_DEPS_TAG, "") not in all_tags or vol.name in building):
                measured.add(vol.name)
        created = age_epoch(vol.attrs.get("CreatedAt"))
        items.append(
            KeptItem(
                kind="python-set" if kind == VOLUME_KIND else "seed",
                name=vol.name,
                bytes=sizes[vol.name],
                last_used=used or created,
                in_use=vol.name in used_volumes,
                budgeted=kind == VOLUME_KIND,
                building=vol.name in measured and vol.name in used_volumes,
                path=labels.get(LABEL_DEPS_TAG, ""),
            )
        )
    for img in images:
        kind = (img.labels or {}).get(LABEL_KIND, "")
        for tag in img.tags:
            if kind in ("deps", "jdeps"):
                used = tracked(tag)
                if used is None:
                    untracked += 1
                    continue
                if tag not in sizes:
                    sizes[tag] = _own_size(img, images)
                items.append(
                    KeptItem(
                        kind="python-layer" if kind == "deps" else "java-layer",
                        name=tag,
                        bytes=sizes[tag],
                        last_used=used,
                        in_use=img.id in used_images,
                    )
                )
            elif _kind(tag, {}) != "deps" and kind in ("base", "tester", "java"):
                items.append(
                    KeptItem(
                        kind="image",
                        name=tag,
                        bytes=_own_size(img, images),
                        last_used=age_epoch(img.attrs.get("Created")),
                        in_use=img.id in used_images,
                        budgeted=False,
                    )
                )
    if sizes != known:
        names = {i.name for i in items} - measured
        save_sizes(books, {k: v for k, v in sizes.items() if k in names})
    if caches:
        items.extend(_cache_items(WheelCache().root, maven_cache_root()))
    return Inventory(items=items, untracked=untracked)


def _cache_items(wheels: Path, maven: Path) -> list[KeptItem]:
    from bridge.locations import cache_dir

    out = []
    for kind, path in (("wheel-cache", wheels), ("maven-cache", maven)):
        if path.is_dir():
            out.append(
                KeptItem(kind=kind, name=path.name, bytes=_walk_size(str(path)), last_used=_mtime(path), path=str(path))
            )
    outbox = cache_dir() / "outbox"
    for folder in sorted(outbox.glob("build-*")) if outbox.is_dir() else []:
        out.append(
            KeptItem(
                kind=STAGED_KIND,
                name=folder.name,
                bytes=_walk_size(str(folder)),
                last_used=_mtime(folder),
                path=str(folder),
            )
        )
    for folder in sorted((cache_dir() / "rootfs").glob("*")) if (cache_dir() / "rootfs").is_dir() else []:
        out.append(
            KeptItem(
                kind="rootfs",
                name=folder.name,
                bytes=_walk_size(str(folder)),
                last_used=_mtime(folder),
                budgeted=False,
                path=str(folder),
            )
        )
    return out


def age_epoch(created: Any) -> float:
    """An engine timestamp (RFC 3339 text or epoch seconds) as epoch seconds; 0 if unreadable."""
    if isinstance(created, (int, float)):
        return float(created)
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?", str(created or ""))
    if not m:
        return 0.0
    frac = (m.group(2) or ".0")[:7]
    tz = m.group(3) or "Z"
    return _dt.datetime.fromisoformat(m.group(1) + frac + ("+00:00" if tz == "Z" else tz)).timestamp()


def remove_set(client: docker.DockerClient, item: KeptItem) -> bool:
    """Remove one dependency set (a volume with its tag, or a layer image); False when the
    engine refuses because a container uses it. The caller holds the set's exclusive lease."""
    try:
        if item.kind == "python-set":
            client.volumes.get(item.name).remove()
            if item.path:
                with contextlib.suppress(NotFound, APIError):
                    client.images.remove(item.path, noprune=True)
        else:
            client.images.remove(item.name)
        return True
    except NotFound:
        return True
    except APIError:
        return False
