"""A build container's environment folder, loaded as one image layer without docker commit.

Why not commit: on the ``fuse-overlayfs`` storage driver a commit diffs the container's whole
filesystem against its image through FUSE (seconds, whatever the layer's size; see
docs/measurements.md). A dependency layer only changes the active environment (``/opt/venv``),
so the layer is the archive of that environment's parent folder (``/opt``) as the archive API
returns it, passed through unchanged, plus one opaque-directory whiteout (the OCI image layer
format's marker for "this folder replaces the one below", so files pip removed stay removed).
It is loaded with ``docker load`` as base + that layer (``base.load_layer_image``); the loader
skips layers the engine already has, so the bundle carries the new layer only.

The archive comes from a container that ran the agent's requirements, so it is handled as
untrusted bytes: every member is checked to sit inside the folder (names, hard-link targets,
file types), nothing is extracted on the host (the engine unpacks it into its own layer store),
and the size is capped. Any failure here is reported, and the caller falls back to a commit.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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
