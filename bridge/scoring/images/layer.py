"""Layer builds: one container from a base image runs the install and is committed as the layer
(one commit instead of a legacy build's per-step commits, each slow on fuse-overlayfs)."""

from __future__ import annotations

import json
import secrets
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import docker
from docker.errors import DockerException

from bridge.scoring.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE, make_labels
from bridge.scoring.images.build import LOG_TAIL_CHARS, BuildResult, ProgressFn, say
from bridge.scoring.images.host import host_pip_index_settings
from bridge.scoring.images.wheelhouse import uv_tool

_LAYER_BUILD = "/tmp/rgbridge-build"
_LAYER_CACHE = "/opt/rgbridge-wheels"  # the wheel cache's view: read-only bind mount
_LAYER_OUTBOX = "/opt/rgbridge-outbox"  # a wheelhouse (no-network builds): read-only bind mount
_LAYER_TOOLS = "/opt/rgbridge-tools"  # the uv binary: read-only bind mount
# Given pip's own dry-run report, the wheel files pip would install (found in the package cache,
# sha256 checked against the report), linked into one folder and printed as name==version
# (installed by name from that folder, not by path, so no direct-URL record differs from pip's):
# exit 1 when pip would install anything else.
_PICK_WHEELS = f"""import hashlib, json, os, sys, urllib.parse
report = json.load(open(sys.argv[1]))
found = []
for item in report.get("install", []):
    info = item.get("download_info") or {{}}
    name = urllib.parse.unquote(info.get("url", "").split("#")[0].rsplit("/", 1)[-1])
    if item.get("is_direct") or not name.endswith(".whl") or "/" in name:
        sys.exit(1)
    archive = info.get("archive_info") or {{}}
    want = (archive.get("hashes") or {{}}).get("sha256") or archive.get("hash", "").partition("sha256=")[2]
    for folder in ("{_LAYER_CACHE}/flat",):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                if want and hashlib.sha256(fh.read()).hexdigest() != want:
                    continue
            os.makedirs("/tmp/rgbridge-chosen", exist_ok=True)
            os.symlink(path, os.path.join("/tmp/rgbridge-chosen", name))
            meta = item.get("metadata") or {{}}
            found.append(f"{{meta['name']}}=={{meta['version']}}")
            break
    else:
        sys.exit(1)
print("\\n".join(found))
"""


def _pip(args: str) -> str:
    return f"python -m pip {args} --progress-bar off"


