"""`rgbridge agents install NAME`: a library agent's framework in a virtual environment of its own
in `$RGBRIDGE_AGENTS_HOME` (default `~/.local/share/rgbridge-agents/<name>/<pinned version>/`: not
the data home, which no sandbox may see), from the version its
adapter pins (bridge/agents/adapters/library.py), never into the bridge's environment.

pip runs on the host here, but only on the framework's own pinned release from the package index
the user's pip is configured with: no agent output or recording is ever installed. A framework
whose stale pins pip's resolver cannot reconcile (MetaGPT) is installed by uv instead, the
bridge's own uv (bridge/scoring/images/base/wheelhouse.py `uv_tool`), its overrides written as
uv's `--override` (and `--excludes`) files kept in the environment, from the same index. The
environment is complete when its `install.json` is written (what was installed, with which
Python, how long it took and its size on disk); a folder without it is a cut install, removed and
redone. The run's row and configuration hash record the installed version (the adapter's version
probe), so two runs on different installs are told apart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bridge.agents.adapters.base import AgentError
from bridge.agents.adapters.library import INSTALL_MARKER, Framework, env_dir, env_python
from bridge.fs.files import write_json_atomic
from bridge.scoring.images.base import host_pip_index_settings, uv_tool

MARKER = INSTALL_MARKER
PIP_TIMEOUT_SECONDS = 3600.0
#: uv's override and exclude files, kept in the environment as the record of what was changed
OVERRIDES_FILE = "rgbridge-overrides.txt"
EXCLUDES_FILE = "rgbridge-excludes.txt"


@dataclass(frozen=True)
class Installed:
    """One framework's environment as `install.json` records it."""

    framework: str
    requirement: str
    version: str
    python: str
    env: str
    seconds: float
    bytes: int
    #: the adapter's overrides it was installed with (`overrides_text`), read back by the version
    #: probe (bridge/agents/adapters/library.py VERSION_CODE) into the row and configuration hash
    overrides: str = ""
    resolver: str = "pip"


def installed(framework: Framework) -> Installed | None:
    """The framework's complete environment, if `rgbridge agents install` built one."""
    marker = env_dir(framework) / MARKER
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        return Installed(**data)
    except (OSError, ValueError, TypeError):
        return None


