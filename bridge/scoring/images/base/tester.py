"""The tester image (the base plus a separate venv for the golden tests) and what images build makes.

The venv is ``/opt/tester``; ``build_all`` is what ``rgbridge images build`` makes (base and tester)."""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.base.build import DependencyInstallError, build_lock, docker_build, hash12, image_exists, say
from bridge.scoring.images.base.host import host_pip_index_settings
from bridge.scoring.images.base.image import ensure_base_image
from bridge.scoring.images.base.recipe import BASE_PATH, base_image_tag
from bridge.scoring.images.base.wheelhouse import prepare_wheelhouse, resolve_wheelhouse
from bridge.scoring.types import ProgressFn

# Pinned once here; the tester image hash covers them.
TESTER_PINS: tuple[str, ...] = (
    "pytest==8.3.5",
    "requests==2.32.3",
    "httpx==0.28.1",
    "pytest-timeout==2.3.1",
)

TESTER_VENV = "/opt/tester"
TESTER_PATH = f"{TESTER_VENV}/bin:{BASE_PATH}"
TESTER_REPO = "rgbridge-tester"
_BUILD_DIR = "/tmp/rgbridge-build"


#: strict's pytest plugin (bridge/scoring/assets), installed into the tester venv: its content
#: is part of the tester recipe hash, so changing it builds a new tester image.
TESTER_PLUGIN = Path(__file__).resolve().parents[2] / "assets" / "rgbridge_pytest_report.py"


def tester_image_tag(base: str) -> str:
    plugin = hashlib.sha256(TESTER_PLUGIN.read_bytes()).hexdigest()
    return f"{TESTER_REPO}:{hash12('tester', base, TESTER_PINS, TESTER_VENV, plugin)}"


def ensure_tester_image(
    client: docker.DockerClient,
    *,
    wheelhouse: Path | str | None = None,
    progress: ProgressFn | None = None,
    timeout: float = 900,
) -> str:
    """Base + ``/opt/tester`` venv with ``TESTER_PINS``; /opt/tester/bin first on PATH."""
    base = ensure_base_image(client, progress=progress)
    tag = tester_image_tag(base)
    if image_exists(client, tag):
        return tag
    with build_lock(tag):
        if image_exists(client, tag):
            return tag
        wheels = resolve_wheelhouse(client, base, _pins(), wheelhouse, _wheels_key(tag), progress)
        dirs = {"build/wheels": wheels} if wheels else {}
        body = (
            f"COPY build {_BUILD_DIR}\n"
            f"RUN /usr/bin/python3 -m venv {TESTER_VENV} && "
            + _install_step(
                f"{TESTER_VENV}/bin/python",
                f"{_BUILD_DIR}/requirements.txt",
                f"{_BUILD_DIR}/wheels" if wheels else None,
            )
            + f' && {TESTER_VENV}/bin/python -c "import shutil, sysconfig; shutil.copy('
            f"'{_BUILD_DIR}/{TESTER_PLUGIN.name}', sysconfig.get_path('purelib'))\"" + f" && rm -rf {_BUILD_DIR}\n"
            f"ENV PATH={TESTER_PATH} VIRTUAL_ENV={TESTER_VENV}\n"
        )
        say(progress, f"building {tag}")
        res = docker_build(
            client,
            dockerfile_body=body,
            base=base,
            tag=tag,
            kind="tester",
            files={
                "build/requirements.txt": _pins().encode(),
                f"build/{TESTER_PLUGIN.name}": TESTER_PLUGIN.read_bytes(),
            },
            dirs=dirs,
            buildargs=None if wheels else host_pip_index_settings(),
            timeout=timeout,
            progress=progress,
        )
        if not res.ok:
            raise DependencyInstallError(
                f"tester image build failed: {res.error}", log_tail=res.log_tail, timed_out=res.timed_out
            )
        return tag


def _install_step(venv_python: str, req_file: str, wheel_dir: str | None) -> str:
    opts = "--no-cache-dir --progress-bar off"
    if wheel_dir:
        opts += f" --no-index --find-links {wheel_dir}"
    return f"{venv_python} -m pip install {opts} -r {req_file}"


def _pins() -> str:
    return "\n".join(TESTER_PINS) + "\n"


def _wheels_key(tag: str) -> str:
    return f"tester-{tag[-12:]}"


def _prefetch_tester_wheels(tag: str, progress: ProgressFn | None) -> Path | None:
    """The tester's wheels, fetched by the host's pip (binary wheels of our own pins only), or
    None when that fails: the tester build then finds its packages as it would without this."""
    started = time.monotonic()
    try:
        path = prepare_wheelhouse(_pins(), cache_dir() / "wheelhouse" / _wheels_key(tag), timeout=300)
    except (ScoringError, OSError) as exc:
        say(progress, f"tester wheels: host download failed ({str(exc)[:120]}); the build fetches them itself")
        return None
    say(progress, f"tester wheels fetched on the host in {time.monotonic() - started:.0f}s")
    return path


def build_all(
    client: docker.DockerClient,
    *,
    progress: ProgressFn | None = None,
    wheelhouse: Path | str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Build base + tester (``rgbridge images build``): their tags and build times in seconds.

    When the tester image is missing, its wheels are downloaded on the host while the base image
    builds (both mostly wait on the network and the disk), so the tester build only installs."""
    timings: dict[str, float] = {}
    result: dict[str, Any] = {"timings": timings}
    tester_tag = tester_image_tag(base_image_tag())
    pool: ThreadPoolExecutor | None = None
    prefetch: Future[Path | None] | None = None
    if wheelhouse is None and not image_exists(client, tester_tag):
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tester-wheels")
        prefetch = pool.submit(_prefetch_tester_wheels, tester_tag, progress)
    try:
        t0 = time.monotonic()
        result["base"] = ensure_base_image(client, progress=progress, force=force)
        timings["base"] = round(time.monotonic() - t0, 1)
        say(progress, f"base image ready in {timings['base']:.0f}s")
        t1 = time.monotonic()
        wheels = prefetch.result() if prefetch is not None else None
        result["tester"] = ensure_tester_image(client, wheelhouse=wheelhouse or wheels, progress=progress)
        timings["tester"] = round(time.monotonic() - t1, 1)
        say(progress, f"tester image ready in {timings['tester']:.0f}s")
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return result
