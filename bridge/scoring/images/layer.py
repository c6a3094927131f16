"""Layer builds: one container from a base image runs the install script; its environment folder
becomes the image's one new layer (``layer_export``; a commit when that is not possible), instead
of a legacy build's per-step commits, each slow on fuse-overlayfs."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import docker
import requests
from docker.errors import DockerException
from docker.models.containers import Container

from bridge.scoring.images.build import LOG_TAIL_CHARS, BuildResult, say
from bridge.scoring.images.host import host_pip_index_settings
from bridge.scoring.images.layer_export import LayerExportError, export_folder_layer, load_layer_image, valid_prefix
from bridge.scoring.images.wheelhouse import uv_tool
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE, make_labels
from bridge.scoring.types import ProgressFn

_LAYER_BUILD = "/tmp/rgbridge-build"
# Read-only bind mounts, outside the folder exported as the layer (the environment's parent):
_LAYER_CACHE = "/run/rgbridge/wheels"  # the wheel cache's view
_LAYER_OUTBOX = "/run/rgbridge/outbox"  # a wheelhouse (no-network builds)
_LAYER_TOOLS = "/run/rgbridge/tools"  # the uv binary
#: exit status of a build whose uv install pip does not accept (the host rebuilds it with pip)
UV_REJECTED = 3
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
    folder in the environment (``_layer_script``): files are hard-linked from it, not copied."""
    return (
        f'{_LAYER_TOOLS}/uv pip install --python "$(command -v python)" --index-strategy unsafe-best-match'
        f" --find-links {_LAYER_CACHE}/flat{' --compile-bytecode' if compile_bytecode else ''}"
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


def _layer_script(
    files: Sequence[str], *, mode: str, ready_mark: str = "", check: bool = True, compile_late: bool = False
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
    (~1.4 s measured, docs/measurements.md). What the score imports before its file is written
    is compiled in memory; each ``.pyc`` appears whole (written to a temporary name and renamed,
    as ``py_compile`` does), and the set is final, tagged, only after pip's check that follows.
    """
    reqs = [f"{_LAYER_BUILD}/{name}" for name in files]
    # The build files never reach the layer, whatever way the script ends.
    scratch = "/tmp/rgbridge-pip /tmp/rgbridge-report.json"
    lines = [
        "set -u",
        f"trap 'rm -rf {_LAYER_BUILD} {scratch}' EXIT",
        'echo "'
        + _PREFIX_MARK
        + '$(python -c \'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")\')"',
        f". {_LAYER_BUILD}/pip.env",
        "export PIP_CACHE_DIR=/tmp/rgbridge-pip",
        # phase times in build.log (where a slow layer build spends its time)
        'phase() { echo "RGBRIDGE_PHASE $1 $(date +%s.%N)"; }',
        "phase start",
    ]
    if mode == "local":
        lines.append(
            " && ".join(
                _pip(f"install --no-index --find-links {_LAYER_OUTBOX} --find-links {_LAYER_CACHE}/flat -r {r}")
                for r in reqs
            )
            + " || exit 1"
        )
        return "\n".join(lines) + "\n"
    if mode == "pip":
        cache_index = f"file://{_LAYER_CACHE}/simple/"
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
    lines.append(drop_lock)
    if ready_mark:
        lines.append(f"echo {ready_mark}")
    if compile_late:  # what uv's --compile-bytecode does: every module of the environment's site-packages
        lines += [
            "python -c 'import compileall, sysconfig; "
            'compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=1, workers=0)\' >/dev/null',
            "phase compiled",
        ]
    if check:
        lines += [
            f"{_pip_accepts(reqs)} || {{ echo 'RGBRIDGE_UV_REJECTED pip does not accept what uv installed';"
            f" exit {UV_REJECTED}; }}",
            "phase checked",
        ]
    return "\n".join(lines) + "\n"


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


def _commit_changes(client: docker.DockerClient, base: str, kind: str) -> list[str]:
    """Dockerfile changes that give the committed layer its base's run config back (the build
    container's command and user are not the image's) plus our labels."""
    config = client.images.get(base).attrs.get("Config") or {}
    changes = [
        f"LABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}={kind}",
        f"USER {config.get('User') or 'root'}",
        f"WORKDIR {config.get('WorkingDir') or '/'}",
    ]
    if config.get("Cmd"):
        changes.append(f"CMD {json.dumps(config['Cmd'])}")
    return changes


def _shell_env(values: dict[str, str]) -> str:
    import shlex

    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(values.items()))


def _commit(container: Container, client: docker.DockerClient, *, base: str, tag: str, kind: str) -> None:
    repo, _, version = tag.rpartition(":")
    container.commit(repository=repo, tag=version, changes=_commit_changes(client, base, kind))


def _load_exported(
    container: Container, client: docker.DockerClient, *, base: str, tag: str, kind: str, prefix: str, say_: ProgressFn
) -> bool:
    """``tag`` = ``base`` + the container's environment folder as one layer (``layer_export``);
    False (and no ``tag``) when there is no venv to export or the export fails."""
    if not valid_prefix(prefix):
        return False
    with tempfile.TemporaryDirectory(prefix="rgbridge-export-") as tmp:
        try:
            diff_id = export_folder_layer(container, prefix, Path(tmp) / "layer.tar")
            load_layer_image(
                client,
                base=base,
                tag=tag,
                layer_tar=Path(tmp) / "layer.tar",
                diff_id=diff_id,
                labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: kind},
                comment=f"rgbridge {kind} layer: {prefix}",
            )
            return True
        except LayerExportError as exc:
            say_(f"exporting {prefix} as a layer failed ({exc}); committing the container instead")
            _forget_tag(client, tag)
            return False


def _forget_tag(client: docker.DockerClient, tag: str) -> None:
    with contextlib.suppress(DockerException):
        client.images.remove(tag, force=True)


def _wait_ready(container: Container, mark: str, seconds: float) -> bool:
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
) -> tuple[Container, str]:
    """Create and start one build container FROM ``base`` running ``_layer_script`` over
    ``requirement_files``; returns it (the caller removes it) and its ready mark.

    The package cache's ``view`` and ``wheels`` (a wheelhouse) are bind-mounted read-only, as is
    uv in ``index`` mode; ``mounts`` are added (``env_volume``: the set's volume and the seed).
    No network in ``local`` mode. pip runs as root, as in a Dockerfile RUN; no capabilities, no
    new privileges. ``command`` must end by running ``{_LAYER_BUILD}/build.sh``.
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
        script = _layer_script(list(requirement_files), mode=mode, ready_mark=ready_mark, compile_late=compile_late)
        (files_dir / "build.sh").write_text(script, encoding="utf-8")
        # --mount style binds: unlike -v ones they are not recorded as VOLUMEs by a commit.
        all_mounts = [*mounts, docker.types.Mount(_LAYER_CACHE, str(view), type="bind", read_only=True)]
        if wheels is not None:
            all_mounts.append(docker.types.Mount(_LAYER_OUTBOX, str(wheels), type="bind", read_only=True))
        tools = uv_tool() if mode == "index" else None
        if tools is not None:
            all_mounts.append(docker.types.Mount(_LAYER_TOOLS, str(tools), type="bind", read_only=True))
        container = create_container(
            client,
            base,
            name=f"rgbridge-{kind}-build-{secrets.token_hex(5)}",
            command=command or ["bash", f"{_LAYER_BUILD}/build.sh"],
            labels=make_labels(kind=f"{kind}-build"),
            limits=SandboxLimits(user="0:0", pids_limit=1024, nano_cpus=2_000_000_000),
            network_mode="none" if mode == "local" else "bridge",
            mounts=all_mounts,
        )
        try:
            put_directory(container, files_dir, _LAYER_BUILD, uid=0, gid=0)
            container.start()
        except BaseException:
            with contextlib.suppress(DockerException, requests.RequestException):
                remove_container(container)
            raise
    return container, ready_mark


def build_layer(
    client: docker.DockerClient,
    *,
    base: str,
    tag: str,
    kind: str,
    requirement_files: dict[str, str],
    mode: str,
    view: Path,
    wheels: Path | None,
    timeout: float = 600,
    progress: ProgressFn | None = None,
    on_installed: Callable[[list[str]], None] | None = None,
) -> BuildResult:
    """Run ``_layer_script`` in one container FROM ``base`` and save it as ``tag`` (``_save_layer``).

    ``view`` (the package cache) and ``wheels`` (a wheelhouse, ``local`` mode) are bind-mounted
    read-only: the build writes nothing on the host. No network in ``local`` mode. In ``index``
    mode a build whose uv install pip does not accept is run again in ``pip`` mode (and says so
    in its log). ``on_installed`` gets the installed ``name==version`` pins once the install
    succeeded, while the layer is being saved.
    """
    from bridge.scoring.sandbox.containers import managed, read_logs, wait_with_timeout

    started = time.monotonic()

    def remaining() -> float:
        return max(5.0, timeout - (time.monotonic() - started))

    mode = effective_mode(mode)
    notes: list[str] = []
    while True:
        container, ready_mark = start_build_container(
            client, base=base, kind=kind, requirement_files=requirement_files, mode=mode, view=view, wheels=wheels
        )
        with managed(container):
            say_: ProgressFn = lambda text: say(progress, text)  # noqa: E731
            saved = ""
            pins: list[str] | None = None
            if mode == "index" and _wait_ready(container, ready_mark, remaining()):
                # The environment is final; pip's last check runs while the layer is saved.
                pins = installed_pins(read_logs(container))
                if on_installed is not None:
                    on_installed(pins)
                try:
                    if _load_exported(
                        container,
                        client,
                        base=base,
                        tag=tag,
                        kind=kind,
                        prefix=env_prefix(read_logs(container)),
                        say_=say_,
                    ):
                        saved = "layer"
                except DockerException as exc:
                    say_(f"saving the layer early failed ({exc}); saving it once the build ends")
            outcome = wait_with_timeout(container, remaining())
            log = read_logs(container)
            for line in log.splitlines():
                if line.strip():
                    say(progress, line)
            tail = "".join(notes) + log[-LOG_TAIL_CHARS:]
            elapsed = time.monotonic() - started
            if saved and (outcome.timed_out or outcome.exit_code != 0):
                _forget_tag(client, tag)  # saved while pip checked, but pip did not accept it
            if outcome.timed_out:
                return BuildResult(False, tag, elapsed, tail, f"build timed out after {timeout:.0f}s", timed_out=True)
            if outcome.exit_code == UV_REJECTED and mode == "index":
                mode = rebuild_with_pip(log, notes, progress)
                continue
            if outcome.exit_code != 0:
                return BuildResult(False, tag, elapsed, tail, f"install exited {outcome.exit_code}")
            if pins is None:
                pins = installed_pins(log)
                if on_installed is not None:
                    on_installed(pins)
            try:
                if not saved:
                    exported = _load_exported(
                        container, client, base=base, tag=tag, kind=kind, prefix=env_prefix(log), say_=say_
                    )
                    if not exported:
                        _commit(container, client, base=base, tag=tag, kind=kind)
                    saved = "layer" if exported else "commit"
            except DockerException as exc:
                _forget_tag(client, tag)
                return BuildResult(False, tag, time.monotonic() - started, tail, f"saving the layer failed: {exc}")
        return BuildResult(
            True, tag, time.monotonic() - started, tail + f"RGBRIDGE_SAVED={saved}\n", installed=pins, installer=mode
        )
