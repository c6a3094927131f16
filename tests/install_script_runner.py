"""Runs the install script of a dependency set (bridge/scoring/assets/install_set.sh) on the host
with stand-ins for python, pip and uv that record each call in one trace, in order with the
script's own output (a script the install script gives python on its stdin runs for real; uv's
stand-in makes the ``.dist-info`` folders ``STUB_NEW_DISTS`` names in ``STUB_SITE``, and for a file
``x.txt`` those ``STUB_DISTS_x_txt`` names); what the script does in a real build container is covered by the engine
tests (test_env_volume.py, test_layer_export.py, test_closest_set.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.scoring.images.sets import buildbox

_PYTHON_STUB = r"""#!/bin/bash
echo "STUB python $*" >> "$TRACE"
case "$*" in
  *"pip install --dry-run"*)
    [ -e "$STUB_PREFIX/.rgbridge-uv-cache" ] && echo "STUB uv cache present at the check" >> "$TRACE"
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" = --report ] && out="${args[$((i + 1))]}"; done
    printf '{"install": %s}' "${STUB_REPORT_INSTALL:-[]}" > "$out"
    exit 0 ;;
  *"-m pip"*) exit "${STUB_PIP_EXIT:-0}" ;;
  *json.load*) exec "$STUB_REAL_PYTHON" "$@" ;;
  *compileall*) exit 0 ;;
  *sys.prefix*) echo "$STUB_PREFIX"; echo; echo "${STUB_SITE:-}"; exit 0 ;;
  "- "*) exec "$STUB_REAL_PYTHON" "$@" ;;
esac
exit 0
"""

_UV_STUB = r"""#!/bin/bash
echo "STUB uv $*" >> "$TRACE"
case "$*" in
  "pip install"*)
    mkdir -p "$STUB_PREFIX/.rgbridge-uv-cache"
    touch "$STUB_PREFIX/.lock"
    for d in ${STUB_NEW_DISTS:-}; do mkdir -p "$STUB_SITE/$d"; done
    # and those STUB_DISTS_<file name, . as _> names for the file it installs
    prev=""
    for a in "$@"; do
      if [ "$prev" = -r ]; then
        var="STUB_DISTS_$(basename "$a" | tr '.-' '__')"
        for d in ${!var:-}; do mkdir -p "$STUB_SITE/$d"; done
      fi
      prev="$a"
    done
    exit "${STUB_UV_EXIT:-0}" ;;
  "pip compile"*) exit "${STUB_UV_COMPILE_EXIT:-0}" ;;
esac
exit 0
"""


@dataclass
class Run:
    lines: list[str]
    returncode: int
    build_dir: Path

    def index(self, needle: str, start: int = 0) -> int:
        """The first trace line from ``start`` on that contains ``needle``."""
        return next(i for i, line in enumerate(self.lines) if i >= start and needle in line)

    def last(self, needle: str) -> int:
        return max(i for i, line in enumerate(self.lines) if needle in line)

    def having(self, needle: str) -> list[str]:
        return [line for line in self.lines if needle in line]


def start(
    tmp_path: Path,
    files: Sequence[str],
    *,
    verify: Sequence[str] = (),
    overrides: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    **settings: object,
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """Start the script over ``files`` (each a one-line requirement file) with
    ``buildbox.install_settings(files, **settings)``; returns the process, its trace and its
    build folder."""
    stubs = tmp_path / "stubs"
    tools = tmp_path / "tools"
    build = tmp_path / "build"
    for folder in (stubs, tools, build, tmp_path / "scratch"):
        folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        (stubs / name).write_text(_PYTHON_STUB)
        (stubs / name).chmod(0o755)
    (tools / "uv").write_text(_UV_STUB)
    (tools / "uv").chmod(0o755)
    for name in files:
        (build / name).write_text("six\n")
    values = buildbox.install_settings(files, **settings)  # type: ignore[arg-type]
    values.update(RGBRIDGE_TOOLS_DIR=str(tools), RGBRIDGE_SCRATCH=str(tmp_path / "scratch"), **(overrides or {}))
    buildbox.write_build_files(build, values, {}, verify)
    trace = tmp_path / "trace"
    run_env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "TRACE": str(trace),
        "STUB_PREFIX": str(tmp_path / "env"),
        "STUB_REAL_PYTHON": sys.executable,
        **(env or {}),
    }
    with trace.open("ab") as out:
        proc = subprocess.Popen(
            ["bash", str(build / buildbox.INSTALL_SCRIPT.name)], stdout=out, stderr=subprocess.STDOUT, env=run_env
        )
    return proc, trace, build


def finish(proc: subprocess.Popen[bytes], trace: Path, build: Path) -> Run:
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Run(trace.read_text().splitlines(), code, build)


def run(tmp_path: Path, files: Sequence[str], **kwargs: object) -> Run:
    return finish(*start(tmp_path, files, **kwargs))  # type: ignore[arg-type]


def wait_for(trace: Path, needle: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while needle not in (trace.read_text() if trace.exists() else ""):
        assert time.monotonic() < deadline, f"{needle!r} never appeared in {trace.read_text()}"
        time.sleep(0.05)


def go(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(getattr(signal, buildbox.GO_SIGNAL))
