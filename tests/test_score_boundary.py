"""The typed boundary of the scoring engine: `score_repo(task, repo_dir, ScoreRequest, ScoreOptions)`
and `evaluate(catalog, EvaluationRequest, EvaluationOptions)` carry every field to where it acts.

A recording backend stands in for the engine here (fast, no Docker): it sees the jobs the engine
makes; the same paths run against the real engine in tests/test_parity.py, test_ray_backend.py and
test_java_flow.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from bridge.errors import ScoringError
from bridge.scoring.result import DSRResult, PassAt1, ProfileResult
from bridge.scoring.run.backend import ScoringJob
from bridge.scoring.run.engine import ResultCache, ScoreOptions, score_repo
from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate
from bridge.scoring.types import ScoreRequest
from bridge.tasks.catalog import Catalog


class RecordingBackend:
    """Answers every job with a full score and keeps the jobs it was given."""

    name = "recording"

    def __init__(self) -> None:
        self.jobs: list[ScoringJob] = []

    def run_jobs(self, jobs: Sequence[ScoringJob]) -> dict[str, ProfileResult]:
        self.jobs.extend(jobs)
        for job in jobs:
            job.log_dir.mkdir(parents=True, exist_ok=True)
            if job.progress is not None:
                job.progress(f"{job.profile}: scored")
        return {
            job.profile: ProfileResult(
                profile=job.profile,
                outcome="scored",
                dsr=DSRResult(success=True, message="ok"),
                pass_at_1=PassAt1.from_counts(2, 0, 0),
            )
            for job in jobs
        }

    def default_workers(self) -> int:
        return 1

    def activity(self) -> dict[str, int]:
        return {}

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_score_repo_takes_what_the_request_asks_and_runs_as_the_options_say(tmp_path: Path, tasks_dir: Path) -> None:
    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    repo = tmp_path / "repo"
    shutil.copytree(task.solution_dir or task.root, repo)
    backend, lines = RecordingBackend(), []
    request = ScoreRequest(output_dir=tmp_path / "out", run_id="boundary-1", profile="strict", use_cache=False)
    options = ScoreOptions(backend=backend, cache=ResultCache(tmp_path / "cache"), progress=lines.append)
    result = score_repo(task, repo, request, options)
    assert [(j.profile, j.run_id) for j in backend.jobs] == [("strict", "boundary-1")]
    assert list(result.profiles) == ["strict"] and lines == ["strict: scored"]
    assert json.loads((tmp_path / "out" / "result.json").read_text())["snapshot_hash"] == result.snapshot_hash
    assert not list((tmp_path / "cache").iterdir())  # use_cache=False: nothing stored

    again = score_repo(task, repo, ScoreRequest(output_dir=tmp_path / "out2", profile="both"), options)
    assert [j.profile for j in backend.jobs[1:]] == ["strict", "compat"]
    assert backend.jobs[1].run_id.startswith("score-")  # a lone score's own run id
    assert again.snapshot_hash == result.snapshot_hash


def test_evaluate_takes_a_request_and_options(tmp_path: Path, tasks_dir: Path) -> None:
    catalog = Catalog.from_options(tasks_dir)
    preds = tmp_path / "preds"
    for task_id in ("kv-ledger", "word-duel"):
        task = catalog.get(task_id)
        shutil.copytree(task.solution_dir or task.root, preds / task_id)
    backend, seen, done = RecordingBackend(), [], []
    request = EvaluationRequest(
        predictions_dir=preds,
        output_dir=tmp_path / "eval",
        run_id="boundary",
        profile="compat",
        only=["word-duel"],
        use_cache=False,
        metadata={"model_name": "m"},
    )
    options = EvaluationOptions(
        scoring=ScoreOptions(backend=backend, cache=ResultCache(tmp_path / "cache")),
        progress=lambda task_id, message: seen.append((task_id, message)),
        on_done=lambda task_id, entry: done.append(task_id),
    )
    report, _writer, plan = evaluate(catalog, request, options)
    assert [t.id for t, _ in plan.todo] == ["word-duel"]
    assert [(j.task.id, j.profile, j.run_id) for j in backend.jobs] == [("word-duel", "compat", "boundary-word-duel")]
    assert seen == [("word-duel", "compat: scored")] and done == ["word-duel"]
    meta = json.loads(report.read_text())["metadata"]
    assert meta["backend"] == "recording" and meta["model_name"] == "m" and meta["profile"] == "compat"


def test_a_runs_progress_is_its_own_not_the_scores() -> None:
    """Each line of a run names its task: a score's progress given as well would be dropped."""
    with pytest.raises(ScoringError, match="EvaluationOptions.progress"):
        EvaluationOptions(scoring=ScoreOptions(progress=print))
