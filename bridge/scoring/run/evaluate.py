"""`evaluate`: score a folder of repos from any harness in parallel, upstream-style report out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bridge.errors import ScoringError
from bridge.scoring.run.backend import JobCancelled
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.run.prepare import SetsAhead, ahead_from_env
from bridge.scoring.run.reporting import RunWriter, load_previous
from bridge.scoring.sandbox.docker_client import get_client
from bridge.scoring.types import ProfileChoice, ScoreRequest, TaskProgressFn
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task


@dataclass
class EvaluationPlan:
    todo: list[tuple[Task, Path]] = field(default_factory=list)
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # folders that name no known task


def plan(
    catalog: Catalog, predictions_dir: Path, *, output_dir: Path, resume: bool, only: list[str] | None = None
) -> EvaluationPlan:
    if not predictions_dir.is_dir():
        raise ScoringError(f"{predictions_dir}: predictions folder does not exist")
    result = EvaluationPlan()
    folders = sorted(p for p in predictions_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    selected: list[tuple[Task, Path]] = []
    for folder in folders:
        if folder.name not in catalog.tasks:
            result.skipped.append(folder.name)
            continue
        if only and folder.name not in only:
            continue
        selected.append((catalog.tasks[folder.name], folder))
    unknown = [name for name in only or [] if name not in catalog.tasks]
    if unknown:
        raise ScoringError("; ".join(f"--repo-names: unknown task {n!r}{catalog.did_you_mean(n)}" for n in unknown))
    if resume:
        result.resumed = load_previous(output_dir, tasks=[t.id for t, _ in selected])
    result.todo = [(t, p) for t, p in selected if t.id not in result.resumed]
    if not selected and not result.resumed:
        raise ScoringError(nothing_to_score(catalog, predictions_dir, result.skipped))
    return result


def nothing_to_score(catalog: Catalog, predictions_dir: Path, skipped: list[str]) -> str:
    """Why a predictions folder gives nothing to score, with the close task names of its folders."""
    if not skipped:
        return f"{predictions_dir}: no repo folders to score (one subfolder per task, named after its id)"
    hints = [f"{name}{catalog.did_you_mean(name)}" for name in skipped[:5]]
    more = f"; … {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return (
        f"{predictions_dir}: no folder names a known task, nothing scored (folders must be named after "
        f"task ids): {'; '.join(hints)}{more}"
    )


@dataclass(frozen=True, kw_only=True)
class EvaluationRequest:
    """What a run scores: the repo folders of `predictions_dir` (one per task, named after its
    id), and where and under which run its report goes."""

    predictions_dir: Path
    output_dir: Path
    #: the report's run id; None makes a fresh one (bridge/scoring/run/reporting.py)
    run_id: str | None = None
    profile: ProfileChoice = "both"
    #: only these task ids (`--repo-names`); None: every folder that names a known task
    only: Sequence[str] | None = None
    #: adopt the results an earlier run wrote into `output_dir`, score the rest
    resume: bool = False
    use_cache: bool = True
    #: added to the report's metadata
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class EvaluationOptions:
    """How a run scores: how many repos at once, how each score runs (`scoring`: wheelhouse,
    Maven sources, backend, ...) and who hears of each task's progress and result."""

    workers: int = 1
    scoring: ScoreOptions = field(default_factory=ScoreOptions)
    #: a progress line of one task; it takes the place of `scoring.progress`, which must be None
    progress: TaskProgressFn | None = None
    #: called once per scored task with its report entry
    on_done: Callable[[str, dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        if self.scoring.progress is not None:
            raise ScoringError("a run's progress names its task: give EvaluationOptions.progress, not scoring.progress")


def evaluate(
    catalog: Catalog, request: EvaluationRequest, options: EvaluationOptions | None = None
) -> tuple[Path, RunWriter, EvaluationPlan]:
    """Score every repo folder named after a known task; write the run report; return its path.

    `options.scoring.backend` decides where the scoring jobs run (default: this machine); the
    report is written here either way, and `resume` adopts earlier results whichever backend
    produced them.
    """
    options = options or EvaluationOptions()
    workers, backend, progress, profile = options.workers, options.scoring.backend, options.progress, request.profile
    output_dir = request.output_dir
    if workers < 1:
        raise ScoringError("--workers must be at least 1")
    output_dir.mkdir(parents=True, exist_ok=True)
    only = list(request.only) if request.only is not None else None
    the_plan = plan(catalog, request.predictions_dir, output_dir=output_dir, resume=request.resume, only=only)
    writer = RunWriter(output_dir, request.run_id)
    writer.adopt(the_plan.resumed)
    started = time.monotonic()
    lock = threading.Lock()
    primary = "compat" if profile in ("both", "compat") else "strict"

    ahead = sets_ahead(the_plan.todo, request, options, workers)

    def one(index: int, task: Task, repo: Path) -> dict[str, Any]:
        say = (lambda msg: progress(task.id, msg)) if progress else None
        task_out = output_dir / "tasks" / writer.run_id / task.id
        t0 = time.monotonic()
        if ahead is not None:
            ahead.starting(index)
        try:
            result = score_repo(
                task,
                repo,
                ScoreRequest(
                    output_dir=task_out,
                    run_id=f"{writer.run_id}-{task.id}",
                    profile=profile,
                    use_cache=request.use_cache,
                ),
                replace(options.scoring, progress=say),
            )
        finally:
            if ahead is not None:
                ahead.finished(index)
        for prof in result.profiles.values():
            prof.elapsed_seconds = prof.elapsed_seconds or round(time.monotonic() - t0, 3)
        entry = writer.record(result, primary)
        entry_out = dict(entry)
        with lock:
            if options.on_done:
                options.on_done(task.id, entry_out)
        return entry_out

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rgbridge-eval") as pool:
        futures = {pool.submit(one, i, task, repo): task.id for i, (task, repo) in enumerate(the_plan.todo)}
        try:
            for future in as_completed(futures):
                future.result()
        except KeyboardInterrupt:
            for f in futures:
                f.cancel()
            if backend is not None:  # remote jobs stop and their containers are swept; nothing is recorded
                backend.cancel()
            raise
        except JobCancelled:
            raise KeyboardInterrupt from None
        finally:
            if ahead is not None:
                ahead.close()
    meta = {
        "predictions_dir": str(request.predictions_dir),
        "total_elapsed_seconds": round(time.monotonic() - started, 2),
        "workers": workers,
        "profile": profile,
        "resumed": sorted(the_plan.resumed),
        "backend": backend.name if backend else "local",
    }
    meta.update(request.metadata)
    return writer.finalize(meta), writer, the_plan


def sets_ahead(
    todo: Sequence[tuple[Task, Path]], request: EvaluationRequest, options: EvaluationOptions, workers: int
) -> SetsAhead | None:
    """With one worker on this machine, the next repos' dependency sets are built while a repo's
    service and tests run (bridge/scoring/run/prepare.py); None when that does not apply: more
    workers overlap repos already, a remote backend prepares on its own nodes."""
    ahead = ahead_from_env()
    if workers != 1 or options.scoring.backend is not None or ahead == 0 or len(todo) < 2:
        return None
    try:
        client = options.scoring.client or get_client()
    except ScoringError:  # no engine: each job says so itself (LocalBackend.run_jobs)
        return None
    return SetsAhead(
        client,
        todo,
        profile=request.profile,
        use_cache=request.use_cache,
        wheelhouse=options.scoring.wheelhouse,
        cache=options.scoring.cache,
        ahead=ahead,
        progress=options.progress,
    )
