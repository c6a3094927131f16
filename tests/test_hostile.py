"""Hostile repos against the scoring engine (SPEC §7: tampering cannot raise a score or harm the host).

Each fixture is the kv-ledger oracle plus a twist (tests/fixtures/hostile/<case>/ is laid over a
copy of tasks/kv-ledger/solution). Cheats that try to *raise* a score run on a broken service
(tests/fixtures/hostile/broken_server.py answers 500 to everything), so an honest grade is 0 and
any pass is the cheat working; cheats that could *lower* a score run on the working oracle.
Every case asserts that none of its containers remains after `score_repo` returns.

All cases are started at once on a small thread pool (module fixture) and each test waits for
its own; the deploy-failure cases use a shortened startup timeout (STARTUP) to stay fast.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.scoring.result import ProfileResult, ScoreResult
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.run.workdir import LOG_CAP_BYTES
from bridge.scoring.types import ScoreRequest
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hostile"
STARTUP = 8  # seconds: the startup timeout of the deploy-failure cases (the task says 20)
GOLDEN_TOTAL = 35


@dataclass
class Case:
    overlay: str | None
    profile: str = "strict"
    startup: int | None = None
    prepare: Callable[[Path, Path], None] | None = None  # (repo, scratch dir)


@dataclass
class Outcome:
    result: ScoreResult
    out: Path
    seconds: float
    leftovers: list[str]
    scratch: Path
    rss_growth_kb: int

    def p(self, name: str = "strict") -> ProfileResult:
        return self.result.profile(name)

    def log(self, name: str, profile: str = "strict") -> str:
        rel = self.p(profile).logs.get(name)
        assert rel, f"no {name} log for {profile}: {self.p(profile).logs}"
        return (self.out / rel).read_text(encoding="utf-8", errors="replace")


def _with_startup(task: Task, seconds: int) -> Task:
    timeouts = task.manifest.timeouts.model_copy(update={"startup": seconds})
    return task.model_copy(update={"manifest": task.manifest.model_copy(update={"timeouts": timeouts})})


def _prepare_symlinks(repo: Path, scratch: Path) -> None:
    secret_dir = scratch / "host-secret"
    secret_dir.mkdir()
    (secret_dir / "secret.txt").write_text(f"HOST-SECRET-{uuid.uuid4().hex}\n", encoding="utf-8")
    (repo / "leak_file").symlink_to(secret_dir / "secret.txt")
    (repo / "leak_dir").symlink_to(secret_dir, target_is_directory=True)
    (repo / "up").symlink_to("../..", target_is_directory=True)


def _prepare_write_through(repo: Path, scratch: Path) -> None:
    """Agent files that are symlinks to host files the engine later writes over."""
    victims = scratch / "victims"
    victims.mkdir()
    for name in ("readme.txt", "conftest.txt"):
        (victims / name).write_text(f"untouched {name}\n", encoding="utf-8")
    (repo / "README.md").unlink(missing_ok=True)
    (repo / "README.md").symlink_to(victims / "readme.txt")  # strict restores the task README
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "tests" / "conftest.py").symlink_to(victims / "conftest.txt")  # compat merges golden tests


def _prepare_fifo(repo: Path, scratch: Path) -> None:
    """A named pipe (and a unix socket) in the tree: copying must skip them, never block."""
    os.mkfifo(repo / "pipe")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(repo / "agent.sock"))
    sock.close()


CASES: dict[str, Case] = {
    "a_conftest_forces_pass": Case("a_conftest_forces_pass"),
    "b_pytest_ini_plugin": Case("b_pytest_ini_plugin"),
    "b_pyproject_addopts": Case("b_pyproject_addopts"),
    "c_sitecustomize": Case("c_sitecustomize"),
    "d_fake_summary": Case("d_fake_summary"),
    "e_fork_bomb": Case("e_fork_bomb", startup=STARTUP),
    "f_memory_hog": Case("f_memory_hog", startup=STARTUP),
    "g_never_binds": Case("g_never_binds", startup=STARTUP),
    "h_network_view": Case("h_network_view"),
    "i_log_flood": Case("i_log_flood", profile="both"),
    "j_daemonise": Case("j_daemonise"),
    "k_symlinks": Case("k_symlinks", prepare=_prepare_symlinks),
    "k_write_through": Case(None, profile="both", prepare=_prepare_write_through),
    "l_special_files": Case(None, prepare=_prepare_fifo),
}


def _leftovers(client, run_id: str) -> list[str]:
    found = client.containers.list(
        all=True, filters={"label": ["rgbridge.owner=rgbridge", f"rgbridge.run_id={run_id}"]}
    )
    return [c.name for c in found]


@pytest.fixture(scope="module")
def hostile(docker_client, tasks_dir: Path, tmp_path_factory):
    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    base = tmp_path_factory.mktemp("hostile")

    def run(name: str, case: Case) -> Outcome:
        scratch = base / name
        repo = scratch / "repo"
        shutil.copytree(task.solution_dir, repo)
        shutil.copyfile(FIXTURES / "broken_server.py", repo / "broken_server.py")
        if case.overlay:
            shutil.copytree(FIXTURES / case.overlay, repo, dirs_exist_ok=True)
        if case.prepare:
            case.prepare(repo, scratch)
        the_task = _with_startup(task, case.startup) if case.startup else task
        run_id = f"test-hostile-{name.replace('_', '-')}"
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        result = score_repo(
            the_task,
            repo,
            ScoreRequest(profile=case.profile, use_cache=False, output_dir=scratch / "out", run_id=run_id),
            ScoreOptions(client=docker_client),
        )
        seconds = time.monotonic() - started
        rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
        return Outcome(result, scratch / "out", seconds, _leftovers(docker_client, run_id), scratch, rss_growth)

    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="hostile-score")
    futures: dict[str, Future[Outcome]] = {name: pool.submit(run, name, case) for name, case in CASES.items()}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _get(hostile, name: str) -> Outcome:
    outcome = hostile[name].result(timeout=900)
    assert outcome.leftovers == [], f"containers left behind: {outcome.leftovers}"
    return outcome


def _assert_zero_on_broken_service(o: Outcome) -> None:
    """The broken service deploys (answers HTTP 500) and passes nothing."""
    p = o.p()
    assert p.outcome == "scored", (p.outcome, p.error, p.dsr.message)
    assert p.dsr.success
    assert p.pass_at_1.total == GOLDEN_TOTAL
    assert p.pass_at_1.passed == 0 and p.pass_at_1.score == 0.0, p.pass_at_1
    assert {t.outcome for t in p.tests} <= {"failed", "error"}
    assert len(p.tests) == GOLDEN_TOTAL


def test_a_agent_conftest_forcing_passes_cannot_raise_strict(hostile) -> None:
    """tests/conftest.py + root conftest.py rewrite every report to passed; an agent test file
    always passes. Strict runs the golden suite alone in the tester: 0/35."""
    o = _get(hostile, "a_conftest_forces_pass")
    _assert_zero_on_broken_service(o)
    assert not any("test_agent_passes" in t.nodeid for t in o.p().tests)


def test_b_root_pytest_ini_plugin_cannot_raise_strict(hostile) -> None:
    """Root pytest.ini / tox.ini / setup.cfg load a pass-forging plugin via addopts `-p`."""
    _assert_zero_on_broken_service(_get(hostile, "b_pytest_ini_plugin"))


def test_b_pyproject_addopts_cannot_lower_strict(hostile) -> None:
    """pyproject `[tool.pytest.ini_options] addopts` with -k/--deselect/-p no:python would run
    nothing; strict pins its own config, so the oracle still scores 35/35."""
    p = _get(hostile, "b_pyproject_addopts").p()
    assert p.outcome == "scored"
    assert p.pass_at_1.passed == p.pass_at_1.total == GOLDEN_TOTAL


def test_c_sitecustomize_cannot_raise_strict(hostile) -> None:
    """sitecustomize.py at the root (on PYTHONPATH) and a usercustomize planted in $HOME by
    start.sh patch pytest's reports; they live in the service container, tests in the tester."""
    _assert_zero_on_broken_service(_get(hostile, "c_sitecustomize"))


