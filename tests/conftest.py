"""Shared fixtures. Tests that need the Docker engine take `docker_client`.

Without an engine those tests skip with the reason; with RGBRIDGE_REQUIRE_DOCKER=1 (set by CI)
a missing engine is a failure instead, so CI can never go green on skipped integration tests.

The test lanes follow from the fixtures: a test that takes the engine (`docker_client`, directly or
through another fixture) is marked `docker`, one that takes `agent_cli` (the finder of an agent
CLI's binary) is marked `agent_cli`, so `scripts/test.sh --fast` (``-m "not docker and not
agent_cli"``) runs exactly the tests that need neither.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Fixture repos (hostile conftests, agent test files) are data for the scorer, never our tests.
collect_ignore = ["fixtures"]

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS_DIR = REPO_ROOT / "tasks"

#: The temp folder of this test run (set below); an xdist worker's is a folder of its own inside
#: the controller's.
RUN_TMP_ENV = "RGBRIDGE_TEST_TMP"
#: The xdist worker whose temp folder RUN_TMP_ENV names (unset in the controller and a plain run).
RUN_TMP_WORKER_ENV = "RGBRIDGE_TEST_TMP_WORKER"


def _use_tmp(folder: str) -> None:
    os.chmod(folder, 0o1777)
    os.environ[RUN_TMP_ENV] = folder
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # gettempdir() caches its first answer


def _private_system_tmp() -> None:
    """Give every process this test run starts a temp folder of the run's own (TMPDIR).

    The golden-copy checks (tests/golden_leaks.py, tests/agent_clis.py) look at what appeared in
    "the system temp folder" while a test ran; on a machine where another run scores beside this
    one, the shared /tmp holds that run's scoring folders too, and they were flagged as ours.
    With a private TMPDIR the folder the checks read holds this run's entries only. Mode 1777 as
    /tmp, for the tests that run as an unprivileged user.

    Each pytest-xdist worker gets a folder of its own inside the run's (`--fast` runs one worker
    per core): the checks of a test must see the folders of its own worker only, never those of a
    test running beside it on another worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not os.environ.get(RUN_TMP_ENV):
        _use_tmp(tempfile.mkdtemp(prefix="rgbt-"))
        os.environ["RGBRIDGE_TEST_TMP_OWNER"] = str(os.getpid())
    if worker and os.environ.get(RUN_TMP_WORKER_ENV) != worker:
        # the controller's folder (inherited) holds one folder per worker; it goes with the run
        _use_tmp(tempfile.mkdtemp(prefix=f"{worker}-", dir=os.environ[RUN_TMP_ENV]))
        os.environ[RUN_TMP_WORKER_ENV] = worker


