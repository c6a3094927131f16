"""`scripts/test.sh` (the README's test command) runs the engine/CLI tests and the rest as two
pytest runs at once. The rest runs in a copy of the checkout, so its reads of the tasks' golden
files are never an engine test's session's contamination (bridge/sessions/contamination.py watches
the files themselves); a failure of either run, and a run that collects nothing, fail the command.

Run here against a stand-in interpreter that records where and how pytest was started."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

STUB = """#!/bin/bash
# a stand-in .venv/bin/python: no engine, and pytest records its lane and answers its code
if [ "$1" = "-c" ]; then exit 1; fi
if [ "$1 $2" = "-m pytest" ]; then
  lane=rest; case "$*" in *"-m docker or agent_cli"*) lane=engine;; esac
  golden=tasks/t/tests/test_golden.py
  echo "$lane|$PWD|${PYTHONPATH:-}|$(stat -c %i "$golden")|$(readlink .venv)" >>"$RECORD"
  if [ "$lane" = engine ]; then exit "$ENGINE_RC"; else exit "$REST_RC"; fi
fi
exit 0
"""


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "scripts" / "test.sh", root / "scripts" / "test.sh")
    (root / "scripts" / "setup.sh").write_text("exit 0\n")
    (root / "tasks" / "t" / "tests").mkdir(parents=True)
    (root / "tasks" / "t" / "tests" / "test_golden.py").write_text("def test_x():\n    pass\n")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB)
    python.chmod(0o755)
    return root


def _run(checkout: Path, engine: int, rest: int, *args: str) -> tuple[int, list[list[str]]]:
    record = checkout.parent / "record"
    record.unlink(missing_ok=True)
    env = {**os.environ, "RECORD": str(record), "ENGINE_RC": str(engine), "REST_RC": str(rest)}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        ["bash", "scripts/test.sh", *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=60
    )
    lines = record.read_text().splitlines() if record.exists() else []
    return done.returncode, [line.split("|") for line in lines]


def test_the_rest_runs_in_a_copy_of_the_checkout(checkout: Path) -> None:
    rc, runs = _run(checkout, 0, 0)
    assert rc == 0
    by_lane = {r[0]: r for r in runs}
    assert set(by_lane) == {"engine", "rest"}
    engine, rest = by_lane["engine"], by_lane["rest"]
    assert Path(engine[1]) == checkout
    copy = Path(rest[1])
    assert copy != checkout and not copy.is_relative_to(checkout)
    assert rest[2] == str(copy)  # the copy's code is what the rest imports
    assert rest[3] != engine[3]  # the golden file the rest reads is another file than the engine's
    assert rest[4] == str(checkout / ".venv")  # the copy uses the checkout's environment
    assert not copy.exists()  # and goes when the command ends


@pytest.mark.parametrize(
    ("engine", "rest", "args", "expected"),
    [
        (1, 0, (), 1),
        (0, 1, (), 1),
        (0, 5, (), 5),  # a half that collects nothing checks nothing
        (5, 0, ("-k", "x"), 0),  # narrowed by arguments: one empty half is fine
        (5, 5, ("-k", "x"), 5),
    ],
)
def test_either_run_failing_fails_the_command(
    checkout: Path, engine: int, rest: int, args: tuple[str, ...], expected: int
) -> None:
    rc, runs = _run(checkout, engine, rest, *args)
    assert len(runs) == 2
    assert rc == expected