def test_d_fake_summary_lines_cannot_raise_strict(hostile) -> None:
    """The service prints '35 passed' lines all along; strict grades JUnit XML, not log text."""
    o = _get(hostile, "d_fake_summary")
    _assert_zero_on_broken_service(o)
    assert "35 passed" in o.log("service")  # the forgery really happened


def test_e_fork_bomb_is_bounded(hostile) -> None:
    o = _get(hostile, "e_fork_bomb")
    p = o.p()
    assert p.outcome == "deploy_failed", (p.outcome, p.error, p.dsr.message)
    assert p.pass_at_1.passed == 0 and p.pass_at_1.total == GOLDEN_TOTAL
    assert o.seconds < STARTUP + 90, o.seconds
    # The host still forks.
    assert subprocess.run(["true"], timeout=10).returncode == 0


def test_f_memory_hog_is_oom_killed(hostile) -> None:
    o = _get(hostile, "f_memory_hog")
    p = o.p()
    assert p.outcome == "deploy_failed", (p.outcome, p.error, p.dsr.message)
    assert p.oom_killed is True
    assert "out of memory" in p.dsr.message
    assert p.pass_at_1.passed == 0
    assert o.seconds < STARTUP + 90, o.seconds


def test_g_never_binding_service_fails_within_startup_timeout(hostile) -> None:
    o = _get(hostile, "g_never_binds")
    p = o.p()
    assert p.outcome == "deploy_failed"
    assert not p.dsr.success and "did not answer" in p.dsr.message
    assert p.pass_at_1.total == GOLDEN_TOTAL and p.pass_at_1.not_run == GOLDEN_TOTAL
    assert STARTUP <= o.seconds < STARTUP + 45, o.seconds