def tree_bytes(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def install(
    framework: Framework,
    *,
    python: str | None = None,
    force: bool = False,
    say: Callable[[str], None] = lambda _line: None,
) -> Installed:
    """Build the framework's environment (kept when already complete, unless `force`)."""
    done = installed(framework)
    if done is not None and not force:
        say(f"{framework.name}: already installed ({done.requirement} in {done.env})")
        return done
    target = env_dir(framework)
    if target.exists():
        shutil.rmtree(target)  # a cut install, or --force
    target.parent.mkdir(parents=True, exist_ok=True)
    base = python or interpreter_for(framework)
    started = time.monotonic()
    say(f"{framework.name}: creating {target} with {base}")
    _run([base, "-m", "venv", str(target)], f"{framework.name}: python -m venv")
    pip = [str(env_python(target)), "-m", "pip", "--disable-pip-version-check", "--no-input", "install"]
    say(f"{framework.name}: {framework.resolver} install {framework.requirement}")
    if framework.resolver == "uv":
        _run(uv_install(target, framework), f"{framework.name}: uv pip install")
    elif framework.overrides:
        # the distribution alone, then its declared dependencies as the adapter changes them
        _run([*pip, "--no-deps", framework.requirement], f"{framework.name}: pip install")
        deps = overridden(declared(target, framework), dict(framework.overrides))
        _run([*pip, *deps, *framework.also], f"{framework.name}: pip install its dependencies")
    else:
        _run([*pip, framework.requirement, *framework.also], f"{framework.name}: pip install")
    version = _version(target, framework)
    record = Installed(
        framework=framework.name,
        requirement=framework.requirement,
        version=version,
        python=base,
        env=str(target),
        seconds=round(time.monotonic() - started, 1),
        bytes=tree_bytes(target),
        overrides=overrides_text(framework),
        resolver=framework.resolver,
    )
    write_json_atomic(target / MARKER, asdict(record))
    say(f"{framework.name}: {framework.dist} {version} installed in {record.seconds:g} s, {record.bytes / 1e6:.0f} MB")
    return record


def overrides_text(framework: Framework) -> str:
    """The overrides as rows show them: `lancedb` (a requirement replaced), `no faiss-cpu` (dropped)."""
    return ", ".join(req if req else f"no {name}" for name, req in framework.overrides)


def uv_install(target: Path, framework: Framework) -> list[str]:
    """uv's command line installing the framework into `target`'s environment in one resolution,
    each override replacing that package's requirement wherever it is declared (uv's
    `--override`; a dropped one is excluded), from the index the host's pip is configured with."""
    tool = uv_tool()
    if tool is None:
        raise AgentError(
            f"{framework.name}: its pins are resolved by uv (`uv pip install --override`), and uv is not available "
            "here (RGBRIDGE_INSTALLER=pip, or its wheel could not be fetched from the package index)"
        )
    argv = [str(tool / "uv"), "pip", "install", "--python", str(env_python(target)), "--no-progress"]
    replaced = [req for _name, req in framework.overrides if req]
    dropped = [name for name, req in framework.overrides if not req]
    for flag, name, lines in (("--override", OVERRIDES_FILE, replaced), ("--excludes", EXCLUDES_FILE, dropped)):
        if lines:
            (target / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
            argv += [flag, str(target / name)]
    return [*argv, *uv_index_args(host_pip_index_settings()), framework.requirement, *framework.also]


def uv_index_args(settings: dict[str, str]) -> list[str]:
    """The host pip's index settings (bridge/scoring/images/base/host.py) as uv's options: uv
    reads no pip configuration of its own."""
    args = ["--index-url", settings["PIP_INDEX_URL"]] if settings.get("PIP_INDEX_URL") else []
    for url in settings.get("PIP_EXTRA_INDEX_URL", "").split():
        args += ["--extra-index-url", url]
    for host in settings.get("PIP_TRUSTED_HOST", "").split():
        args += ["--allow-insecure-host", host]
    return args


def declared(env: Path, framework: Framework) -> list[str]:
    """The installed distribution's own Requires-Dist, without its extras' (and the extras the
    adapter asks for are not needed by a `--no-deps` install's adapter: none of ours has both)."""
    code = "import sys, json, importlib.metadata as m; print(json.dumps(m.requires(sys.argv[1]) or []))"
    done = subprocess.run(
        [str(env_python(env)), "-c", code, framework.dist], capture_output=True, text=True, timeout=60, check=False
    )
    try:
        requires = json.loads(done.stdout)
    except ValueError:
        raise AgentError(f"{framework.name}: its declared dependencies cannot be read: {done.stderr[-300:]}") from None
    return [str(r) for r in requires if "extra ==" not in str(r)]


def overridden(requires: list[str], overrides: dict[str, str]) -> list[str]:
    """`requires` with each named requirement replaced by its override ("" drops it)."""
    out = []
    for req in requires:
        name = re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0]
        key = _canonical(name)
        match = next((v for k, v in overrides.items() if _canonical(k) == key), None)
        if match is None:
            out.append(req)
        elif match:
            out.append(match)
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 name normalisation


def interpreter_for(framework: Framework) -> str:
    """The bridge's own interpreter, or, for a release that needs a newer Python, the first
    `python3.X` on PATH that is new enough (`--python` names one instead)."""
    own = getattr(sys, "_base_executable", None) or sys.executable
    need = framework.python_min
    if need is None or sys.version_info[:2] >= need:
        return own
    for minor in range(need[1], need[1] + 4):
        found = shutil.which(f"python{need[0]}.{minor}")
        if found and _runs(found):  # a version manager's shim may be on PATH for a Python it does not serve
            return found
    raise AgentError(
        f"{framework.requirement} requires Python >= {need[0]}.{need[1]} (its Requires-Python); none on PATH: "
        f"install one and pass --python PATH"
    )


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AgentError(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])[-500:]
        raise AgentError(f"{what} failed (exit {done.returncode}): {tail}")


def _version(env: Path, framework: Framework) -> str:
    code = "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))"
    done = subprocess.run(
        [str(env_python(env)), "-c", code, framework.dist], capture_output=True, text=True, timeout=60, check=False
    )
    version = done.stdout.strip()
    if done.returncode != 0 or not version:
        raise AgentError(f"{framework.name}: installed, but its version cannot be read: {done.stderr.strip()[-300:]}")
    return version
