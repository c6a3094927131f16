"""Build containers, the one seam both dependency stores use: start, ready mark, installed pins.

Both stores run their builds here (``layer.py`` saves the container's environment as a layer,
``env_volume.py`` installs into a volume): the install script (a container-side asset,
``assets/install_set.sh``, told what to do by ``install_settings``), starting a build container
FROM a base with it, waiting for its ready mark, and what its log says it installed.

The container runs as root with the package cache, a wheelhouse and the uv binary bind-mounted
read-only, no capabilities, no new privileges; it writes nothing on the host.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import docker
import requests
from docker.errors import DockerException
from docker.models.containers import Container

from bridge.errors import ScoringError
from bridge.scoring.images.base import host_pip_index_settings, say, uv_tool
from bridge.scoring.images.sets.buildnet import build_network
from bridge.scoring.sandbox.docker_client import make_labels
from bridge.scoring.types import ProgressFn

BUILD_DIR = "/tmp/rgbridge-build"
# Read-only bind mounts, outside the folder exported as the layer (the environment's parent):
CACHE_DIR = "/run/rgbridge/wheels"  # the wheel cache's view
OUTBOX_DIR = "/run/rgbridge/outbox"  # a wheelhouse (no-network builds)
TOOLS_DIR = "/run/rgbridge/tools"  # the uv binary
#: exit status of a build whose uv install pip does not accept (the host rebuilds it with pip)
UV_REJECTED = 3
#: what a ``hold_compile`` build waits for before compiling bytecode, and for how long at most
GO_SIGNAL = "SIGUSR1"
HOLD_LIMIT = 900
_PREFIX_MARK = "RGBRIDGE_PREFIX="
#: the install script, a container-side asset; in the container: ``BUILD_SCRIPT``
INSTALL_SCRIPT = Path(__file__).resolve().parents[2] / "assets" / "install_set.sh"
BUILD_SCRIPT = f"{BUILD_DIR}/{INSTALL_SCRIPT.name}"
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_PIN = re.compile(r"^ \+ ([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_PIP_INSTALLED = re.compile(r"^Successfully installed (.+)$")


def install_settings(
    files: Sequence[str],
    *,
    mode: str,
    ready_mark: str = "",
    check: bool = True,
    compile_late: bool = False,
    hold_compile: bool = False,
    bytecode_dir: str = "",
    twin_dir: str = "",
    twin_after: int = 0,
) -> dict[str, str]:
    """What the install script (``INSTALL_SCRIPT``, whose header says what each setting does)
    is told to do: install ``files`` (names in ``BUILD_DIR``) in ``mode`` (``index``, ``pip``
    or ``local``), print ``ready_mark`` once the environment is final, run pip's check there
    (``check``), compile bytecode after pip's verdict (``compile_late``, sets in volumes) and
    hold that compile until ``GO_SIGNAL`` (``hold_compile``, ``env_volume.CheckContainer``),
    and copy the bytecode store's files mounted at ``bytecode_dir`` into the set
    (``bytecode.py``; "": none); with ``twin_dir`` (index mode), the environment after the first
    ``twin_after`` files is copied into the volume mounted there, a second set (``twin.py``)."""
    if mode not in ("index", "pip", "local"):
        raise ValueError(f"unknown install mode {mode!r}")
    for name in files:
        if not _FILE_NAME.fullmatch(name):
            raise ValueError(f"not a build file name: {name!r}")
    return {
        "RGBRIDGE_MODE": mode,
        "RGBRIDGE_FILES": " ".join(files),
        "RGBRIDGE_READY_MARK": ready_mark,
        "RGBRIDGE_CHECKED_MARK": checked_mark(ready_mark) if ready_mark else "",
        "RGBRIDGE_CHECK": "1" if check else "0",
        "RGBRIDGE_COMPILE_LATE": "1" if compile_late else "0",
        "RGBRIDGE_HOLD_COMPILE": "1" if hold_compile else "0",
        "RGBRIDGE_GO_SIGNAL": GO_SIGNAL.removeprefix("SIG"),
        "RGBRIDGE_HOLD_LIMIT": str(HOLD_LIMIT),
        "RGBRIDGE_UV_REJECTED": str(UV_REJECTED),
        "RGBRIDGE_CACHE_DIR": CACHE_DIR,
        "RGBRIDGE_OUTBOX_DIR": OUTBOX_DIR,
        "RGBRIDGE_TOOLS_DIR": TOOLS_DIR,
        "RGBRIDGE_SCRATCH": "/tmp",
        "RGBRIDGE_BYTECODE_DIR": bytecode_dir,
        "RGBRIDGE_TWIN_DIR": twin_dir,
        "RGBRIDGE_TWIN_AFTER": str(twin_after),
        "RGBRIDGE_TWIN_MARK": twin_mark(ready_mark) if ready_mark and twin_dir else "",
    }


def write_build_files(
    folder: Path, settings: dict[str, str], pip_env: dict[str, str], verify: Sequence[str] = ()
) -> None:
    """The install script and what it reads, into ``folder`` (copied to ``BUILD_DIR``):
    its settings, the host's pip index settings and a delta build's check (``verify``)."""
    shutil.copyfile(INSTALL_SCRIPT, folder / INSTALL_SCRIPT.name)
    (folder / "install.env").write_text(_shell_env(settings), encoding="utf-8")
    (folder / "pip.env").write_text(_shell_env(pip_env), encoding="utf-8")
    if verify:
        (folder / "verify.sh").write_text("\n".join(verify) + "\n", encoding="utf-8")


def checked_mark(ready_mark: str) -> str:
    """What a ``compile_late`` build prints once pip accepted the set, before the bytecode."""
    return f"{ready_mark}_CHECKED"


def twin_mark(ready_mark: str) -> str:
    """What a build prints once its twin set (``twin.py``) is final; ``_CHECKED`` or
    ``_REJECTED`` follow it with pip's verdict. Not an extension of ``ready_mark``, which a
    search for that mark would find first."""
    return ready_mark.replace("RGBRIDGE_READY_", "RGBRIDGE_TWIN_", 1)


def effective_mode(mode: str) -> str:
    """``index`` needs uv (``uv_tool``); without it a build installs with pip alone."""
    return "pip" if mode == "index" and uv_tool() is None else mode


def rejection_note(log: str) -> str:
    """The build log's line saying why uv's install was rejected, as the note of pip's rebuild."""
    reason = next((x for x in log.splitlines() if x.startswith("RGBRIDGE_UV_REJECTED")), "")
    return f"{reason}: installing with pip instead (pip's choice is the reference)\n"


