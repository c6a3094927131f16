"""The lanes of the suite (tests/conftest.py): a test that needs the Docker engine or an agent
CLI, by its fixtures or its marker, is in the one pytest-xdist group that scripts/test.sh runs on a
single worker, one test after the other; every other test is in no group (any worker takes it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ENGINE_GROUP, REPO_ROOT

PROBE = """
import json
import json
import os
from pathlib import Path

import pytest


@pytest.fixture()
def docker_client():  # stands in for the engine's: the lane follows from the fixture's name
    return None


@pytest.fixture()
def through_the_engine(docker_client):
    return docker_client


def _note(request):
    groups = [m.args[0] for m in request.node.iter_markers("xdist_group")]
    lanes = sorted(m for m in ("docker", "agent_cli") if request.node.get_closest_marker(m))
    with open(os.environ["NOTES"], "a") as fh:
        fh.write(json.dumps([request.node.name, lanes, groups]) + "\\n")


def test_engine_by_fixture(request, docker_client):
    _note(request)


def test_engine_through_another_fixture(request, through_the_engine):
    _note(request)


@pytest.mark.agent_cli
def test_cli_by_marker(request):
    _note(request)


def test_neither(request):
    _note(request)
"""


def test_engine_and_cli_tests_share_one_xdist_group_and_no_other_test_is_in_it(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "test_probe.py").write_text(textwrap.dedent(PROBE))
    notes = tmp_path / "notes.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RGBRIDGE_TEST_TMP", "PYTEST_XDIST"))}
    env.update(NOTES=str(notes), PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "--rootdir", str(probe), str(probe / "test_probe.py")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    seen = {name: (lanes, groups) for name, lanes, groups in map(json.loads, notes.read_text().splitlines())}
    assert seen == {
        "test_engine_by_fixture": (["docker"], [ENGINE_GROUP]),
        "test_engine_through_another_fixture": (["docker"], [ENGINE_GROUP]),
        "test_cli_by_marker": (["agent_cli"], [ENGINE_GROUP]),
        "test_neither": ([], []),
    }
