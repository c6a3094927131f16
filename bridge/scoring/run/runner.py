"""Running scoring jobs in this process: one profile on a staged snapshot, on this machine's
Docker engine. Both backends use it: the local one in threads (`LocalBackend`), the Ray one on
whichever node a job lands (bridge/scoring/run/ray_backend.py).
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Protocol

import docker
from docker.errors import BuildError, DockerException, ImageNotFound
from requests import RequestException
from requests.exceptions import ReadTimeout, Timeout

from bridge.errors import ScoringError
from bridge.fs.files import pid_alive
from bridge.scoring.images.base import read_pip_index_settings_ahead
from bridge.scoring.images.disk import holding
from bridge.scoring.java.compat import run_java_compat
from bridge.scoring.java.layers import MavenSources
from bridge.scoring.java.plan import java_compat_plan, java_strict_plan
from bridge.scoring.java.strict import run_java_strict
from bridge.scoring.plan import ScoringPlan
from bridge.scoring.python.compat import run_compat
from bridge.scoring.python.plan import compat_plan, strict_plan
from bridge.scoring.python.strict import run_strict
from bridge.scoring.result import DSRResult, InfraReason, ProfileResult
from bridge.scoring.run.backend import ScoringJob
from bridge.scoring.run.profile_run import ProfileRun
from bridge.scoring.run.sweep import sweep
from bridge.scoring.run.workdir import LogSink, ScoreContext, SetTurns
from bridge.scoring.sandbox.docker_client import get_client
from bridge.scoring.sandbox.protocol import SandboxLimits
from bridge.scoring.types import PROFILES, Profile, ProgressFn
from bridge.tasks.model import Task

LABEL_PID = "rgbridge.pid"


class PlanBuilder(Protocol):
    """What a profile will do for a task, as data (bridge/scoring/plan.py)."""

    def __call__(self, task: Task, *, service_limits: SandboxLimits, deploy_only: bool = False) -> ScoringPlan: ...


@dataclass(frozen=True)
class ProfileKind:
    """One (language, profile): the plan builder and the runner that carries the plan out."""

    plan: PlanBuilder
    run: Callable[[ProfileRun], ProfileResult]


#: Every (language, profile) the bridge scores. Adding a language is a plan builder, image
#: preparation and a grader, and two rows here.
PROFILE_KINDS: dict[tuple[str, Profile], ProfileKind] = {
    ("python", "strict"): ProfileKind(strict_plan, run_strict),
    ("python", "compat"): ProfileKind(compat_plan, run_compat),
    ("java", "strict"): ProfileKind(java_strict_plan, run_java_strict),
    ("java", "compat"): ProfileKind(java_compat_plan, run_java_compat),
}


def profile_kind(task: Task, profile: str) -> ProfileKind:
    kind = PROFILE_KINDS.get((task.lang, profile))  # type: ignore[arg-type]
    if kind is None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} (strict or compat)")
        raise ValueError(f"no {profile} scoring for {task.lang} tasks")
    return kind


def plan_for(
    task: Task, profile: str, *, service_limits: SandboxLimits | None = None, deploy_only: bool = False
) -> ScoringPlan:
    """What the profile's runner will do for the task, as data (bridge/scoring/plan.py)."""
    limits = service_limits or SandboxLimits()
    return profile_kind(task, profile).plan(task, service_limits=limits, deploy_only=deploy_only)


def run_one_profile(
    client: docker.DockerClient,
    task: Task,
    repo_dir: Path,
    profile: Profile,
    *,
    ctx: ScoreContext,
    logs: LogSink,
    progress: ProgressFn,
    maven: MavenSources | None = None,
    deploy_only: bool = False,
) -> ProfileResult:
    """The (language, profile) row's plan, carried out by its runner on `repo_dir` (modified)."""
    kind = profile_kind(task, profile)
    plan = kind.plan(task, service_limits=ctx.service_limits, deploy_only=deploy_only)
    run = ProfileRun(client, task, repo_dir, profile, plan, ctx, logs, progress, maven=maven)
    return kind.run(run)


class LiveRuns:
    """Runs of this process: swept on exit and on SIGTERM, so an interrupted run leaves nothing."""

    _lock = threading.Lock()
    _runs: set[str] = set()
    _installed = False

    @classmethod
    def add(cls, run_id: str) -> None:
        with cls._lock:
            cls._runs.add(run_id)
            if not cls._installed:
                cls._installed = True
                atexit.register(cls.sweep_all)
                if threading.current_thread() is threading.main_thread():
                    previous = signal.getsignal(signal.SIGTERM)

                    def on_term(signum: int, frame: FrameType | None) -> None:
                        cls.sweep_all()
                        if callable(previous):
                            previous(signum, frame)
                        raise SystemExit(128 + signum)

                    signal.signal(signal.SIGTERM, on_term)

    @classmethod
    def discard(cls, run_id: str) -> None:
        with cls._lock:
            cls._runs.discard(run_id)

    @classmethod
    def sweep_all(cls) -> None:
        with cls._lock:
            runs = list(cls._runs)
            cls._runs.clear()
        if not runs:
            return
        try:
            client = get_client()
        except ScoringError:
            return
        for run_id in runs:
            sweep(client, run_id=run_id)


def sweep_stale(client: docker.DockerClient) -> int:
    """Remove labelled containers whose owning bridge process (same host) is gone."""
    removed = 0
    host = os.uname().nodename
    try:
        containers = client.containers.list(all=True, filters={"label": ["rgbridge.owner=rgbridge"]})
    except (DockerException, RequestException):
        return 0
    for container in containers:
        labels = container.labels or {}
        pid_text, owner_host = labels.get(LABEL_PID, ""), labels.get("rgbridge.host", "")
        if not pid_text.isdigit() or owner_host != host:
            continue
        if not pid_alive(int(pid_text)):
            try:
                container.remove(force=True, v=True)
                removed += 1
            except (DockerException, RequestException):
                pass
    return removed