def _layer_script(files: Sequence[str], *, mode: str) -> str:
    """The shell script of a layer build. ``mode``:

    * ``index`` (containers reach the index): pip's own dry run picks what to install, with the
      package cache offered as the last extra index (pip prefers the later index for an identical
      file, so a cached wheel is never downloaded again, while versions are chosen as without
      the cache). When every file picked is a wheel found in the cache, uv installs exactly those
      files (parallel, bytecode compiled); anything else is installed by pip itself.
    * ``local`` (no network): the cache and a wheelhouse only (``--no-index``).

    The build writes nothing on the host: the host fills the cache itself (``wheelhouse.host_fetch``).
    """
    reqs = [f"{_LAYER_BUILD}/{name}" for name in files]
    # The build files never reach the committed layer, whatever way the script ends; pip's HTTP
    # cache lives in /tmp for this build only (the install re-reads the pages the dry run read).
    scratch = "/tmp/rgbridge-pip /tmp/rgbridge-report.json /tmp/rgbridge-wheel-list /tmp/rgbridge-chosen"
    lines = [
        "set -u",
        f"trap 'rm -rf {_LAYER_BUILD} {scratch}' EXIT",
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
    cache_index = f"file://{_LAYER_CACHE}/simple/"
    lines += [
        f'export PIP_EXTRA_INDEX_URL="${{PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }}{cache_index}"',
        "install_step() {",
        "  rm -rf /tmp/rgbridge-chosen",
        f"  if [ -x {_LAYER_TOOLS}/uv ] && "
        + _pip('install --dry-run --quiet --report /tmp/rgbridge-report.json -r "$1"')
        + f" && python3 {_LAYER_BUILD}/pick_wheels.py /tmp/rgbridge-report.json > /tmp/rgbridge-wheel-list; then",
        "    phase resolved; echo RGBRIDGE_INSTALLER=uv; [ -s /tmp/rgbridge-wheel-list ] || return 0",
        (
            f"    xargs -d '\\n' {_LAYER_TOOLS}/uv pip install --python \"$(command -v python)\" --no-deps --no-index"
            " --find-links /tmp/rgbridge-chosen --compile-bytecode --no-cache < /tmp/rgbridge-wheel-list && return 0"
        ),
        "  fi",
        "  echo RGBRIDGE_INSTALLER=pip; " + _pip('install -r "$1"'),
        "}",
        " && ".join(f"install_step {r}" for r in reqs) + " || exit 1",
        "phase installed",
    ]
    return "\n".join(lines) + "\n"


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
) -> BuildResult:
    """Run ``_layer_script`` in one container FROM ``base`` and commit it as ``tag``.

    ``view`` (the package cache) and ``wheels`` (a wheelhouse, ``local`` mode) are bind-mounted
    read-only: the build writes nothing on the host. No network in ``local`` mode.
    """
    from bridge.scoring.containers import (
        ContainerLimits,
        create_container,
        managed,
        put_directory,
        read_logs,
        wait_with_timeout,
    )

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rgbridge-layer-") as tmp:
        files_dir = Path(tmp)
        for name, text in requirement_files.items():
            (files_dir / name).write_text(text, encoding="utf-8")
        pip_env = {} if mode == "local" else host_pip_index_settings()
        (files_dir / "pip.env").write_text(_shell_env(pip_env), encoding="utf-8")
        (files_dir / "pick_wheels.py").write_text(_PICK_WHEELS, encoding="utf-8")
        (files_dir / "build.sh").write_text(_layer_script(list(requirement_files), mode=mode), encoding="utf-8")
        # --mount style binds: unlike -v ones they are not recorded as VOLUMEs by the commit.
        mounts = [docker.types.Mount(_LAYER_CACHE, str(view), type="bind", read_only=True)]
        if wheels is not None:
            mounts.append(docker.types.Mount(_LAYER_OUTBOX, str(wheels), type="bind", read_only=True))
        tools = uv_tool() if mode == "index" else None
        if tools is not None:
            mounts.append(docker.types.Mount(_LAYER_TOOLS, str(tools), type="bind", read_only=True))
        container = create_container(
            client,
            base,
            name=f"rgbridge-layer-{secrets.token_hex(5)}",
            command=["bash", f"{_LAYER_BUILD}/build.sh"],
            labels=make_labels(kind=f"{kind}-build"),
            # pip runs as root, as in a Dockerfile RUN; no capabilities, no new privileges
            limits=ContainerLimits(user="0:0", pids_limit=1024, nano_cpus=2_000_000_000),
            network_mode="none" if mode == "local" else "bridge",
            mounts=mounts,
        )
        with managed(container):
            put_directory(container, files_dir, _LAYER_BUILD, uid=0, gid=0)
            container.start()
            outcome = wait_with_timeout(container, max(5.0, timeout - (time.monotonic() - started)))
            log = read_logs(container)
            for line in log.splitlines():
                if line.strip():
                    say(progress, line)
            tail = log[-LOG_TAIL_CHARS:]
            if outcome.timed_out:
                return BuildResult(
                    False,
                    tag,
                    time.monotonic() - started,
                    tail,
                    f"build timed out after {timeout:.0f}s",
                    timed_out=True,
                )
            if outcome.exit_code != 0:
                return BuildResult(False, tag, time.monotonic() - started, tail, f"install exited {outcome.exit_code}")
            repo, _, version = tag.rpartition(":")
            try:
                container.commit(repository=repo, tag=version, changes=_commit_changes(client, base, kind))
            except DockerException as exc:
                return BuildResult(False, tag, time.monotonic() - started, tail, f"docker commit failed: {exc}")
    return BuildResult(True, tag, time.monotonic() - started, tail, pip_installed="RGBRIDGE_INSTALLER=pip" in log)
