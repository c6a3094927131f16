"""The tester image (the base plus a separate venv for the golden tests) and what images build makes.

The venv is ``/opt/tester``; ``build_all`` is what ``rgbridge images build`` makes (base and tester).
When ``build_all`` makes the base's root filesystem, the tester venv is installed in that same root
beside the base's last steps and its packing (from wheels the host fetched meanwhile) and becomes the tester
image's one layer (``load_layer_image``): no build container, no commit. Otherwise, or when that
fails, the tester image is a legacy build ``FROM`` the base. ``build_all`` also fetches the ``uv``
binary and runs the index probe the first score would otherwise wait for."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.base.build import (
    DependencyInstallError,
    LayerLoadError,
    build_lock,
    docker_build,
    hash12,
    image_exists,
    layer_diff_id,
    load_layer_image,
    say,
)
from bridge.scoring.images.base.host import host_pip_index_settings
from bridge.scoring.images.base.image import ensure_base_image, rootfs_tar_path
from bridge.scoring.images.base.recipe import BASE_PATH, base_image_tag
from bridge.scoring.images.base.rootfs import Beside, chroot, run_command
from bridge.scoring.images.base.wheelhouse import (
    index_reachable_from_containers,
    prepare_wheelhouse,
    resolve_wheelhouse,
    uv_tool,
)
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE
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
#: where the tester's build files sit in the base's new root while its venv is installed there
_BESIDE_DIR = "/opt/.rgbridge-tester-build"


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
            + f' && {TESTER_VENV}/bin/python -c "{_plugin_copy(_BUILD_DIR)}"'
            + f" && rm -rf {_BUILD_DIR}\n"
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


def _install_args(venv_python: str, req_file: str, wheel_dir: str | None) -> list[str]:
    args = [venv_python, "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off"]
    if wheel_dir:
        args += ["--no-index", "--find-links", wheel_dir]
    return [*args, "-r", req_file]


def _install_step(venv_python: str, req_file: str, wheel_dir: str | None) -> str:
    return " ".join(_install_args(venv_python, req_file, wheel_dir))


def _plugin_copy(build_dir: str) -> str:
    """Python code that copies strict's pytest plugin from ``build_dir`` into the venv's site-packages."""
    return f"import shutil, sysconfig; shutil.copy('{build_dir}/{TESTER_PLUGIN.name}', sysconfig.get_path('purelib'))"


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


def _layer_path(tag: str) -> Path:
    """Where the tester layer made beside the base's root waits to be loaded."""
    return rootfs_tar_path("tester", tag.rpartition(":")[2]).with_suffix(".layer.tar")


def _tester_beside(tag: str, wheels: Future[Path | None], progress: ProgressFn | None) -> Beside:
    """The tester venv installed in the base's new root (``rootfs.Beside``), as the legacy build's
    steps do it, then packed as the tester's layer: ``/opt`` and ``/opt/tester``, nothing else."""
    layer = _layer_path(tag)

    def run(root: Path) -> None:
        found = wheels.result()
        if found is None:
            raise ScoringError("no tester wheels on the host: the tester image is built on its own")
        started = time.monotonic()
        work = root / _BESIDE_DIR.lstrip("/")
        (work / "tmp").mkdir(parents=True, exist_ok=True)
        shutil.copytree(found, work / "wheels")
        (work / "requirements.txt").write_text(_pins())
        shutil.copy(TESTER_PLUGIN, work / TESTER_PLUGIN.name)
        # Only our two folders change while the base is packed beside this: temporary files in
        # the build folder, and no bytecode written for the system's modules (pip still compiles
        # what it installs into the venv). The build folder stays until the root goes.
        env = (f"TMPDIR={_BESIDE_DIR}/tmp", "PYTHONDONTWRITEBYTECODE=1")
        chroot(root, *env, "/usr/bin/python3", "-m", "venv", TESTER_VENV)
        python = f"{TESTER_VENV}/bin/python"
        chroot(root, *env, *_install_args(python, f"{_BESIDE_DIR}/requirements.txt", f"{_BESIDE_DIR}/wheels"))
        chroot(root, *env, python, "-c", _plugin_copy(_BESIDE_DIR))
        layer.parent.mkdir(parents=True, exist_ok=True)
        partial = layer.with_suffix(".partial")
        venv = TESTER_VENV.lstrip("/")
        parent = venv.rpartition("/")[0]
        run_command(
            [
                "tar",
                "--numeric-owner",
                "-C",
                str(root),
                "-cf",
                str(partial),
                "--no-recursion",
                parent,
                "--recursion",
                venv,
            ],
            timeout=600,
            what="tar tester venv",
        )
        partial.replace(layer)
        say(progress, f"tester venv installed beside the base in {time.monotonic() - started:.0f}s")

    return Beside(folders=(TESTER_VENV, _BESIDE_DIR), run=run)


