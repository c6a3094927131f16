"""`scripts/setup.sh` installs into the checkout's `.venv` and never into the system's Python: run
against stand-ins for every program it calls (no network, no root), the system interpreter is
only ever asked to create the venv, and every pip install goes through `.venv/bin/python`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LOGGING_STUB = '#!/bin/sh\necho "{name} $*" >> "{log}"\n'
#: What setup.sh looks for or calls besides the interpreters: all present and content here.
TOOLS = ("debootstrap", "git", "tmux", "bwrap", "chromium", "docker", "apt-get")


def _checkout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of scripts/setup.sh in an empty checkout, a PATH of stubs, and the log they write."""
    checkout, bin_dir, log = tmp_path / "checkout", tmp_path / "bin", tmp_path / "calls.log"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "scripts" / "setup.sh", checkout / "scripts" / "setup.sh")
    shutil.copy2(REPO_ROOT / "pyproject.toml", checkout / "pyproject.toml")
    bin_dir.mkdir()
    for name in TOOLS:
        (bin_dir / name).write_text(LOGGING_STUB.format(name=name, log=log))
    # the system interpreter: `-m venv DIR` makes a venv whose python only logs what it is asked
    venv_python = LOGGING_STUB.format(name="venv-python", log=log)
    (bin_dir / "python3").write_text(
        LOGGING_STUB.format(name="system-python3", log=log)
        + 'if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then\n'
        + '  mkdir -p "$3/bin" && cat > "$3/bin/python" <<\'PY\'\n'
        + venv_python
        + "PY\n"
        + '  chmod +x "$3/bin/python"\n'
        + "fi\n"
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return checkout, bin_dir, log


def _setup(checkout: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = f"{bin_dir}:/usr/bin:/bin"  # the stubs first; sh, mkdir, cat, id from the system
    env = {"PATH": path, "HOME": str(checkout), "RGBRIDGE_SKIP_CHROMIUM": "0"}
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "setup.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="setup.sh is a bash script")
def test_setup_installs_into_the_checkouts_venv_only(tmp_path: Path) -> None:
    checkout, bin_dir, log = _checkout(tmp_path)
    first = _setup(checkout, bin_dir)
    assert first.returncode == 0, first.stderr
    calls = log.read_text().splitlines()
    system = [c for c in calls if c.startswith("system-python3")]
    assert system == ["system-python3 -m venv .venv"], calls  # the system Python only makes the venv
    installs = [c for c in calls if " pip " in f" {c} "]
    assert installs and all(c.startswith("venv-python -m pip install") for c in installs), calls
    assert not any(c.startswith("apt-get") for c in calls), calls  # every tool was there already

    # a second run with the venv in place: the system interpreter is not called at all
    log.unlink()
    again = _setup(checkout, bin_dir)
    assert again.returncode == 0, again.stderr
    calls = log.read_text().splitlines()
    assert not [c for c in calls if c.startswith("system-python3")], calls
    assert [c for c in calls if c.startswith("venv-python -m pip install")], calls


@pytest.mark.skipif(shutil.which("bash") is None, reason="setup.sh is a bash script")
def test_demo_mode_installs_the_project_without_extras_once(tmp_path: Path) -> None:
    """Issue 41: the demo installs only what it uses, and only when pyproject.toml changed."""
    checkout, bin_dir, log = _checkout(tmp_path)
    for name in ("chromium", "tmux", "bwrap"):  # what only the tests need: missing, and not asked for
        (bin_dir / name).unlink()
    first = _setup(checkout, bin_dir, "--demo")
    assert first.returncode == 0, first.stderr
    calls = log.read_text().splitlines()
    installs = [c for c in calls if " pip " in f" {c} "]
    assert installs == ["venv-python -m pip install -q --disable-pip-version-check -e ."], calls
    assert not any(c.startswith("apt-get") for c in calls), calls
    assert "done in" in first.stderr  # each step says how long it took

    log.unlink()
    again = _setup(checkout, bin_dir, "--demo")
    assert again.returncode == 0, again.stderr
    assert not log.exists() or not [c for c in log.read_text().splitlines() if " pip " in f" {c} "]

    # a changed pyproject.toml installs again; the test command always installs the test extras
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n# changed\n")
    assert _setup(checkout, bin_dir, "--demo").returncode == 0
    assert [c for c in log.read_text().splitlines() if c.endswith("-e .")], log.read_text()
    for name in ("chromium", "tmux", "bwrap"):
        (bin_dir / name).write_text(LOGGING_STUB.format(name=name, log=log))
        (bin_dir / name).chmod(0o755)
    log.unlink()
    assert _setup(checkout, bin_dir).returncode == 0
    assert [c for c in log.read_text().splitlines() if c.endswith("-e .[test]")], log.read_text()
