"""A build container's environment folder, loaded as one image layer without docker commit.

Why not commit: on the ``fuse-overlayfs`` storage driver a commit diffs the container's whole
filesystem against its image through FUSE (seconds, whatever the layer's size; see
docs/measurements.md). A dependency layer only changes the active environment (``/opt/venv``),
so the layer is the archive of that environment's parent folder (``/opt``) as the archive API
returns it, passed through unchanged, plus one opaque-directory whiteout (the OCI image layer
format's marker for "this folder replaces the one below", so files pip removed stay removed).
It is loaded with ``docker load`` as base + that layer; the loader skips layers the engine
already has, so the bundle carries the new layer only.

The archive comes from a container that ran the agent's requirements, so it is handled as
untrusted bytes: every member is checked to sit inside the folder (names, hard-link targets,
file types), nothing is extracted on the host (the engine unpacks it into its own layer store),
and the size is capped. Any failure here is reported, and the caller falls back to a commit.
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

#: The largest folder exported as a layer (``RGBRIDGE_MAX_LAYER_MB``, default 8 GiB).
DEFAULT_MAX_LAYER_MB = 8192
_OPAQUE = ".wh..wh..opq"
_BLOCK = 512


class LayerExportError(Exception):
    """The folder could not be exported or loaded as a layer (the caller commits instead)."""


def max_layer_bytes() -> int:
    raw = os.environ.get("RGBRIDGE_MAX_LAYER_MB", "").strip()
    try:
        return int(float(raw) * 1024 * 1024) if raw else DEFAULT_MAX_LAYER_MB * 1024 * 1024
    except ValueError:
        return DEFAULT_MAX_LAYER_MB * 1024 * 1024


def valid_prefix(prefix: str) -> bool:
    """An absolute, normalised folder at least two levels deep (``/opt/venv``, never ``/`` or
    ``/usr``): its parent is what gets exported."""
    return (
        prefix.startswith("/")
        and posixpath.normpath(prefix) == prefix
        and prefix.count("/") >= 2
        and all(part not in ("", ".", "..") for part in prefix.split("/")[1:])
    )


class _Tee(io.RawIOBase):
    """Reads the archive API's chunks for tarfile while copying every byte to ``sink``, capped."""

    def __init__(self, chunks: Iterator[bytes], sink: IO[bytes], limit: int) -> None:
        self._chunks, self._buf = chunks, b""
        self.sink, self.limit, self.size = sink, limit, 0

    def readable(self) -> bool:
        return True

    def _more(self) -> bool:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            return False
        self.size += len(chunk)
        if self.size > self.limit:
            raise LayerExportError(f"environment folder over the layer size cap ({self.limit // 2**20} MB)")
        self.sink.write(chunk)
        self._buf = chunk
        return True

    def readinto(self, out: Any) -> int:
        while not self._buf:
            if not self._more():
                return 0
        n = min(len(out), len(self._buf))
        out[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def drain(self) -> None:
        self._buf = b""
        while self._more():
            self._buf = b""


def _inside(name: str, top: str) -> bool:
    name = name.rstrip("/")
    return (name == top or name.startswith(top + "/")) and ".." not in name.split("/")


def _check(member: tarfile.TarInfo, top: str) -> None:
    if not _inside(member.name, top):
        raise LayerExportError(f"unexpected member in the environment archive: {member.name!r}")
    if member.islnk():  # hard links name another member of the same archive
        if not _inside(member.linkname, top):
            raise LayerExportError(f"hard link leaves the environment folder: {member.linkname!r}")
    elif not (member.isreg() or member.isdir() or member.issym()):
        raise LayerExportError(f"unsupported file type in the environment folder: {member.name!r}")


def export_folder_layer(container: Container, prefix: str, dest: Path) -> str:
    """Write the layer that replaces ``prefix``'s parent folder with the container's (see the
    module docstring) to ``dest``; return its diff ID (the sha256 of the layer tar)."""
    if not valid_prefix(prefix):
        raise LayerExportError(f"not an environment folder this bridge exports: {prefix!r}")
    folder = posixpath.dirname(prefix)
    top = folder[1:]
    try:
        chunks, _stat = container.get_archive(folder)
    except DockerException as exc:
        raise LayerExportError(f"reading {folder} from the build container failed: {exc}") from exc
    with dest.open("w+b") as raw:
        tee = _Tee(iter(chunks), raw, max_layer_bytes())
        members = 0
        try:
            with tarfile.open(fileobj=tee, mode="r|") as src:
                for member in src:
                    _check(member, top)
                    if members == 0 and (member.name.rstrip("/") != top or not member.isdir()):
                        raise LayerExportError(f"{folder} is not a folder in the build container")
                    members += 1
                end = src.offset  # where the archive's end-of-archive blocks begin
            tee.drain()
        except (tarfile.TarError, OSError, DockerException) as exc:
            raise LayerExportError(f"exporting {folder} failed: {exc}") from exc
        if members == 0 or end % _BLOCK:
            raise LayerExportError(f"{folder} came back empty or malformed from the build container")
        # The archive as it came, then the opaque whiteout (which, read last, removes what the
        # layers below hold in the folder and this layer does not), then the end blocks.
        raw.truncate(end)
        raw.seek(end)
        raw.write(tarfile.TarInfo(f"{top}/{_OPAQUE}").tobuf(format=tarfile.USTAR_FORMAT))
        raw.write(b"\0" * (2 * _BLOCK))
        raw.seek(0)
        digest = hashlib.sha256()
        for block in iter(lambda: raw.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


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