def test_h_service_sees_loopback_only_and_scores_normally(hostile) -> None:
    o = _get(hostile, "h_network_view")
    p = o.p()
    assert p.outcome == "scored" and p.pass_at_1.passed == GOLDEN_TOTAL
    log = o.log("service")
    m = re.search(r"NETIFS: (.*)", log)
    assert m, log[:2000]
    assert m.group(1).split() == ["lo"]
    routes = log.split("ROUTES_BEGIN", 1)[1].split("ROUTES_END", 1)[0].strip().splitlines()
    assert len(routes) == 1 and routes[0].startswith("Iface"), routes  # header only: no route at all


def test_i_log_flood_is_capped(hostile) -> None:
    o = _get(hostile, "i_log_flood")
    p = o.p()
    assert p.outcome == "scored" and p.pass_at_1.passed == GOLDEN_TOTAL
    for rel in p.logs.values():
        assert (o.out / rel).stat().st_size <= LOG_CAP_BYTES + 4096, rel
    assert "flood" in o.log("service")
    assert "truncated" in o.log("service")
    # The bridge did not buffer the flood (peak RSS grew by far less than the volume produced).
    assert o.rss_growth_kb < 300 * 1024, o.rss_growth_kb
    assert o.seconds < 120, o.seconds
    # compat grades a bounded digest of the live log streams, so the flood (more than the
    # engine's log rotation keeps) neither loses upstream's markers nor its counts.
    # (Whether DSR_RESULT= still starts its line depends on how the flood interleaves with it on
    # the shared stdout, exactly as upstream; the markers and the count line must survive.)
    c = o.p("compat")
    assert c.dsr.message != "No DSR markers found in container output", c.dsr
    assert c.pass_at_1.passed == GOLDEN_TOTAL, c.pass_at_1
    assert (o.out / c.logs["container"]).stat().st_size <= LOG_CAP_BYTES + 4096


def test_j_daemonising_start_script_deploys(hostile) -> None:
    """start.sh backgrounds the server with nohup and exits 0: strict DSR asks whether the port
    answers, so this deploys (upstream's liveness rule calls it a failure, W7; see test_parity)."""
    p = _get(hostile, "j_daemonise").p()
    assert p.dsr.success, p.dsr.message
    assert p.outcome == "scored" and p.pass_at_1.passed == GOLDEN_TOTAL


def test_k_symlinks_are_not_followed_on_copy_in(hostile) -> None:
    """leak_file/leak_dir point at a host file/dir, `up` at ../..: the container gets the links,
    never the host content; the tree still scores normally."""
    o = _get(hostile, "k_symlinks")
    p = o.p()
    assert p.outcome == "scored" and p.pass_at_1.passed == GOLDEN_TOTAL
    secret = (o.scratch / "host-secret" / "secret.txt").read_text(encoding="utf-8").strip()
    log = o.log("service")
    assert "LINKS_BEGIN" in log
    assert secret not in log
    assert re.search(r"leak_file -> .*host-secret/secret\.txt", log), log[:2000]
    assert re.search(r"up -> \.\./\.\.", log)
    for rel in p.logs.values():
        assert secret not in (o.out / rel).read_text(encoding="utf-8", errors="replace")


def test_k_engine_never_writes_through_agent_symlinks(hostile) -> None:
    """README.md and tests/conftest.py are symlinks to host files. Strict restores the task
    README and compat merges the golden tests (which include a conftest.py) into a copy of the
    repo: neither may write through the links onto the host."""
    o = _get(hostile, "k_write_through")
    victims = o.scratch / "victims"
    assert (victims / "readme.txt").read_text(encoding="utf-8") == "untouched readme.txt\n"
    assert (victims / "conftest.txt").read_text(encoding="utf-8") == "untouched conftest.txt\n"
    for name in ("strict", "compat"):
        assert o.p(name).outcome == "scored", (name, o.p(name).outcome, o.p(name).error)
        assert o.p(name).pass_at_1.passed == GOLDEN_TOTAL, (name, o.p(name).pass_at_1)


def test_l_special_files_are_skipped_not_fatal(hostile) -> None:
    """A FIFO and a unix socket in the repo: the snapshot copy skips them (as the copy-in tar
    does) and the oracle still scores; neither a hang nor a raw OSError escaping score_repo."""
    p = _get(hostile, "l_special_files").p()
    assert p.outcome == "scored" and p.pass_at_1.passed == GOLDEN_TOTAL


def test_host_is_fine_after_all_cases(hostile, docker_client) -> None:
    for future in hostile.values():
        future.exception(timeout=900)  # wait for every case, whatever its own test says
    assert subprocess.run(["true"], timeout=10).returncode == 0
    with open("/proc/meminfo", encoding="ascii") as fh:
        available_kb = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
    assert available_kb > 512 * 1024
    ours = docker_client.containers.list(
        all=True, filters={"label": ["rgbridge.owner=rgbridge", f"rgbridge.pid={os.getpid()}"]}
    )
    assert ours == [], [c.name for c in ours]
