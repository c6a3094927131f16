"""Where strict and compat differ, pinned on small crafted repos (both profiles asserted).

The task is tests/fixtures/parity/mini-task (stdlib, port 8097, 5 golden tests, one of which
skips when /stats answers 404, like upstream's "not implemented" skips). Each case is the
mini oracle plus a twist from tests/fixtures/parity/<case>/; "broken" cases run
tests/fixtures/hostile/broken_server.py, which answers HTTP 500 to everything, so an honest
grade is 0/5. References are to docs/upstream.md (§2.x rules,
W-numbered weak points). compat must reproduce upstream's numbers, quirks included; strict
must give the number the repo deserves.
"""

from __future__ import annotations

import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge.scoring.result import ProfileResult, ScoreResult
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.types import ScoreRequest
from bridge.tasks.model import load_task

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TASK_DIR = FIXTURES / "parity" / "mini-task"
N = 5  # golden tests of the mini task

CASES = (
    "oracle",
    "alive_no_port",
    "conftest_forces_pass",
    "conftest_skips_all",
    "golden_skip",
    "extra_agent_tests",
    "pytest_exit_dead_service",
    "stray_passed_text",
    "daemonise",
)


@pytest.fixture(scope="module")
def parity(docker_client, tmp_path_factory):
    task = load_task(TASK_DIR)
    base = tmp_path_factory.mktemp("parity")

    def run(name: str) -> tuple[ScoreResult, list[str]]:
        repo = base / name / "repo"
        shutil.copytree(task.solution_dir, repo)
        shutil.copyfile(FIXTURES / "hostile" / "broken_server.py", repo / "broken_server.py")
        if name != "oracle":
            shutil.copytree(FIXTURES / "parity" / name, repo, dirs_exist_ok=True)
        run_id = f"test-parity-{name.replace('_', '-')}"
        result = score_repo(
            task,
            repo,
            ScoreRequest(profile="both", use_cache=False, output_dir=base / name / "out", run_id=run_id),
            ScoreOptions(client=docker_client),
        )
        left = docker_client.containers.list(
            all=True, filters={"label": ["rgbridge.owner=rgbridge", f"rgbridge.run_id={run_id}"]}
        )
        return result, [c.name for c in left]

    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="parity-score")
    futures: dict[str, Future] = {name: pool.submit(run, name) for name in CASES}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _both(parity, name: str) -> tuple[ProfileResult, ProfileResult]:
    result, leftovers = parity[name].result(timeout=900)
    assert leftovers == [], leftovers
    return result.profile("strict"), result.profile("compat")


def test_oracle_control(parity) -> None:
    """Control: on an honest, complete repo the two profiles agree (5/5, DSR true)."""
    strict, compat = _both(parity, "oracle")
    for p in (strict, compat):
        assert p.outcome == "scored" and p.dsr.success
        assert (p.pass_at_1.passed, p.pass_at_1.total, p.pass_at_1.score) == (N, N, 1.0)


def test_process_alive_without_port(parity) -> None:
    """Upstream §2.5 step 5 / W7: after the readiness loop a still-alive PID counts as deployed
    even though the port never opened, so compat DSR is true and the tests run (and fail:
    0/5, outcome scored). Strict DSR requires an HTTP answer on the port: false, deploy_failed,
    every golden test not_run."""
    strict, compat = _both(parity, "alive_no_port")
    assert compat.dsr.success and compat.dsr.message == "Service started successfully"
    assert compat.outcome == "scored"
    assert (compat.pass_at_1.passed, compat.pass_at_1.failed, compat.pass_at_1.total) == (0, N, N)
    assert not strict.dsr.success and strict.outcome == "deploy_failed"
    assert (strict.pass_at_1.total, strict.pass_at_1.not_run, strict.pass_at_1.score) == (N, N, 0.0)


def test_agent_conftest_forcing_passes(parity) -> None:
    """W2: golden tests are merged into the agent's tests/ (Dockerfile.python step 4), so an
    agent conftest.py survives where the golden suite has none and its hook rewrites every
    report to passed: compat 5/5 on a service that answers 500 to everything. Strict runs the
    golden suite alone in the tester: 0/5."""
    strict, compat = _both(parity, "conftest_forces_pass")
    assert (compat.pass_at_1.passed, compat.pass_at_1.total, compat.pass_at_1.score) == (N, N, 1.0)
    assert (strict.pass_at_1.passed, strict.pass_at_1.failed, strict.pass_at_1.total) == (0, N, N)
    assert strict.pass_at_1.score == 0.0


