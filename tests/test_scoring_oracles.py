"""End-to-end scoring of the shipped oracles, an empty repo and an uninstallable repo.

SPEC §7: oracle solutions score Pass@1 = 1.0 with DSR true under both profiles; an empty repo
scores 0 with `deploy_failed`; a failed dependency install is `build_failed` with pip's own
error text (never swallowed, unlike upstream W13). Each repo is scored once per module (both
profiles in one `score_repo` call) and several properties are asserted on the result.
"""

from __future__ import annotations

import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge.scoring.result import ScoreResult
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.types import ScoreRequest
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

pytestmark = pytest.mark.docker

ORACLE_TASKS = ("kv-ledger", "library-api", "word-duel")
# A requirement pip rejects while parsing: the install fails without asking any index.
BAD_REQUIREMENT = "this is not a requirement ==== !!!\n"


def _leftovers(client, run_id: str) -> list[str]:
    found = client.containers.list(
        all=True, filters={"label": ["rgbridge.owner=rgbridge", f"rgbridge.run_id={run_id}"]}
    )
    return [c.name for c in found]


class Scored:
    """A score_repo result plus where its files went and what it left behind."""

    def __init__(self, result: ScoreResult, out: Path, leftovers: list[str]) -> None:
        self.result, self.out, self.leftovers = result, out, leftovers


@pytest.fixture(scope="module")
def catalog(tasks_dir: Path) -> Catalog:
    return Catalog.from_options(tasks_dir)


@pytest.fixture(scope="module")
def scored(docker_client, catalog: Catalog, tmp_path_factory):
    """Start every scoring of this module at once (2 at a time); tests wait on their own."""
    base = tmp_path_factory.mktemp("oracles")
    empty = base / "empty-repo"
    empty.mkdir()
    broken_reqs = base / "bad-requirements"
    shutil.copytree(catalog.get("kv-ledger").solution_dir, broken_reqs)
    (broken_reqs / "requirements.txt").write_text(BAD_REQUIREMENT, encoding="utf-8")

    jobs: dict[str, tuple[Task, Path]] = {
        tid: (catalog.get(tid), catalog.get(tid).solution_dir) for tid in ORACLE_TASKS
    }
    jobs["empty"] = (catalog.get("kv-ledger"), empty)
    jobs["bad-requirements"] = (catalog.get("kv-ledger"), broken_reqs)

    def run(name: str, task: Task, repo: Path) -> Scored:
        out = base / f"out-{name}"
        run_id = f"test-oracles-{name}"
        result = score_repo(
            task,
            repo,
            ScoreRequest(profile="both", use_cache=False, output_dir=out, run_id=run_id),
            ScoreOptions(client=docker_client),
        )
        return Scored(result, out, _leftovers(docker_client, run_id))

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="oracle-score")
    futures: dict[str, Future[Scored]] = {name: pool.submit(run, name, *job) for name, job in jobs.items()}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("task_id", ORACLE_TASKS)
def test_oracle_scores_full_marks_in_both_profiles(scored, task_id: str) -> None:
    s = scored[task_id].result(timeout=900)
    assert s.leftovers == []
    assert set(s.result.profiles) == {"strict", "compat"}
    for name, p in s.result.profiles.items():
        assert p.outcome == "scored", (name, p.outcome, p.error, p.dsr.message)
        assert p.dsr.success, (name, p.dsr.message)
        assert p.pass_at_1.score == 1.0, (name, p.pass_at_1)
        assert p.pass_at_1.total > 0 and p.pass_at_1.passed == p.pass_at_1.total
        assert p.pass_at_1.failed == p.pass_at_1.errors == 0
        assert p.api_coverage is not None and p.api_coverage.score == 1.0, (name, p.api_coverage)
        assert p.api_coverage.total_apis > 0


@pytest.mark.parametrize("task_id", ORACLE_TASKS)
def test_oracle_strict_details(scored, task_id: str) -> None:
    s = scored[task_id].result(timeout=900)
    strict = s.result.profile("strict")
    # Dynamic AC probes every README endpoint against the running service.
    assert strict.dynamic_api_coverage is not None
    assert strict.dynamic_api_coverage.score == 1.0, [
        (e.method, e.path, e.status, e.evidence) for e in strict.dynamic_api_coverage.endpoints if not e.implemented
    ]
    # One result per collected golden item, all passed; the denominator is the collected count.
    collect_log = (s.out / strict.logs["collect"]).read_text(encoding="utf-8")
    collected = [ln for ln in collect_log.splitlines() if "::" in ln and not ln[0].isspace()]
    assert len(strict.tests) == strict.pass_at_1.total == len(collected)
    assert {t.outcome for t in strict.tests} == {"passed"}
    assert len({t.nodeid for t in strict.tests}) == len(strict.tests)
    assert strict.pass_at_1.not_run == 0 and strict.pass_at_1.skipped == 0
    # Same suite, same counts: compat's log-parsed total agrees on an honest repo.
    assert s.result.profile("compat").pass_at_1.total == strict.pass_at_1.total
    assert (s.out / "result.json").is_file()


def test_empty_repo_scores_zero_deploy_failed(scored) -> None:
    s = scored["empty"].result(timeout=900)
    assert s.leftovers == []
    for name, p in s.result.profiles.items():
        assert p.outcome == "deploy_failed", (name, p.outcome, p.error)
        assert not p.dsr.success
        assert p.pass_at_1.passed == 0 and p.pass_at_1.score == 0.0
    strict = s.result.profile("strict")
    assert strict.dsr.message == "No service entry point found"
    assert strict.pass_at_1.total == 35 and strict.pass_at_1.not_run == 35
    assert s.result.profile("compat").dsr.message == "No service entry point found"


def test_uninstallable_requirements_are_build_failed(scored) -> None:
    s = scored["bad-requirements"].result(timeout=900)
    assert s.leftovers == []
    for name, p in s.result.profiles.items():
        assert p.outcome == "build_failed", (name, p.outcome, p.error)
        assert not p.dsr.success and p.pass_at_1.score == 0.0
        assert p.build_error and "Invalid requirement" in p.build_error, (name, p.build_error)
        log = s.out / p.logs["build"]
        assert log.is_file(), (name, p.logs)
        assert "Invalid requirement" in log.read_text(encoding="utf-8")
    assert s.result.profile("compat").exit_code == -3  # upstream's build-failure exit code