def _load_tester_layer(client: docker.DockerClient, base: str, tag: str, progress: ProgressFn | None) -> str | None:
    """The tester image as ``base`` + the layer made beside the base (None: there is none, or
    it did not load; the caller builds the image on its own)."""
    layer = _layer_path(tag)
    if not layer.is_file():
        return None
    try:
        with build_lock(tag):
            if not image_exists(client, tag):
                load_layer_image(
                    client,
                    base=base,
                    tag=tag,
                    layer_tar=layer,
                    diff_id=layer_diff_id(layer),
                    labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: "tester"},
                    comment=f"rgbridge tester layer: {TESTER_VENV}",
                    env={"PATH": TESTER_PATH, "VIRTUAL_ENV": TESTER_VENV},
                )
        return tag
    except (LayerLoadError, OSError) as exc:
        say(progress, f"loading the tester layer failed ({str(exc)[:200]}); building the tester image instead")
        return None
    finally:
        layer.unlink(missing_ok=True)


def _prefetch_uv(progress: ProgressFn | None) -> None:
    started = time.monotonic()
    if uv_tool() is not None:
        say(progress, f"uv ready on the host in {time.monotonic() - started:.0f}s")


def _probe_index(client: docker.DockerClient, base: str, progress: ProgressFn | None) -> None:
    """The index probe a set build asks first (cached for an hour): run now, beside the tester."""
    started = time.monotonic()
    with contextlib.suppress(ScoringError, DockerException, OSError):
        reachable = index_reachable_from_containers(client, base=base)
        answer = "reach" if reachable else "do not reach"
        say(progress, f"containers {answer} the package index (probed in {time.monotonic() - started:.0f}s)")


def build_all(
    client: docker.DockerClient,
    *,
    progress: ProgressFn | None = None,
    wheelhouse: Path | str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Build base + tester (``rgbridge images build``): their tags and build times in seconds.

    When the tester image is missing, its wheels are downloaded on the host while the base image
    builds, and when the base's root is made here the tester venv is installed in it beside the
    base's last steps (see the module docstring). The ``uv`` binary is fetched meanwhile and the
    index probe runs beside the tester, so the first score waits for neither."""
    timings: dict[str, float] = {}
    result: dict[str, Any] = {"timings": timings}
    tester_tag = tester_image_tag(base_image_tag())
    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="images-build")
    prefetch: Future[Path | None] | None = None
    beside: Beside | None = None
    if wheelhouse is None and not image_exists(client, tester_tag):
        prefetch = pool.submit(_prefetch_tester_wheels, tester_tag, progress)
        beside = _tester_beside(tester_tag, prefetch, progress)
    pool.submit(_prefetch_uv, progress)
    try:
        t0 = time.monotonic()
        result["base"] = ensure_base_image(client, progress=progress, force=force, beside=beside)
        timings["base"] = round(time.monotonic() - t0, 1)
        say(progress, f"base image ready in {timings['base']:.0f}s")
        pool.submit(_probe_index, client, result["base"], progress)
        t1 = time.monotonic()
        tester = _load_tester_layer(client, result["base"], tester_tag, progress)
        if tester is None:
            wheels = prefetch.result() if prefetch is not None else None
            tester = ensure_tester_image(client, wheelhouse=wheelhouse or wheels, progress=progress)
        result["tester"] = tester
        timings["tester"] = round(time.monotonic() - t1, 1)
        say(progress, f"tester image ready in {timings['tester']:.0f}s")
    finally:
        pool.shutdown(wait=True)
    return result