def test_agent_conftest_skipping_everything(parity) -> None:
    """§2.6 pytest parser: skipped is ignored and total = passed + failed + errors, so a conftest
    that skips every item gives compat total 0, score 0.0 — and W10: upstream's average leaves
    total-0 repos out of the Pass@1 denominator, so the broken repo escapes its zero. Strict
    never loads the agent conftest and counts all 5 collected items: 0/5."""
    strict, compat = _both(parity, "conftest_skips_all")
    assert compat.dsr.success
    assert (compat.pass_at_1.passed, compat.pass_at_1.failed, compat.pass_at_1.errors) == (0, 0, 0)
    assert compat.pass_at_1.total == 0 and compat.pass_at_1.score == 0.0
    assert (strict.pass_at_1.passed, strict.pass_at_1.total) == (0, N)
    assert strict.pass_at_1.failed == N


def test_golden_skip_counts_as_not_passed_in_strict_only(parity) -> None:
    """W10 "skips are free": the golden /stats test skips on 404 (a missing feature). Upstream
    ignores skipped items: compat 4/4 = 1.0. Strict's denominator is the collected count and a
    skip is not a pass: 4/5 = 0.8 with skipped = 1."""
    strict, compat = _both(parity, "golden_skip")
    assert (compat.pass_at_1.passed, compat.pass_at_1.total, compat.pass_at_1.score) == (4, 4, 1.0)
    assert compat.pass_at_1.skipped == 0  # upstream always reports 0
    assert (strict.pass_at_1.passed, strict.pass_at_1.skipped, strict.pass_at_1.total) == (4, 1, N)
    assert strict.pass_at_1.score == 0.8
    skipped = [t for t in strict.tests if t.outcome == "skipped"]
    assert [t.nodeid for t in skipped] == ["tests/test_mini.py::test_stats_counts_items"]


def test_extra_agent_test_files(parity) -> None:
    """W2: agent-only files in tests/ survive the merge and are collected, so 10 trivially
    passing agent tests enter compat's count: 10 passed + 5 failed = 10/15. Strict ignores
    them (golden suite only): 0/5."""
    strict, compat = _both(parity, "extra_agent_tests")
    assert (compat.pass_at_1.passed, compat.pass_at_1.failed, compat.pass_at_1.total) == (10, N, 15)
    assert compat.pass_at_1.score == round(10 / 15, 4)
    assert (strict.pass_at_1.passed, strict.pass_at_1.total) == (0, N)
    assert not any("test_agent_extra" in t.nodeid for t in strict.tests)


def test_pytest_exit_from_agent_conftest_on_dead_service(parity) -> None:
    """W10: a conftest that calls pytest.exit when the service is down leaves no summary counts
    (§2.6: total 0), so compat reports zero tests (and upstream's average drops the repo).
    Strict: deploy_failed and 0/5, all not_run, as the golden suite's count is the denominator."""
    strict, compat = _both(parity, "pytest_exit_dead_service")
    assert not compat.dsr.success and compat.outcome == "deploy_failed"
    assert compat.pass_at_1.total == 0 and compat.pass_at_1.passed == 0
    assert strict.outcome == "deploy_failed"
    assert (strict.pass_at_1.total, strict.pass_at_1.not_run, strict.pass_at_1.passed) == (N, N, 0)


def test_stray_passed_text_from_the_service(parity) -> None:
    """W9 + §2.5 note: the service's stdout shares the TEST section and the parser keeps the last
    line matching `(\\d+)\\s+passed`, so a service printing "99 passed" gives compat 99 passed
    next to pytest's own "5 failed": 99/104. Strict grades JUnit XML: 0/5."""
    strict, compat = _both(parity, "stray_passed_text")
    assert compat.pass_at_1.passed == 99 and compat.pass_at_1.failed == N
    assert compat.pass_at_1.total == 99 + N and compat.pass_at_1.score == round(99 / 104, 4)
    assert (strict.pass_at_1.passed, strict.pass_at_1.total, strict.pass_at_1.score) == (0, N, 0.0)


def test_start_script_that_daemonises(parity) -> None:
    """W7: upstream's readiness loop (§2.5 step 4a) fails as soon as the start.sh PID is gone,
    so a start.sh that backgrounds the server and exits is a false negative: compat DSR false,
    deploy_failed. The daemon here listens only after 2.5 s, which makes this deterministic; with
    a daemon that binds at once the upstream outcome is a race (the exited start.sh can still be
    an unreaped zombie that `kill -0` sees while iteration 1's curls find the port). The tests
    still run (phase 2) against a service that is still starting, so compat's count is not
    pinned beyond its total. Strict asks whether the port answers: DSR true, 5/5, scored."""
    strict, compat = _both(parity, "daemonise")
    assert not compat.dsr.success and compat.outcome == "deploy_failed"
    assert compat.dsr.message == "Service failed to start within 15s"
    assert compat.pass_at_1.total == N
    assert strict.dsr.success and strict.outcome == "scored"
    assert (strict.pass_at_1.passed, strict.pass_at_1.total) == (N, N)