def rebuild_with_pip(log: str, notes: list[str], progress: ProgressFn | None) -> str:
    """uv's install was rejected: note why (for the build log), say it, and name pip's mode."""
    notes.append(rejection_note(log))
    say(progress, notes[-1].strip())
    return "pip"


def installed_pins(log: str) -> list[str]:
    """``name==version`` of every distribution the build's log says it installed (uv's
    `` + name==version`` lines, pip's ``Successfully installed`` line)."""
    pins: list[str] = []
    for line in log.splitlines():
        if m := _PIN.match(line.rstrip()):
            pins.append(f"{m.group(1)}=={m.group(2)}")
        elif m := _PIP_INSTALLED.match(line.strip()):
            for item in m.group(1).split():
                name, _, version = item.rpartition("-")
                if name and version:
                    pins.append(f"{name}=={version}")
    return sorted(set(pins))


def env_prefix(log: str) -> str:
    """The active environment's prefix the build reported on its first line ("" = not a venv)."""
    for line in log.splitlines():
        if line.startswith(_PREFIX_MARK):
            return line[len(_PREFIX_MARK) :].strip()
        break
    return ""


def _shell_env(values: dict[str, str]) -> str:
    import shlex

    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(values.items()))


def wait_ready(container: Container, mark: str, seconds: float) -> bool:
    """True once the build printed ``mark`` while still running (the environment is final);
    False when it ended first or ``seconds`` passed."""
    ready, ended = threading.Event(), threading.Event()
    needle = mark.encode()

    def follow() -> None:
        seen = b""
        try:
            for chunk in container.logs(stream=True, follow=True):
                seen = (seen + chunk)[-(len(needle) + 4096) :]
                if needle in seen:
                    ready.set()
                    return
        except (DockerException, requests.RequestException):
            pass
        finally:
            ended.set()

    threading.Thread(target=follow, daemon=True, name="layer-ready").start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready.wait(0.05):
            return True
        if ended.is_set():
            return ready.is_set()
    return False


