"""Where a build's wheels come from: the index probe, requirement checks, host-fetched wheels, uv.

Wheels the host's pip fetches are binary only; the ``uv`` binary is what set builds install with."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import docker

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.base.build import LOG_TAIL_CHARS, DependencyInstallError, build_lock, hash12, say
from bridge.scoring.images.base.host import host_pip_index_settings
from bridge.scoring.images.base.image import ensure_base_image
from bridge.scoring.images.base.reqfile import host_fetch_reason, local_path_reason, logical_lines, normalise
from bridge.scoring.images.base.rootfs import CommandError, run_command
from bridge.scoring.images.disk import WheelCache
from bridge.scoring.sandbox.docker_client import make_labels
from bridge.scoring.types import ProgressFn

INDEX_PROBE_TTL = 3600


_index_probe: dict[str, bool] = {}


def index_reachable_from_containers(client: docker.DockerClient, *, base: str | None = None, timeout: int = 45) -> bool:
    """Can pip in a bridge-networked container download from the index? Cached for an hour.

    ``RGBRIDGE_INDEX_FROM_CONTAINERS=1|0`` forces the answer.
    """
    forced = os.environ.get("RGBRIDGE_INDEX_FROM_CONTAINERS", "").lower()
    if forced in ("1", "yes", "true", "0", "no", "false"):
        return forced in ("1", "yes", "true")
    base = base or ensure_base_image(client)
    if base in _index_probe:
        return _index_probe[base]
    marker = cache_dir() / "index_probe.json"
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(marker.read_text())
        if saved.get("base") == base and time.time() - saved.get("checked", 0) < INDEX_PROBE_TTL:
            _index_probe[base] = bool(saved["reachable"])
            return _index_probe[base]
    reachable, _ = probe_index(client, base, host_pip_index_settings(), timeout)
    _index_probe[base] = reachable
    with contextlib.suppress(OSError):
        marker.write_text(json.dumps({"base": base, "checked": time.time(), "reachable": reachable}))
    return reachable


def probe_index(
    client: docker.DockerClient, base: str, env: dict[str, str], timeout: int, *, fail_fast: bool = False
) -> tuple[bool, str]:
    """One probe: pip in a bridge-networked container of `base` downloads a small package from the
    index `env` names, within `timeout` seconds (`fail_fast`: no retries, a short socket timeout,
    for a diagnosis); (reachable, pip's output)."""
    from bridge.scoring.sandbox.containers import create_container, managed, read_logs, wait_with_timeout
    from bridge.scoring.sandbox.protocol import SandboxLimits

    cmd = ["timeout", str(timeout), "python", "-m", "pip", "download", "--no-deps", "--no-cache-dir"]
    if fail_fast:
        cmd += ["--retries", "0", "--timeout", str(min(timeout, 8))]
    cmd += ["-q", "-d", "/tmp/probe", "six"]
    container = create_container(
        client,
        base,
        name=f"rgbridge-index-probe-{secrets.token_hex(4)}",
        command=cmd,
        labels=make_labels(kind="probe"),
        env=env,
        limits=SandboxLimits(user="0:0"),
        network_mode="bridge",
    )
    with managed(container):
        container.start()
        outcome = wait_with_timeout(container, timeout + 15)
        log = read_logs(container)
    return outcome.exit_code == 0, log


class UnsafeRequirementError(DependencyInstallError):
    """A requirement the bridge refuses to install from (a local path; in wheelhouse mode,
    anything but a named requirement fetched as a binary wheel)."""


def check_requirements(requirements: str, *, host_fetch: bool = False) -> None:
    """Raise UnsafeRequirementError naming the first line that would install from a local path
    (``host_fetch``: the first line the host may not fetch as a binary wheel)."""
    check = host_fetch_reason if host_fetch else local_path_reason
    for line in logical_lines(requirements):
        reason = check(line)
        if reason is not None:
            where = (
                "the host fetches binary wheels of named requirements only and never builds anything of the agent's"
                if host_fetch
                else "dependency layers are built from requirements.txt alone, so local folders "
                "and files cannot be installed"
            )
            raise UnsafeRequirementError(
                f"requirement refused: {reason}; {where}", log_tail=f"refused requirement line: {line}"
            )


def prepare_wheelhouse(
    requirements: str,
    dest: Path,
    *,
    timeout: float = 900,
    progress: ProgressFn | None = None,
    cache_index: Path | None = None,
    no_deps: bool = False,
) -> Path:
    """Download binary wheels for ``requirements`` with the host's pip into ``dest``.

    Only named requirements are accepted and only wheels are fetched (``--only-binary=:all:``):
    a local path, URL, VCS link, pip option or a package without a wheel is refused, so
    nothing of the agent's is ever built or run on the host. ``cache_index`` (the package cache's
    view's ``simple/`` folder) is offered as the last extra index, so for an identical file pip
    copies the cached one instead of downloading it, while choosing versions as without it.
    """
    check_requirements(requirements, host_fetch=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(normalise(requirements))
        req = fh.name
    pyver: list[str] = []
    if sys.version_info[:2] != (3, 11):
        pyver = ["--python-version", "3.11"]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-input",
        "--only-binary=:all:",
        *pyver,
        *(["--no-deps"] if no_deps else []),
        "-d",
        str(dest),
        "-r",
        req,
    ]
    env = None
    if cache_index is not None:
        extra = host_pip_index_settings().get("PIP_EXTRA_INDEX_URL", "")
        env = {**os.environ, "PIP_EXTRA_INDEX_URL": f"{extra} {cache_index.as_uri()}/".strip()}
    try:
        run_command(cmd, timeout=timeout, what="pip download (binary wheels only)", progress=progress, env=env)
    except CommandError as exc:
        raise DependencyInstallError(
            f"{exc} (wheelhouse mode installs binary wheels only and never builds from source)",
            log_tail=exc.output[-LOG_TAIL_CHARS:],
        ) from exc
    finally:
        os.unlink(req)
    return dest


def wheelhouse_digest(path: Path) -> str:
    entries = sorted((p.name, p.stat().st_size) for p in path.iterdir() if p.is_file())
    return hash12("wheelhouse", entries)


def resolve_wheelhouse(
    client: docker.DockerClient,
    base: str,
    requirements: str,
    wheelhouse: Path | str | None,
    key: str,
    progress: ProgressFn | None,
    timeout: float = 900,
) -> Path | None:
    """None = install from the index; else a directory to install from with --no-index."""
    if wheelhouse is not None:
        path = Path(wheelhouse).expanduser()
        if not path.is_dir():
            raise ScoringError(f"wheelhouse directory not found: {path}")
        return path
    if index_reachable_from_containers(client, base=base):
        return None
    say(progress, "containers cannot reach the package index: downloading wheels on the host")
    dest = cache_dir() / "wheelhouse" / key
    return prepare_wheelhouse(requirements, dest, progress=progress, timeout=timeout)


UV_VERSION = "0.13.9"
_uv_unavailable = False
_uv_verified: set[tuple[str, int, int, int]] = set()


def uv_tool() -> Path | None:
    """A folder holding the ``uv`` binary (from its wheel on the package index, fetched once by
    the host's pip as a binary wheel, sha256 checked again whenever the file changed), or None: then layers install
    with pip alone. ``RGBRIDGE_INSTALLER=pip`` turns uv off."""
    global _uv_unavailable
    if _uv_unavailable or os.environ.get("RGBRIDGE_INSTALLER", "uv").lower() == "pip":
        return None
    import zipfile

    from bridge.scoring.images.disk import sha256_file

    dest = cache_dir() / "tools" / f"uv-{UV_VERSION}"
    binary, stamp, checked = dest / "uv", dest / "uv.sha256", dest / "uv.checked"

    def ready() -> bool:
        with contextlib.suppress(OSError):
            st = os.stat(binary)
            key = (str(binary), st.st_size, st.st_mtime_ns, st.st_ino)
            if key in _uv_verified:  # hashed already in this process, file unchanged since
                return True
            # hashed by an earlier process, file unchanged since (as the wheel cache's entries:
            # hashing 38 MB took 0.1 s of each never-seen set's build)
            seen = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{stamp.read_text().strip()}"
            if checked.is_file() and checked.read_text() == seen:
                _uv_verified.add(key)
                return True
            if binary.is_file() and sha256_file(binary) == stamp.read_text().strip():
                _uv_verified.add(key)
                checked.write_text(seen)
                return True
        return False

    if ready():
        return dest
    with build_lock("uv-tool"):
        if ready():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix="uv-", dir=cache_dir()))
        try:
            run_command(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-input",
                    "--only-binary=:all:",
                    "--no-deps",
                    f"uv=={UV_VERSION}",
                    "-d",
                    str(tmp),
                ],
                timeout=300,
                what="pip download uv",
            )
            wheel = next(tmp.glob("uv-*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                data = zf.read(f"uv-{UV_VERSION}.data/scripts/uv")
            dest.mkdir(parents=True, exist_ok=True)
            partial = dest / "uv.partial"
            partial.write_bytes(data)
            partial.chmod(0o755)
            os.replace(partial, binary)
            stamp.write_text(hashlib.sha256(data).hexdigest())
        except (ScoringError, OSError, StopIteration, KeyError, zipfile.BadZipFile):
            _uv_unavailable = True  # pip alone, for the rest of this process
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest if ready() else None


def host_fetch(
    requirements: str, dest: Path, cache_index: Path | None, timeout: float, cache: WheelCache, *, no_deps: bool = False
) -> None:
    """Binary wheels for named requirements into ``dest`` with the host's pip (see
    ``prepare_wheelhouse``), then into the cache; ``dest`` is removed. Failures only mean the
    cache is not filled this time."""
    try:
        with contextlib.suppress(ScoringError, OSError):
            prepare_wheelhouse(requirements, dest, cache_index=cache_index, timeout=timeout, no_deps=no_deps)
            cache.import_dir(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
