"""A finished build container's environment folder, loaded as one image layer without ``docker commit``.

Why not commit: on the ``fuse-overlayfs`` storage driver a commit diffs the container's whole
filesystem against its image through FUSE (seconds, whatever the layer's size; see
docs/measurements.md). A dependency layer only ever changes one folder, the active environment's
prefix (``/opt/venv``): its content is read with the archive API, written as a layer tar that
replaces the folder outright (an opaque-directory whiteout, as in the OCI image layer format),
and loaded with ``docker load`` as base + that layer. The loader skips layers the engine already
has, so the tar carries the new layer only.

The archive comes from a container that ran the agent's requirements, so it is handled as
untrusted bytes: every member must sit inside the prefix, nothing is extracted on the host (the
engine unpacks it into its own layer store), and the size is capped. Any failure here is
reported, and the caller falls back to ``docker commit``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import docker
from docker.errors import DockerException
from docker.models.containers import Container

#: The largest environment folder exported as a layer (``RGBRIDGE_MAX_LAYER_MB``, default 8 GiB).
DEFAULT_MAX_LAYER_MB = 8192
_OPAQUE = ".wh..wh..opq"


class LayerExportError(Exception):
    """The folder could not be exported or loaded as a layer (the caller commits instead)."""


def max_layer_bytes() -> int:
    raw = os.environ.get("RGBRIDGE_MAX_LAYER_MB", "").strip()
    try:
        return int(float(raw) * 1024 * 1024) if raw else DEFAULT_MAX_LAYER_MB * 1024 * 1024
    except ValueError:
        return DEFAULT_MAX_LAYER_MB * 1024 * 1024


def valid_prefix(prefix: str) -> bool:
    """An absolute, normalised folder at least two levels deep (``/opt/venv``, never ``/`` or ``/usr``)."""
    return (
        prefix.startswith("/")
        and posixpath.normpath(prefix) == prefix
        and prefix.count("/") >= 2
        and all(part not in ("", ".", "..") for part in prefix.split("/")[1:])
    )


class _HashingWriter(io.RawIOBase):
    """Writes to ``sink`` while hashing and counting (the layer's diff ID is the sha256 of its tar)."""

    def __init__(self, sink: IO[bytes], limit: int) -> None:
        self.sink, self.limit = sink, limit
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.size += len(chunk)
        if self.size > self.limit:
            raise LayerExportError(f"environment folder over the layer size cap ({self.limit // 2**20} MB)")
        self.digest.update(chunk)
        self.sink.write(chunk)
        return len(chunk)


class _ChunkReader(io.RawIOBase):
    """A file object over the archive API's chunk iterator (tarfile reads it as a stream)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buf = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, out: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(out), len(self._buf))
        out[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _rename(member: tarfile.TarInfo, top: str, parent: str) -> None:
    """Move an archive member (named from the folder's base name) under the folder's parent."""
    name = member.name.rstrip("/")
    if not (name == top or name.startswith(top + "/")) or ".." in name.split("/"):
        raise LayerExportError(f"unexpected member in the environment archive: {member.name!r}")
    member.name = f"{parent}/{name}"
    if member.islnk():  # hard links name another member of the same archive
        target = member.linkname.rstrip("/")
        if not (target == top or target.startswith(top + "/")) or ".." in target.split("/"):
            raise LayerExportError(f"hard link leaves the environment folder: {member.linkname!r}")
        member.linkname = f"{parent}/{target}"
    elif not (member.isreg() or member.isdir() or member.issym()):
        raise LayerExportError(f"unsupported file type in the environment folder: {member.name!r}")


def export_folder_layer(container: Container, prefix: str, dest: Path) -> str:
    """Write ``prefix`` of the (stopped) container as a layer tar at ``dest``; return its diff ID."""
    if not valid_prefix(prefix):
        raise LayerExportError(f"not an environment folder this bridge exports: {prefix!r}")
    parent, top = prefix[1:].rsplit("/", 1)
    try:
        chunks, _stat = container.get_archive(prefix)
    except DockerException as exc:
        raise LayerExportError(f"reading {prefix} from the build container failed: {exc}") from exc
    limit = max_layer_bytes()
    with dest.open("wb") as raw:
        sink = _HashingWriter(raw, limit)
        try:
            with (
                tarfile.open(fileobj=_ChunkReader(iter(chunks)), mode="r|") as src,
                tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as out,
            ):
                first = True
                for member in src:
                    _rename(member, top, parent)
                    if first:
                        if member.name != prefix[1:] or not member.isdir():
                            raise LayerExportError(f"{prefix} is not a folder in the build container")
                        out.addfile(member)
                        # The layer replaces the folder: nothing of the base's copy shows through
                        # (files pip removed stay removed).
                        out.addfile(tarfile.TarInfo(f"{prefix[1:]}/{_OPAQUE}"))
                        first = False
                        continue
                    out.addfile(member, src.extractfile(member) if member.isreg() else None)
        except (tarfile.TarError, OSError, DockerException) as exc:
            raise LayerExportError(f"exporting {prefix} failed: {exc}") from exc
        if first:
            raise LayerExportError(f"{prefix} came back empty from the build container")
    return "sha256:" + sink.digest.hexdigest()


def _image_config(base_attrs: dict[str, Any], diff_id: str, labels: dict[str, str], comment: str) -> bytes:
    config = dict(base_attrs.get("Config") or {})
    config["Labels"] = {**(config.get("Labels") or {}), **labels}
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


def load_layer_image(
    client: docker.DockerClient,
    *,
    base: str,
    tag: str,
    layer_tar: Path,
    diff_id: str,
    labels: dict[str, str],
    comment: str,
) -> None:
    """Tag ``tag`` = ``base`` + the layer at ``layer_tar``, with base's run config and ``labels``."""
    try:
        base_attrs = client.images.get(base).attrs
    except DockerException as exc:
        raise LayerExportError(f"base image {base} unavailable: {exc}") from exc
    base_layers = list((base_attrs.get("RootFS") or {}).get("Layers") or [])
    config = _image_config(base_attrs, diff_id, labels, comment)
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
            raise LayerExportError(f"docker load failed: {exc}") from exc
    try:
        loaded = client.images.get(tag).attrs
    except DockerException as exc:
        raise LayerExportError(f"loaded image {tag} not found: {exc}") from exc
    if (loaded.get("RootFS") or {}).get("Layers") != [*base_layers, diff_id]:
        raise LayerExportError(f"loaded image {tag} does not have the expected layers")