def start_build_container(
    client: docker.DockerClient,
    *,
    base: str,
    kind: str,
    requirement_files: dict[str, str],
    mode: str,
    view: Path,
    wheels: Path | None,
    mounts: Sequence[docker.types.Mount] = (),
    command: list[str] | None = None,
    compile_late: bool = False,
    hold_compile: bool = False,
    verify: Sequence[str] = (),
    bytecode_dir: str = "",
    twin_dir: str = "",
    twin_after: int = 0,
) -> tuple[Container, str]:
    """Create and start one build container FROM ``base`` running the install script over
    ``requirement_files``; returns it (the caller removes it) and its ready mark.

    The package cache's ``view`` and ``wheels`` (a wheelhouse) are bind-mounted read-only, as is
    uv in ``index`` mode; ``mounts`` are added (``env_volume``: the set's volume and the seed).
    No network in ``local`` mode. pip runs as root, as in a Dockerfile RUN; no capabilities, no
    new privileges. ``command`` must end by running ``BUILD_SCRIPT``.
    """
    from bridge.scoring.sandbox.containers import create_container, put_directory, remove_container
    from bridge.scoring.sandbox.protocol import SandboxLimits

    ready_mark = f"RGBRIDGE_READY_{secrets.token_hex(8)}"
    with tempfile.TemporaryDirectory(prefix="rgbridge-layer-") as tmp:
        files_dir = Path(tmp)
        for name, text in requirement_files.items():
            (files_dir / name).write_text(text, encoding="utf-8")
        settings = install_settings(
            list(requirement_files),
            mode=mode,
            ready_mark=ready_mark,
            compile_late=compile_late,
            hold_compile=hold_compile,
            bytecode_dir=bytecode_dir,
            twin_dir=twin_dir,
            twin_after=twin_after,
        )
        pip_env = {} if mode == "local" else host_pip_index_settings()
        write_build_files(files_dir, settings, pip_env, verify)
        # --mount style binds: unlike -v ones they are not recorded as VOLUMEs by a commit.
        all_mounts = [*mounts, docker.types.Mount(CACHE_DIR, str(view), type="bind", read_only=True)]
        if wheels is not None:
            all_mounts.append(docker.types.Mount(OUTBOX_DIR, str(wheels), type="bind", read_only=True))
        tools = uv_tool() if mode == "index" else None
        if tools is not None:
            all_mounts.append(docker.types.Mount(TOOLS_DIR, str(tools), type="bind", read_only=True))
        # No network in local mode; else the shared build namespace (``buildnet.py``) or, should
        # joining it fail (its holder removed meanwhile), a namespace of the build's own.
        networks = ["none"] if mode == "local" else list(dict.fromkeys([build_network(client, base), "bridge"]))
        for network in networks:
            last = network == networks[-1]
            try:
                container = create_container(
                    client,
                    base,
                    name=f"rgbridge-{kind}-build-{secrets.token_hex(5)}",
                    command=command or ["bash", BUILD_SCRIPT],
                    labels=make_labels(kind=f"{kind}-build"),
                    limits=SandboxLimits(user="0:0", pids_limit=1024, nano_cpus=2_000_000_000),
                    network_mode=network,
                    mounts=all_mounts,
                )
            except ScoringError:
                if last:
                    raise
                continue
            try:
                put_directory(container, files_dir, BUILD_DIR, uid=0, gid=0)
                container.start()
            except BaseException as exc:
                with contextlib.suppress(DockerException, requests.RequestException):
                    remove_container(container)
                if last or not isinstance(exc, DockerException):
                    raise
                continue
            return container, ready_mark
    raise AssertionError("unreachable: the last network mode raises or returns")
