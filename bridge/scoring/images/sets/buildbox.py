"""Build containers, the one seam both dependency stores use: start, ready mark, installed pins.

Both use them (``layer.py`` saves the container's environment as a layer, ``env_volume.py``
installs into a volume): the install script, starting a build container FROM a base, waiting for its ready mark,
and what its log says it installed.

The container runs as root with the package cache, a wheelhouse and the uv binary bind-mounted
read-only, no capabilities, no new privileges; it writes nothing on the host.
"""

from __future__ import annotations

import contextlib
import re
import secrets
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
_PIN = re.compile(r"^ \+ ([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_PIP_INSTALLED = re.compile(r"^Successfully installed (.+)$")


def _pip(args: str) -> str:
    return f"python -m pip {args} --progress-bar off"


def _uv_install(req: str, *, compile_bytecode: bool) -> str:
    """uv resolving and installing ``req`` as pip would: every index searched for the best
    version (pip's rule, not uv's first-index default), the host's index settings, cached wheels
    taken for identical files (``--find-links``). Bytecode is compiled by the last file's install
    (pip compiles too; uv compiles the whole environment, so once is enough). ``$UV_CACHE`` is a
    folder in the environment (``install_script``): files are hard-linked from it, not copied."""
    return (
        f'{TOOLS_DIR}/uv pip install --python "$(command -v python)" --index-strategy unsafe-best-match'
        f" --find-links {CACHE_DIR}/flat{' --compile-bytecode' if compile_bytecode else ''}"
        f' --link-mode hardlink --cache-dir "$UV_CACHE" "${{UV_INDEX_ARGS[@]}}" -r {req}'
    )


def _pip_accepts(reqs: Sequence[str]) -> str:
    """pip's own dry run of every file in the environment uv made installs nothing: pip's rules
    (specifiers, markers, extras, pre-releases) accept what uv chose. ``--no-index``: an
    installed distribution that satisfies a requirement needs no index, and one that does not
    makes the dry run fail, which rejects uv's result all the same. One run over all the files
    (pip installs them one after the other): the final environment must satisfy each of them,
    and files that conflict with each other are rejected (pip then installs them in turn)."""
    files = " ".join(f"-r {r}" for r in reqs)
    return (
        _pip(f"install --dry-run --no-index --quiet --report /tmp/rgbridge-report.json {files}")
        + " && python3 -c 'import json, sys; "
        + 'sys.exit(1 if json.load(open("/tmp/rgbridge-report.json")).get("install") else 0)\''
    )


def install_script(
    files: Sequence[str],
    *,
    mode: str,
    ready_mark: str = "",
    check: bool = True,
    compile_late: bool = False,
    hold_compile: bool = False,
    verify: Sequence[str] = (),
) -> str:
    """The shell script of a layer build. ``mode``:

    * ``index`` (containers reach the index): uv resolves and installs each file in turn, as pip
      would (see ``_uv_install``); then pip's own dry run over all the files must find nothing
      left to install (``_pip_accepts``), else the build exits ``UV_REJECTED`` and the host
      rebuilds it in ``pip`` mode. ``check=False`` leaves pip's run out (the caller runs it).
    * ``pip``: pip alone, with the package cache offered as the last extra index (pip prefers the
      later index for an identical file, so a cached wheel is not downloaded again).
    * ``local`` (no network): the cache and a wheelhouse only (``--no-index``).

    The first line of output names the active environment's prefix (the folder the host exports
    as the layer), printed before anything of the agent's runs. ``ready_mark`` is printed once
    the environment is final, before the last check: the host saves the layer while pip checks. The build writes nothing on the
    host: the host fills the package cache itself (``wheelhouse.host_fetch``).

    ``compile_late`` (sets in volumes, ``env_volume``): bytecode is compiled after the ready
    mark, while the score already runs on the read-only mount, instead of on its critical path
    (~1.4 s measured, docs/measurements.md), and after pip's check, whose verdict is printed first
    (``checked_mark``): the set is accepted, tagged and its score returned without waiting for the
    bytecode (on a loaded machine tens of seconds, docs/measurements.md). What a score imports
    before its file is written is compiled in memory; each ``.pyc`` appears whole (written to a
    temporary name and renamed, as ``py_compile`` does).

    ``hold_compile`` (with ``compile_late`` and a ready mark): after pip's verdict the bytecode
    waits for ``GO_SIGNAL`` (the host sends it when the score beside it is over,
    ``env_volume.PendingCheck``) or ``HOLD_LIMIT`` seconds. Compiling a whole environment is
    several CPU-seconds; on a busy machine it otherwise competes with the very score it was
    taken off the path of (docs/measurements.md).
    """
    reqs = [f"{BUILD_DIR}/{name}" for name in files]
    # The build files never reach the layer, whatever way the script ends.
    scratch = "/tmp/rgbridge-pip /tmp/rgbridge-report.json"
    hold = compile_late and hold_compile and bool(ready_mark)
    lines = [
        "set -u",
        f"trap 'rm -rf {BUILD_DIR} {scratch}' EXIT",
        # set before anything is printed: the host signals only after the verdict's mark
        *([f"go=0; trap 'go=1' {GO_SIGNAL.removeprefix('SIG')}"] if hold else []),
        'echo "'
        + _PREFIX_MARK
        + '$(python -c \'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")\')"',
        f". {BUILD_DIR}/pip.env",
        "export PIP_CACHE_DIR=/tmp/rgbridge-pip",
        # phase times in build.log (where a slow layer build spends its time)
        'phase() { echo "RGBRIDGE_PHASE $1 $(date +%s.%N)"; }',
        "phase start",
    ]
    if mode == "local":
        lines.append(
            " && ".join(
                _pip(f"install --no-index --find-links {OUTBOX_DIR} --find-links {CACHE_DIR}/flat -r {r}") for r in reqs
            )
            + " || exit 1"
        )
        return "\n".join(lines) + "\n"
    if mode == "pip":
        cache_index = f"file://{CACHE_DIR}/simple/"
        lines += [
            f'export PIP_EXTRA_INDEX_URL="${{PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }}{cache_index}"',
            "echo RGBRIDGE_INSTALLER=pip",
            " && ".join(_pip(f"install -r {r}") for r in reqs) + " || exit 1",
            "phase installed",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        "export SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}",
        # the host's pip index settings, as uv spells them
        "UV_INDEX_ARGS=()",
        '[ -n "${PIP_INDEX_URL:-}" ] && UV_INDEX_ARGS+=(--index-url "$PIP_INDEX_URL")',
        'for u in ${PIP_EXTRA_INDEX_URL:-}; do UV_INDEX_ARGS+=(--extra-index-url "$u"); done',
        'for h in ${PIP_TRUSTED_HOST:-}; do UV_INDEX_ARGS+=(--allow-insecure-host "$h"); done',
        "echo RGBRIDGE_INSTALLER=uv",
    ]
    # uv unpacks wheels into its cache and hard-links them into the environment: with the cache
    # on the environment's own file system (a folder in it, removed before anyone sees the
    # environment) nothing is copied twice; the installed files stay when the cache goes
    lines.append("UV_CACHE=\"$(python -c 'import sys; print(sys.prefix)')/.rgbridge-uv-cache\"")
    # uv's lock file in the environment folder is not part of what pip would leave there
    drop_lock = 'rm -rf "$UV_CACHE" "$(python -c \'import sys; print(sys.prefix)\')/.lock"'
    for i, r in enumerate(reqs):
        last = i == len(reqs) - 1 and not compile_late
        lines += [
            f"{_uv_install(r, compile_bytecode=last)} || {{ echo 'RGBRIDGE_UV_REJECTED uv could not install {r}';"
            f" exit {UV_REJECTED}; }}",
            "phase installed",
        ]
    lines += verify  # uv mode only: a delta build's check (``closest.delta_check``)
    lines.append(drop_lock)
    if ready_mark:
        lines.append(f"echo {ready_mark}")
    if check:
        lines += [
            f"{_pip_accepts(reqs)} || {{ echo 'RGBRIDGE_UV_REJECTED pip does not accept what uv installed';"
            f" exit {UV_REJECTED}; }}",
            "phase checked",
        ]
    if compile_late:  # what uv's --compile-bytecode does: every module of the environment's site-packages
        if ready_mark:
            lines.append(f"echo {checked_mark(ready_mark)}")
        if hold:
            # `wait` returns as soon as the trapped signal arrives; a signal between the test
            # and `wait` costs one more second at most
            lines.append(
                f'while [ "$go" = 0 ] && [ "$SECONDS" -lt {HOLD_LIMIT} ]; do sleep 1 & wait $! 2>/dev/null; done'
            )
        lines += [
            "python -c 'import compileall, sysconfig; "
            'compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=1, workers=0)\' >/dev/null',
            "phase compiled",
        ]
    return "\n".join(lines) + "\n"


def checked_mark(ready_mark: str) -> str:
    """What a ``compile_late`` build prints once pip accepted the set, before the bytecode."""
    return f"{ready_mark}_CHECKED"


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
) -> tuple[Container, str]:
    """Create and start one build container FROM ``base`` running ``install_script`` over
    ``requirement_files``; returns it (the caller removes it) and its ready mark.

    The package cache's ``view`` and ``wheels`` (a wheelhouse) are bind-mounted read-only, as is
    uv in ``index`` mode; ``mounts`` are added (``env_volume``: the set's volume and the seed).
    No network in ``local`` mode. pip runs as root, as in a Dockerfile RUN; no capabilities, no
    new privileges. ``command`` must end by running ``{BUILD_DIR}/build.sh``.
    """
    from bridge.scoring.sandbox.containers import create_container, put_directory, remove_container
    from bridge.scoring.sandbox.protocol import SandboxLimits

    ready_mark = f"RGBRIDGE_READY_{secrets.token_hex(8)}"
    with tempfile.TemporaryDirectory(prefix="rgbridge-layer-") as tmp:
        files_dir = Path(tmp)
        for name, text in requirement_files.items():
            (files_dir / name).write_text(text, encoding="utf-8")
        pip_env = {} if mode == "local" else host_pip_index_settings()
        (files_dir / "pip.env").write_text(_shell_env(pip_env), encoding="utf-8")
        script = install_script(
            list(requirement_files),
            mode=mode,
            ready_mark=ready_mark,
            compile_late=compile_late,
            hold_compile=hold_compile,
            verify=verify,
        )
        (files_dir / "build.sh").write_text(script, encoding="utf-8")
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
                    command=command or ["bash", f"{BUILD_DIR}/build.sh"],
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