_private_system_tmp()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run's temp folder goes with a passing run; a failing run's stays for a look."""
    if os.environ.get("RGBRIDGE_TEST_TMP_OWNER") != str(os.getpid()):
        return
    if exitstatus == 0:
        shutil.rmtree(os.environ[RUN_TMP_ENV], ignore_errors=True)
    else:
        print(f"\nthis run's temp folder (kept): {os.environ[RUN_TMP_ENV]}")


def _require_docker() -> bool:
    return os.environ.get("RGBRIDGE_REQUIRE_DOCKER", "") not in ("", "0", "false", "no")


#: Fixtures whose presence in a test's fixture closure puts it in a lane (pytest's
#: ``item.fixturenames`` holds every fixture a test needs, also through other fixtures).
LANE_FIXTURES = {"docker": {"docker_client"}, "agent_cli": {"agent_cli", "paper_agent"}}


#: How pytest marks a test whose parametrisation is empty (it would skip it and check nothing).
EMPTY_PARAMETER_SET = "got empty parameter set"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    empty = [
        item.nodeid
        for item in items
        if any(str(m.kwargs.get("reason", "")).startswith(EMPTY_PARAMETER_SET) for m in item.iter_markers("skip"))
    ]
    if empty:
        raise pytest.UsageError(f"tests with an empty parameter set check nothing: {', '.join(empty)}")
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in LANE_FIXTURES.items():
            if used & fixtures and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


#: A thread of a socketserver the test started (tests/loopback.py) that is still running after
#: the test: a loopback server left serving, or a request thread on a kept-alive connection, whose
#: handler would print into a later test when the connection breaks. Threads alive before the test
#: (a module's server) are not its doing; one that has just been shut down gets a moment to end.
_SERVER_THREADS = pytest.StashKey[set[threading.Thread]]()
SERVER_THREAD_GRACE_SECONDS = 5.0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from tests.loopback import server_threads_alive

    item.stash[_SERVER_THREADS] = set(server_threads_alive())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    from tests.loopback import server_threads_alive

    yield
    before = item.stash.get(_SERVER_THREADS, set())
    left = [thread for thread in server_threads_alive() if thread not in before]
    deadline = time.monotonic() + SERVER_THREAD_GRACE_SECONDS
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    names = [thread.name for thread in left if thread.is_alive()]
    if names:
        raise AssertionError(f"the test left HTTP server threads running (tests/loopback.py): {', '.join(names)}")


@pytest.fixture(scope="session")
def docker_client():
    from bridge.scoring.sandbox.docker_client import engine_available, get_client

    ok, reason = engine_available()
    if not ok:
        if _require_docker():
            pytest.fail(f"Docker engine required (RGBRIDGE_REQUIRE_DOCKER=1) but unavailable: {reason}")
        pytest.skip(f"no Docker engine: {reason}")
    return get_client()


@pytest.fixture(scope="session")
def agent_cli() -> Callable[[str], Path]:
    """``agent_cli("claude" | "codex")``: the CLI's binary, or a skip (a failure under
    RGBRIDGE_REQUIRE_AGENT_CLIS=1). A fixture rather than an import so the test is marked."""
    from tests.agent_clis import agent_cli as find

    return find


@pytest.fixture(scope="session")
def paper_agent() -> Callable[[str], Path]:
    """``paper_agent("qwen-agent" | "ms-agent" | "metagpt" | "deepcode")``: the Python of the
    framework's environment `rgbridge agents install NAME` built, or a skip; a failure when
    RGBRIDGE_REQUIRE_PAPER_AGENTS names it (a comma list, or 1 for all four). In the agent_cli lane."""
    from bridge.agents.adapters.registry import adapter

    def find(name: str) -> Path:
        required = os.environ.get("RGBRIDGE_REQUIRE_PAPER_AGENTS", "")
        wanted = required in ("1", "all") or name in required.split(",")
        installed = adapter(name).installed_binary
        found = installed() if installed is not None else None
        if found is None:
            message = f"{name}: no environment (rgbridge agents install {name})"
            if wanted:
                pytest.fail(message + " and RGBRIDGE_REQUIRE_PAPER_AGENTS asks for it")
            pytest.skip(message)
        return Path(found)

    return find


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """The scoring base image, built once (debootstrap + docker import) when the engine lacks it."""
    from bridge.scoring.images.base import ensure_base_image

    return ensure_base_image(docker_client)


@pytest.fixture()
def index_needed(docker_client) -> None:
    """Skips a test whose containers must reach the package index when they cannot."""
    from bridge.scoring.images.base import index_reachable_from_containers

    if not index_reachable_from_containers(docker_client):
        pytest.skip("containers cannot reach the package index here")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tasks_dir() -> Path:
    return TASKS_DIR


@pytest.fixture()
def wrong_uv(tmp_path) -> Path:
    """A folder holding a stand-in `uv` that installs a version the requirements forbid
    (six 1.15.0 for `six==1.16.0`): what pip's acceptance check must reject."""
    tools = tmp_path / "wrong-uv"
    tools.mkdir()
    fake = tools / "uv"
    fake.write_text("#!/bin/sh\npython -m pip install -q --progress-bar off six==1.15.0 && echo ' + six==1.15.0'\n")
    fake.chmod(0o755)
    return tools


@pytest.fixture()
def score_sets(docker_client):
    """``add(base, repo, task)``: the dependency sets a score of ``repo`` makes on ``base``
    (strict's, compat's) are removed after the test, tags and volumes, once their bytecode is
    compiled."""
    from docker.errors import ImageNotFound

    from bridge.scoring.images.sets import deps_image_tag, remove_volume, volume_for, wait_for_compiles
    from bridge.scoring.python.compat import compat_extras
    from bridge.scoring.run.workdir import requirements_of

    made: list[str] = []

    def add(base: str, repo: Path, task) -> None:
        reqs = requirements_of(repo)
        made.extend(
            [
                deps_image_tag(base, reqs, in_volume=True),
                deps_image_tag(base, reqs, compat_extras(task, repo), in_volume=True),
            ]
        )

    yield add
    wait_for_compiles()
    for tag in made:
        try:
            docker_client.images.remove(tag)  # by name: a set's tag sits on its base image
        except ImageNotFound:
            pass
        remove_volume(docker_client, volume_for(tag, "/opt/venv").name)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Headless Chromium's binary for the reports' real renders; skips without it (fails under
    RGBRIDGE_REQUIRE_CHROMIUM=1)."""
    from tests.helpers import find_chromium

    path = find_chromium()
    if path is None:
        if os.environ.get("RGBRIDGE_REQUIRE_CHROMIUM", "") not in ("", "0", "false", "no"):
            pytest.fail("chromium required (RGBRIDGE_REQUIRE_CHROMIUM=1) but not installed")
        pytest.skip("chromium not installed (apt-get install -y chromium); set RGBRIDGE_REQUIRE_CHROMIUM=1 to fail")
    return path


@pytest.fixture(autouse=True)
def private_scoring_slots(tmp_path_factory, monkeypatch) -> Path:
    """Scoring slots of this test's own (bridge/sessions/slots.py): an in-process grader of this
    process takes them, so a fake score never waits behind the engine scores other runs on the
    machine hold. Detached scoring processes are other processes: they keep the machine's."""
    from bridge.sessions import slots

    root = tmp_path_factory.mktemp("scoring-slots")
    monkeypatch.setattr(slots, "slots_dir", lambda: root)
    return root


@pytest.fixture()
def unprivileged_user() -> Iterator[str]:
    """A user of this test's own (no home, no privileges), removed with its processes after it:
    for the tests of the unprivileged sandbox path."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("needs root and useradd/runuser to create an unprivileged user")
    name = "rgbu" + secrets.token_hex(3)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)  # only this test's own user
        subprocess.run(["userdel", name], capture_output=True)
