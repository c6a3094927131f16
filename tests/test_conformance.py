"""`rgbridge conformance`: control repos, the table, and a real run over fixture tasks.

The Docker test runs the CLI over a folder holding two of the strict-quirk fixture tasks
(`addopts_q`: a normal suite; `runner_class`: an ungradable one) and checks every cell the issue
asks for, then runs it again to show the cached collections and results make a rerun fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.scoring.run.conformance import (
    NOT_FOUND_SERVER,
    ConformanceRow,
    make_control_repos,
    row_dict,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "strict_quirks"


def test_control_repos(tmp_path: Path) -> None:
    repos = make_control_repos(tmp_path)
    assert list(repos["empty"].iterdir()) == []
    assert (repos["404"] / "start.sh").read_text().startswith("#!/bin/sh")
    assert "404" in NOT_FOUND_SERVER and (repos["404"] / "requirements.txt").read_text() == ""
    compile(NOT_FOUND_SERVER, "server.py", "exec")


def test_row_counts_infra_errors_and_renders(capsys) -> None:
    from bridge.commands.conformance import render

    row = ConformanceRow(
        task="django-rest-framework-crud",
        quirks=["ini[tool:pytest]-ignored"],
        strict_items=2,
        outcomes={
            "empty": {"strict": "deploy_failed 0/2", "compat": "deploy_failed 0/2"},
            "404": {"strict": "infra_error", "compat": "scored 0/2"},
        },
    )
    assert row.infra_errors == 1 and row_dict(row)["strict_items"] == 2
    render([row], 1.0)
    out = capsys.readouterr().out
    assert "django-rest-framework-crud" in out and "ini[tool:pytest]-ignored" in out  # markup escaped


@pytest.mark.docker
def test_conformance_cli_over_fixture_tasks(docker_client, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for name in ("addopts_q", "runner_class"):
        shutil.copytree(FIXTURES / name, tasks / name)
    # A private cache: the first run must really collect and score (a warm machine cache from
    # an earlier run would make both runs cache hits and the timing comparison meaningless).
    env = {**os.environ, "COLUMNS": "200", "RGBRIDGE_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "bridge.cli",
        "conformance",
        "--task-dir",
        str(tasks),
        "--work-dir",
        str(tmp_path / "work"),
        "--json",
    ]
    started = time.monotonic()
    first = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, env=env)
    first_seconds = time.monotonic() - started
    assert first.returncode == 0, first.stderr[-2000:]
    rows = {r["task"]: r for r in json.loads(first.stdout)["tasks"]}

    normal = rows["quirk-addopts-q"]
    assert normal["strict_items"] == 3 and "addopts:-q" in normal["quirks"]
    assert normal["outcomes"]["empty"]["strict"] == "deploy_failed 0/3"
    assert normal["outcomes"]["empty"]["compat"].startswith("deploy_failed")
    # deployed, every route 404: only `test_missing_is_404` (which expects a 404) passes
    assert normal["outcomes"]["404"]["strict"] == "scored 1/3"
    assert not normal["outcomes"]["404"]["compat"].startswith("infra_error")

    broken = rows["quirk-runner-class"]
    assert broken["outcomes"]["empty"]["strict"] == "task_error" and "collects no test items" in broken["task_error"]
    assert "runner-class" in broken["quirks"]
    assert not any(
        c.startswith("infra_error") for r in rows.values() for per in r["outcomes"].values() for c in per.values()
    )

    started = time.monotonic()
    again = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["outcomes"] for r in json.loads(again.stdout)["tasks"]] == [r["outcomes"] for r in rows.values()]
    assert time.monotonic() - started < first_seconds  # cached collections and results
