"""The scoring engine: one entry point over both profiles, with a result cache.

`score_repo(task, repo_dir, request, options)` stages a copy of the repo, computes its snapshot
hash and, for each profile the `ScoreRequest` asks for, either returns the cached result for
(snapshot hash, task hash, grader version, profile) or runs the profile as the `ScoreOptions`
say. Profiles run in parallel threads. Engine or bridge faults become
the outcome `infra_error` (flagged for re-run), never an exception escaping a worker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import docker
from docker.errors import DockerException
from requests import RequestException

from bridge.errors import ScoringError
from bridge.fs.hashing import tree_hash
from bridge.locations import cache_dir
from bridge.scoring.java.layers import MavenSources
from bridge.scoring.result import GRADER_VERSION, ProfileResult, ScoreResult
from bridge.scoring.run.backend import BACKENDS, Backend, ScoringJob
from bridge.scoring.run.runner import LiveRuns, LocalBackend, infra_result, node_context, run_one_profile
from bridge.scoring.run.sweep import sweep
from bridge.scoring.run.workdir import LogSink, stage_repo
from bridge.scoring.sandbox.docker_client import get_client
from bridge.scoring.types import PROFILES, Profile, ProgressFn, ScoreRequest
from bridge.tasks.model import Task

#: Languages both profiles can score (Python: bridge/scoring/python/; Java: bridge/scoring/java/).
SCORABLE_LANGS = ("python", "java")


def profiles_for(profile: str) -> tuple[Profile, ...]:
    if profile == "both":
        return PROFILES
    for name in PROFILES:
        if profile == name:
            return (name,)
    raise ScoringError(f"unknown profile {profile!r} (choose strict, compat or both)")


def cache_key(snapshot_hash: str, task_hash: str, profile: str) -> str:
    raw = f"{snapshot_hash}\0{task_hash}\0{GRADER_VERSION}\0{profile}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


class ResultCache:
    """Profile results by cache key, with their log files, under `<cache>/results/<key>/`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir() / "results"
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> tuple[ProfileResult, Path] | None:
        entry = self.root / key
        try:
            result = ProfileResult.model_validate_json((entry / "profile.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return result, entry

    def put(self, key: str, result: ProfileResult, log_dir: Path) -> None:
        if result.outcome == "infra_error":
            return  # never cache a fault that is not the agent's: it must be re-run
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.root))
        if log_dir.is_dir():
            shutil.copytree(log_dir, tmp / "logs")
        (tmp / "profile.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
        final = self.root / key
        if final.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            return
        try:
            os.replace(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreOptions:
    """How a score runs (what it scores is its `ScoreRequest`, bridge/scoring/types.py); each
    default is the local engine's."""

    #: wheels offered to installs before the index (`rgbridge score --wheelhouse`)
    wheelhouse: Path | None = None
    #: where Java builds resolve their dependencies (bridge/scoring/java/layers.py)
    maven: MavenSources | None = None
    progress: ProgressFn | None = None
    #: the engine's client (default: bridge/scoring/sandbox/docker_client.py)
    client: docker.DockerClient | None = None
    #: the result cache (default: `<cache>/results`)
    cache: ResultCache | None = None
    #: where the profiles that missed the cache run (default: this machine)
    backend: Backend | None = None


def score_repo(task: Task, repo_dir: Path, request: ScoreRequest, options: ScoreOptions | None = None) -> ScoreResult:
    """Score one repo against one task as `request` asks, run as `options` say.

    Staging, the snapshot hash, the result cache and result.json stay here whatever the backend;
    the backend only runs the profiles that missed the cache (one job per profile).
    """
    options = options or ScoreOptions()
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise ScoringError(f"{repo_dir}: not a directory")
    say = options.progress or (lambda _msg: None)
    names = profiles_for(request.profile)
    use_cache = request.use_cache
    backend = options.backend or LocalBackend(options.client)
    cache = options.cache or ResultCache()
    out_root = Path(request.output_dir)
    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rgbridge-stage-") as tmp:
        staged = Path(tmp) / "snapshot"
        stage_repo(repo_dir, staged)
        snapshot_hash = tree_hash(staged, frozenset())
        results: dict[str, ProfileResult] = {}
        jobs: list[ScoringJob] = []
        for name in names:
            hit = cache.get(cache_key(snapshot_hash, task.content_hash, name)) if use_cache else None
            if hit is None:
                jobs.append(
                    ScoringJob(
                        task=task,
                        snapshot=staged,
                        snapshot_hash=snapshot_hash,
                        profile=name,
                        log_dir=out_root / "logs" / name,
                        run_id=request.run_id,
                        wheelhouse=options.wheelhouse,
                        maven=options.maven,
                        progress=say,
                    )
                )
                continue
            result, entry = hit
            dest = out_root / "logs" / name
            if (entry / "logs").is_dir():
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(entry / "logs", dest)
            results[name] = result
            say(f"{name}: cached result")
        if jobs:
            done = backend.run_jobs(jobs)
            for job in jobs:
                results[job.profile] = done[job.profile]
                if use_cache:
                    cache.put(cache_key(snapshot_hash, task.content_hash, job.profile), done[job.profile], job.log_dir)
    score = ScoreResult(
        task_id=task.id,
        task_hash=task.content_hash,
        snapshot_hash=snapshot_hash,
        lang=task.lang,
        port=task.port,
        framework=task.framework,
        profiles={n: results[n] for n in names},
    )
    (out_root / "result.json").write_text(score.model_dump_json(indent=2), encoding="utf-8")
    return score


def deploy_check(
    task: Task,
    repo_dir: Path,
    *,
    output_dir: Path,
    wheelhouse: Path | None = None,
    progress: ProgressFn | None = None,
    client: docker.DockerClient | None = None,
    maven: MavenSources | None = None,
) -> ProfileResult:
    """Practice mode: does the repo deploy (strict DSR)? No golden file enters any container and
    no test runs, so a practice check cannot contaminate Pass@1; never cached with scores."""
    client = client or get_client()
    run_id = f"practice-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    LiveRuns.add(run_id)
    ctx = node_context(run_id, wheelhouse=wheelhouse, progress=progress)
    logs = LogSink(Path(output_dir) / "logs" / "practice")
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="rgbridge-practice-") as tmp:
            staged = Path(tmp) / "snapshot"
            stage_repo(Path(repo_dir), staged)
            try:
                result = run_one_profile(
                    client,
                    task,
                    staged,
                    "strict",
                    ctx=ctx,
                    logs=logs,
                    progress=progress or (lambda _m: None),
                    maven=maven,
                    deploy_only=True,
                )
            except (DockerException, RequestException, ScoringError, OSError, RuntimeError) as exc:
                result = infra_result("strict", exc, logs, started)
    finally:
        sweep(client, run_id=run_id)
        LiveRuns.discard(run_id)
    return result


def default_scorer(
    options: ScoreOptions | None = None,
) -> Callable[[Task, Path, ScoreRequest, ProgressFn], ScoreResult]:
    """A `bridge.sessions.models.Scorer` backed by the Docker engine, run as `options` say (the
    progress each call is given replaces theirs)."""
    base = options or ScoreOptions()

    def scorer(task: Task, repo_dir: Path, request: ScoreRequest, progress: ProgressFn) -> ScoreResult:
        result = score_repo(task, repo_dir, request, replace(base, progress=progress))
        if request.snapshot_hash is not None and result.snapshot_hash != request.snapshot_hash:
            # Both hash the same tree with the same rules; record a mismatch rather than hide it.
            (request.output_dir / "snapshot-hash-note.txt").write_text(
                f"recorder tree hash {request.snapshot_hash}\nscoring tree hash {result.snapshot_hash}\n",
                encoding="utf-8",
            )
        return result

    return scorer


def make_backend(name: str, *, ray_address: str | None = None) -> Backend:
    """The backend named on the command line (`--backend`, `--ray-address`)."""
    if name == "local":
        if ray_address:
            raise ScoringError("--ray-address only applies with --backend ray")
        return LocalBackend()
    if name == "ray":
        from bridge.scoring.run.ray_backend import RayBackend  # lazy: Ray is an optional extra

        return RayBackend(address=ray_address)
    raise ScoringError(f"unknown backend {name!r} (choose {' or '.join(BACKENDS)})")
