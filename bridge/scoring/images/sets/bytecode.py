"""The bytecode store: compiled modules of the package cache's wheels, one volume per base image.

A never-seen set's bytecode is compiled after its score (``assets/install_set.sh``, compile late),
so its first score imports every module without it: compiled in memory, in each process that
imports it (the service, the tests), about a second of CPU for a FastAPI service and its test
tools (docs/measurements.md). The store keeps, per distribution (``name-version``), the
hash-checked ``.pyc`` files of its wheel; a build copies them into the set before the set is
ready, so the first score imports compiled modules like a warm one.

Who writes it: only a container of its own (``assets/compile_wheels.py``), FROM the set's base
(the interpreter the sets run), with no network, that reads wheels of the host's package cache
(fetched by the host's pip, mounted read-only) as zip files and compiles their sources: nothing
of a package's runs there. Builds, which may run a package's code, mount it read-only. A
hash-checked file is only used when the source installed beside it hashes the same (PEP 552),
so a copy can make an import faster, never different.

What it holds: the distributions that builds on this base installed and found missing (the
build prints them, ``missing_keys``), as long as the package cache keeps a wheel of them; the
fill removes the others. One store per base and package cache (``store_name``). The volume is labelled as the base's seed is
(``disk.SEED_KIND``): listed, measured and removed with its base image.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import tempfile
from collections.abc import Iterable
from pathlib import Path

import docker
from docker.errors import APIError, DockerException
from docker.models.containers import Container

from bridge.errors import ScoringError
from bridge.scoring.images.base import volume_exists
from bridge.scoring.images.disk import LABEL_DEPS_TAG, SEED_KIND, WheelCache
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE, make_labels

STORE_PREFIX = "rgbridge-bytecode-"
#: where a build mounts the store (read-only)
STORE_DIR = "/run/rgbridge/bytecode"
#: the line a build prints with the keys the store lacked
MISSING_MARK = "RGBRIDGE_BYTECODE_MISSING"
FILL_SCRIPT = Path(__file__).resolve().parents[2] / "assets" / "compile_wheels.py"
#: a fill runs beside scores, at a low CPU weight (Docker's default is 1024)
FILL_CPU_SHARES = 64
#: the longest a fill may run
FILL_SECONDS = 900.0
_KEY = re.compile(r"^[a-z0-9_]+-[A-Za-z0-9.+!_]+$")
_FILL_DIR = "/run/rgbridge/fill"
_CACHE_DIR = "/run/rgbridge/cache"
_STORE_RW = "/run/rgbridge/store"


def key_of(name: str, version: str) -> str:
    """A distribution's key: its name normalised (PEP 503, with ``_``) and its version, lower case;
    what a wheel's file name and its installed ``.dist-info`` folder both give."""
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version.lower()}"


def wheel_key(wheel_name: str) -> str | None:
    parts = wheel_name.split("-")
    if len(parts) < 5 or not wheel_name.endswith(".whl"):
        return None
    key = key_of(parts[0], parts[1])
    return key if _KEY.match(key) else None


def _store_name(image_id: str, cache: WheelCache | None) -> str:
    root = str((cache or WheelCache()).root.expanduser().resolve())
    return f"{STORE_PREFIX}{image_id.split(':')[-1][:12]}-{hashlib.sha256(root.encode()).hexdigest()[:8]}"


def store_name(client: docker.DockerClient, base: str, cache: WheelCache | None = None) -> str:
    """The store of ``base``'s interpreter and of one package cache (``RGBRIDGE_WHEEL_CACHE`` may
    name another): each follows its own cache."""
    return _store_name(str(client.images.get(base).id), cache)


def store_mount(client: docker.DockerClient, base: str) -> docker.types.Mount | None:
    """The store, read-only, for a build on ``base`` (made empty on first use); None when the
    engine refuses it (the build then goes without)."""
    try:
        image_id = str(client.images.get(base).id)
        name = _store_name(image_id, None)
        if not volume_exists(client, name):
            client.volumes.create(
                name, labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: SEED_KIND, LABEL_DEPS_TAG: image_id}
            )
    except (DockerException, APIError):
        return None
    return docker.types.Mount(STORE_DIR, name, type="volume", read_only=True, no_copy=True)


def missing_keys(log: str) -> list[str]:
    """The keys a build's log says the store lacked (well-formed ones only)."""
    found: list[str] = []
    for line in log.splitlines():
        if line.startswith(MISSING_MARK):
            found.extend(k for k in line[len(MISSING_MARK) :].split() if _KEY.match(k))
    return sorted(set(found))


def fill_list(keys: Iterable[str], cache: WheelCache) -> tuple[str, int]:
    """The fill's list: a ``fill`` line per wanted key a cached wheel provides (its path under the
    cache's root), a ``keep`` line per other cached key; and how many keys are to be filled."""
    wanted = set(keys)
    lines: list[str] = []
    chosen: set[str] = set()
    for entry in sorted(cache.entries(), key=lambda e: e.name):
        key = wheel_key(entry.name)
        if key is None:
            continue
        rel = entry.path.relative_to(cache.root).as_posix()
        if key in wanted and key not in chosen:
            chosen.add(key)
            lines.append(f"fill\t{key}\t{rel}")
        else:
            lines.append(f"keep\t{key}\t")
    return "".join(f"{line}\n" for line in lines), len(chosen)


def start_fill(client: docker.DockerClient, base: str, keys: Iterable[str]) -> Container | None:
    """Start a fill of ``keys`` into ``base``'s store (None: nothing to fill, or the engine
    refused); the caller waits for the container and removes it."""
    from bridge.scoring.sandbox.containers import create_container, put_directory, remove_container
    from bridge.scoring.sandbox.protocol import SandboxLimits

    cache = WheelCache()
    listing, count = fill_list(keys, cache)
    if not count:
        return None
    try:
        name = store_name(client, base, cache)
        if not volume_exists(client, name):
            return None
        with tempfile.TemporaryDirectory(prefix="rgbridge-bytecode-") as tmp:
            folder = Path(tmp)
            (folder / FILL_SCRIPT.name).write_bytes(FILL_SCRIPT.read_bytes())
            (folder / "wheels.txt").write_text(listing, encoding="utf-8")
            container = create_container(
                client,
                base,
                name=f"rgbridge-bytecode-fill-{secrets.token_hex(5)}",
                command=["python", f"{_FILL_DIR}/{FILL_SCRIPT.name}", _STORE_RW, _CACHE_DIR, f"{_FILL_DIR}/wheels.txt"],
                # the label of build containers: waited for and swept as theirs are
                labels=make_labels(kind="deps-build"),
                limits=SandboxLimits(user="0:0", network_mode="none", pids_limit=64),
                mounts=[
                    docker.types.Mount(_STORE_RW, name, type="volume", no_copy=True),
                    docker.types.Mount(_CACHE_DIR, str(cache.root), type="bind", read_only=True),
                ],
                cpu_shares=FILL_CPU_SHARES,
            )
            try:
                put_directory(container, folder, _FILL_DIR, uid=0, gid=0)
                container.start()
            except BaseException:
                remove_container(container)
                raise
        return container
    except (DockerException, ScoringError, OSError):
        return None
