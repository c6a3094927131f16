"""The host's shared Maven repository cache for Java dependency layers.

Artifacts a layer build had to download (online, or through a `--maven-settings` mirror) are
copied out of the new layer into `<cache>/maven-repo/` (a Maven repository layout: regular
files only, never overwritten). Later layer builds, for any pom, read it before going online:
while a layer builds, the cache is served read-only over HTTP on the engine's bridge gateway
address (reachable from build containers only, for the length of the build) and used as a
mirror of every repository, so nothing is downloaded twice on one machine, and poms whose
artifacts are all cached resolve with no network. The cache never enters a layer key: it only
changes where identical artifacts come from.

Its size is capped like the wheel cache (``RGBRIDGE_MAVEN_CACHE_MAX_MB``, see
``bridge/scoring/images/disk/pkgcache.py``): the unit of eviction is one artifact version folder, whose mtime
is its last use (set when a build downloads a file of it from the cache or adds one to it).
"""

from __future__ import annotations

import contextlib
import http.server
import io
import ipaddress
import os
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

import docker
from docker.errors import DockerException

from bridge.scoring.images.disk import cache_limit_bytes, evict_lru, touch
from bridge.scoring.images.disk import maven_cache_root as cache_root
from bridge.scoring.images.disk import maven_version_dirs as version_dirs

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

DOWNLOADED_LIST = "/opt/m2/rgbridge-downloaded.txt"
MAX_EXPORT_BYTES = 4_000_000_000


def bridge_gateway(client: docker.DockerClient) -> str | None:
    """The host's address on the engine's default bridge network, if the engine has one."""
    try:
        config = (client.networks.get("bridge").attrs.get("IPAM") or {}).get("Config") or []
    except DockerException:
        return None
    for entry in config:
        if entry.get("Gateway"):
            return str(entry["Gateway"]).split("/")[0]
        if entry.get("Subnet"):
            with contextlib.suppress(ValueError, StopIteration):
                return str(next(ipaddress.ip_network(entry["Subnet"]).hosts()))
    return None


class _ReadOnly(http.server.SimpleHTTPRequestHandler):
    """GET/HEAD of files under the cache only (SimpleHTTPRequestHandler implements no writes)."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        result = super().send_head()
        if result is not None:  # a file is being served: its version folder was just used
            touch(Path(self.translate_path(self.path)).parent)
        return result


def evict(root: Path | None = None, max_bytes: int | None = None) -> list[Path]:
    """Drop least recently used version folders until the cache fits its cap; empty parent
    folders go too."""
    root = root or cache_root()
    if not root.is_dir():
        return []
    removed = evict_lru(version_dirs(root), cache_limit_bytes("maven") if max_bytes is None else max_bytes)
    for gone in removed:
        parent = gone.parent
        while parent != root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return removed


@contextlib.contextmanager
def serve_cache(client: docker.DockerClient) -> Iterator[str | None]:
    """The cache's URL for build containers while the block runs; None when there is nothing
    cached or no bridge address to serve on (a remote engine, say)."""
    root = cache_root()
    gateway = bridge_gateway(client)
    if gateway is None or not root.is_dir() or not any(root.iterdir()):
        yield None
        return
    try:
        server = http.server.ThreadingHTTPServer((gateway, 0), lambda *a, **k: _ReadOnly(*a, directory=str(root), **k))
    except OSError:
        yield None
        return
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="rgbridge-maven-cache")
    thread.start()
    try:
        yield f"http://{gateway}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def cache_settings(url: str, local_repo: str) -> str:
    """Global settings for the cache-only attempt: every repository mirrored by the cache."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">\n'
        f"  <localRepository>{local_repo}</localRepository>\n"
        "  <mirrors><mirror><id>rgbridge-cache</id><mirrorOf>*</mirrorOf>"
        f"<url>{url}</url></mirror></mirrors>\n"
        "</settings>\n"
    )


def _safe_rel(name: str) -> PurePosixPath | None:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    return rel


def export_downloads(client: docker.DockerClient, tag: str, local_repo: str) -> int:
    """Copy the files a layer downloaded (its DOWNLOADED_LIST) into the host cache; returns the
    number of files added. Regular files only; existing cache files are kept."""
    container = client.containers.create(
        tag, command=["true"], labels={"rgbridge.owner": "rgbridge", "rgbridge.kind": "maven-cache-export"}
    )
    added = 0
    try:
        stream, _ = container.get_archive(DOWNLOADED_LIST)
        listing = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(listing)) as tar:
            member = tar.next()
            fh = tar.extractfile(member) if member is not None and member.isreg() else None
            wanted = {
                line.strip().removeprefix(local_repo.rstrip("/") + "/")
                for line in (fh.read().decode("utf-8", "replace").splitlines() if fh else [])
            }
        wanted = {w for w in wanted if w and _safe_rel(w)}
        if not wanted:
            return 0
        stream, _ = container.get_archive(local_repo)
        root = cache_root()
        top = PurePosixPath(local_repo).name
        with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
            for member in tar:
                rel = _safe_rel(member.name)
                if rel is None or not member.isreg() or rel.parts[0] != top:
                    continue
                inner = PurePosixPath(*rel.parts[1:]).as_posix()
                if inner not in wanted:
                    continue
                dest = root / inner
                if dest.exists():
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:
                    continue
                partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
                with open(partial, "wb") as out:
                    out.write(src.read())
                os.replace(partial, dest)
                touch(dest.parent)
                added += 1
    finally:
        with contextlib.suppress(DockerException):
            container.remove(force=True)
    if added:
        evict()
    return added


class _Chunks(io.RawIOBase):
    """A file object over docker-py's archive chunk iterator (streamed, never held whole)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = b""
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
            self._seen += len(self._buf)
            if self._seen > MAX_EXPORT_BYTES:
                raise OSError("maven repository export too large")
        # Released on return: io.RawIOBase.read resizes its bytearray after readinto.
        with memoryview(b) as view, view.cast("B") as out:
            n = min(len(out), len(self._buf))
            out[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
