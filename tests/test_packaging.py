"""Installable for real: the wheel carries the shipped tasks and the bridge keeps its folders in
user data dirs (bridge/locations.py), never in its install folder."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import setuptools

from bridge import locations

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_package_list_matches_the_source_tree() -> None:
    # pyproject lists packages by hand (tasks/ is mapped to rgbridge_tasks); a new subpackage
    # left out of the list would be missing from the wheel.
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(setuptools.find_packages(str(REPO_ROOT), include=["bridge*", "mcp_server*"]))
    assert set(config["packages"]) == found | {"rgbridge_tasks"}
    assert config["package-dir"] == {"rgbridge_tasks": "tasks"}


def test_defaults_follow_the_environment_and_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("RGBRIDGE_RECORDINGS", "RGBRIDGE_HOME", "RGBRIDGE_CACHE", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert locations.default_recordings_dir() == tmp_path / "home/.local/share/rgbridge/recordings"
    assert locations.cache_dir() == tmp_path / "home/.cache/rgbridge"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the spec says: ignore relative values
    assert locations.default_recordings_dir() == tmp_path / "xdg/rgbridge/recordings"
    assert locations.cache_dir() == tmp_path / "home/.cache/rgbridge"
    monkeypatch.setenv("RGBRIDGE_HOME", str(tmp_path / "rg"))
    assert locations.default_recordings_dir() == tmp_path / "rg/recordings"
    monkeypatch.setenv("RGBRIDGE_RECORDINGS", str(tmp_path / "recs"))
    assert locations.default_recordings_dir() == tmp_path / "recs"


def test_checkout_reads_its_own_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RGBRIDGE_TASKS", raising=False)
    assert locations.shipped_tasks_dir() == REPO_ROOT / "tasks"


@pytest.mark.docker
def test_wheel_installs_finds_its_tasks_and_runs_the_demo(docker_client) -> None:
    """Build a wheel, install it in a fresh venv, run `tasks list` and the demo from outside the
    checkout; the script fails if anything appears in the install folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHON"] = sys.executable
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "wheel_smoke.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS: Pass@1 = 1.0 in every profile" in proc.stdout
    assert "wheel smoke: ok" in proc.stdout