_swept_once = False


def infra_reason(exc: BaseException) -> InfraReason:
    """What broke, from the exception a scoring job died of: the engine (unreachable, API
    errors), the disk (no space, the disk budget), the package index, an image (missing, failed
    to build), a timeout of the infrastructure (the engine's API not answering in time) or the
    bridge itself (anything else)."""
    from bridge.scoring.images.disk import DiskBudgetError

    text = f"{type(exc).__name__}: {exc}".lower()
    if isinstance(exc, DiskBudgetError) or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return "disk"
    if "no space left on device" in text or "disk quota" in text:
        return "disk"
    if isinstance(exc, (ReadTimeout, Timeout)) or "timed out" in text or "timeout" in text:
        return "timeout-infra"
    if isinstance(exc, (ImageNotFound, BuildError)) or "docker import" in text or "image" in text and "not" in text:
        return "image"
    if "package index" in text or "index-url" in text or "wheelhouse" in text:
        return "index"
    if isinstance(exc, (DockerException, RequestException)) or "engine" in text or "docker" in text:
        return "engine"
    return "bridge"


def infra_result(profile: str, exc: BaseException, logs: LogSink, started: float) -> ProfileResult:
    logs.write("infra_error.txt", "".join(traceback.format_exception(exc)))
    return ProfileResult(
        profile=profile,
        outcome="infra_error",
        infra_reason=infra_reason(exc),
        dsr=DSRResult(success=False, message=f"Evaluation error: {exc}"),
        error=f"{type(exc).__name__}: {exc}",
        exit_code=-99,
        logs=logs.names(),
        elapsed_seconds=round(time.monotonic() - started, 3),
    )


def node_context(
    run_id: str,
    *,
    wheelhouse: Path | None = None,
    progress: ProgressFn | None = None,
    turns: SetTurns | None = None,
) -> ScoreContext:
    """The scoring context of this process: containers carry its pid and host, so a process
    that dies leaves containers `sweep_stale` can recognise as orphans on that host."""
    return ScoreContext(
        run_id=run_id,
        wheelhouse=wheelhouse,
        image_progress=progress,
        extra_labels={LABEL_PID: str(os.getpid()), "rgbridge.host": os.uname().nodename},
        turns=turns or SetTurns(),
    )


def run_profile(
    client: docker.DockerClient,
    task: Task,
    snapshot: Path,
    name: Profile,
    *,
    ctx: ScoreContext,
    log_dir: Path,
    scratch: Path,
    maven: MavenSources | None = None,
    progress: ProgressFn | None = None,
) -> ProfileResult:
    """Run one profile on a private copy of a staged snapshot, on this machine's engine.

    Engine and bridge faults become `infra_error`; log paths in the result are `logs/<profile>/...`.
    """
    started = time.monotonic()
    logs = LogSink(log_dir)
    work = scratch / f"repo-{name}"  # each profile gets its own copy to modify
    shutil.copytree(snapshot, work, symlinks=True)
    try:
        with holding():  # the sets this profile uses stay in use (never evicted) until it ends
            result = run_one_profile(
                client, task, work, name, ctx=ctx, logs=logs, progress=progress or (lambda _m: None), maven=maven
            )
    except Exception as exc:  # any fault, ours or the engine's, is this job's infra_error, never the run's end
        result = infra_result(name, exc, logs, started)
    return result.model_copy(update={"logs": {k: f"logs/{v}" for k, v in logs.names().items()}})


class LocalBackend:
    """Profiles run in threads of this process on this machine's Docker engine (the default)."""

    name = "local"

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self._client = client

    def run_jobs(self, jobs: Sequence[ScoringJob]) -> dict[str, ProfileResult]:
        global _swept_once
        try:
            client = self._client or get_client()
        except ScoringError as exc:  # no engine: each job is the infrastructure's failure, re-run by --resume
            started = time.monotonic()
            return {job.profile: infra_result(job.profile, exc, LogSink(job.log_dir), started) for job in jobs}
        if any(job.task.lang == "python" and job.wheelhouse is None for job in jobs):
            read_pip_index_settings_ahead()  # a never-seen set's build needs them first
        if not _swept_once:
            _swept_once = True
            sweep_stale(client)
        run_ids = sorted({job.run_id for job in jobs})
        for run_id in run_ids:
            LiveRuns.add(run_id)
        try:
            with tempfile.TemporaryDirectory(prefix="rgbridge-work-") as scratch:
                turns = SetTurns([job.profile for job in jobs])

                def one(job: ScoringJob) -> ProfileResult:
                    ctx = node_context(job.run_id, wheelhouse=job.wheelhouse, progress=job.progress, turns=turns)
                    try:
                        return run_profile(
                            client,
                            job.task,
                            job.snapshot,
                            job.profile,
                            ctx=ctx,
                            log_dir=job.log_dir,
                            scratch=Path(scratch),
                            maven=job.maven,
                            progress=job.progress,
                        )
                    finally:
                        turns.done(job.profile)  # whatever happened, no profile waits for it now

                with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="rgbridge-profile") as pool:
                    return {job.profile: result for job, result in zip(jobs, pool.map(one, jobs), strict=True)}
        finally:
            for run_id in run_ids:
                sweep(client, run_id=run_id)
                LiveRuns.discard(run_id)

    def default_workers(self) -> int:
        return 1

    def activity(self) -> dict[str, int]:
        return {}

    def cancel(self) -> None:
        """Local jobs run in this process: its exit sweeps their containers (`LiveRuns`)."""

    def close(self) -> None:
        """Nothing to release: the Docker client is the process's shared one."""
