"""When each kept dependency set was last used, which are in use now and what each weighs.

The disk budget's accounting, shared by every bridge process on one engine and kept across
restarts.

Everything lives in ``<cache>/disk/<engine id>/`` (one folder per Docker engine, so Ray nodes
sharing a cache folder keep separate books): ``use/<set>`` is a set's access-time file (its
mtime is the set's last use) and its lease lock; ``sizes.json`` remembers the size of each
finished set (sets are read-only once built, so a size is measured once); ``evictions.jsonl``
logs every eviction. A score holds a shared ``flock`` on the access-time file of every set it
uses until its profile ends (``holding``/``lease``); eviction takes the exclusive lock without
waiting and skips a set it cannot lock, so a set in use is never removed, whichever process
uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
from docker.errors import DockerException

from bridge.locations import cache_dir

_engine_ids: dict[int, str] = {}
_local = threading.local()


def engine_id(client: docker.DockerClient) -> str:
    """The engine's own id (``docker info``), safe as a folder name; ``unknown`` if it has none."""
    key = id(client)
    if key not in _engine_ids:
        try:
            raw = str(client.info().get("ID") or "unknown")
        except DockerException:
            raw = "unknown"
        _engine_ids[key] = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:80]
    return _engine_ids[key]


def books_dir(client: docker.DockerClient) -> Path:
    """This engine's accounting folder (created)."""
    path = cache_dir() / "disk" / engine_id(client)
    (path / "use").mkdir(parents=True, exist_ok=True)
    return path


def _use_file(books: Path, name: str) -> Path:
    return books / "use" / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def last_use(books: Path, name: str) -> float | None:
    with contextlib.suppress(OSError):
        return _use_file(books, name).stat().st_mtime
    return None


class Lease:
    """A shared lock on one set's access-time file: the set is in use while it is held."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "a")  # noqa: SIM115 (held until release)
        fcntl.flock(self._fh, fcntl.LOCK_SH)
        os.utime(path)

    def release(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


def lease(client: docker.DockerClient, name: str) -> None:
    """Mark set ``name`` as used now; inside ``holding`` (a profile's score) it stays in use,
    safe from eviction, until the scope ends. Outside a scope this only records the use."""
    try:
        path = _use_file(books_dir(client), name)
        held = getattr(_local, "leases", None)
        if held is None:
            path.touch()
            os.utime(path)
            return
        held.append(Lease(path))
    except OSError:
        pass  # accounting is best effort: a score never fails because of it


@contextlib.contextmanager
def hold(client: docker.DockerClient, name: str) -> Iterator[None]:
    """Keep set ``name`` in use, safe from eviction, for the block (in any thread): a set being
    copied into another one (``sets/closest.py``)."""
    held = None
    with contextlib.suppress(OSError):
        held = Lease(_use_file(books_dir(client), name))
    try:
        yield
    finally:
        if held is not None:
            held.release()


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Keep every set leased in this thread in use until the block ends (one profile's score:
    its builds and sandboxes all run in the profile's thread)."""
    outer = getattr(_local, "leases", None)
    _local.leases = []
    try:
        yield
    finally:
        for item in _local.leases:
            item.release()
        _local.leases = outer


@contextlib.contextmanager
def exclusive(books: Path, name: str) -> Iterator[bool]:
    """Try to take set ``name`` for removal: yields False (and holds nothing) when any process
    holds a lease on it."""
    path = _use_file(books, name)
    try:
        fh = open(path, "a")  # noqa: SIM115
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        fh.close()


def forget(books: Path, name: str) -> None:
    """Drop a removed set's access-time file (under its exclusive lock)."""
    with contextlib.suppress(OSError):
        _use_file(books, name).unlink()


@contextlib.contextmanager
def books_lock(books: Path) -> Iterator[None]:
    """One eviction pass at a time per engine, across processes."""
    with open(books / "books.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_sizes(books: Path) -> dict[str, int]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((books / "sizes.json").read_text())
        return {str(k): int(v) for k, v in data.items()}
    return {}


def save_sizes(books: Path, sizes: dict[str, int]) -> None:
    tmp = books / f"sizes.json.{os.getpid()}.{threading.get_ident()}"
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps(sizes, sort_keys=True))
        os.replace(tmp, books / "sizes.json")


def log_eviction(books: Path, name: str, size: int, reason: str) -> None:
    line = json.dumps({"time": time.time(), "name": name, "bytes": size, "reason": reason})
    with contextlib.suppress(OSError), open(books / "evictions.jsonl", "a") as fh:
        fh.write(line + "\n")


def evictions(books: Path, since: float = 0.0) -> list[dict[str, object]]:
    """Evictions logged on this engine since ``since`` (epoch seconds)."""
    out: list[dict[str, object]] = []
    with contextlib.suppress(OSError):
        for line in (books / "evictions.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if float(item.get("time", 0)) >= since:
                    out.append(item)
    return out
