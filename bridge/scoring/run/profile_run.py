"""One profile run: what every profile runner (strict and compat, each language) shares — the
task, its plan, the scoring copy of the repo, the clock, the static API coverage measured before
anything touches the copy, the result's common fields (`finish`) and the plan's sandboxes.

A runner receives its `ProfileRun` (bridge/scoring/run/runner.py builds it from the
(language, profile) table) and only decides what its profile does: images, steps, grading.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import docker

from bridge.scoring import coverage
from bridge.scoring.plan import ScoringPlan, create_sandbox
from bridge.scoring.result import APICoverage, DSRResult, InfraReason, Outcome, PassAt1, ProfileResult, TestCaseResult
from bridge.scoring.run.workdir import ASSETS, LogSink, ScoreContext
from bridge.scoring.sandbox.protocol import Sandbox, SandboxRuntime
from bridge.scoring.types import Profile, ProgressFn
from bridge.tasks.model import Task

if TYPE_CHECKING:
    from bridge.scoring.java.layers import MavenSources

#: container name part of each sandbox role (`rgbridge.<run>.<part>.<token>`)
NAME_PARTS = {"service": "svc", "tester": "tst"}


@dataclass
class ProfileRun:
    """One profile scoring one task's repo copy; `repo_dir` is the runner's to modify."""

    client: docker.DockerClient
    task: Task
    repo_dir: Path
    profile: Profile
    plan: ScoringPlan
    ctx: ScoreContext
    logs: LogSink
    progress: ProgressFn
    #: where Java's dependency layers resolve from (None: the environment's); Python ignores it
    maven: MavenSources | None = None
    started: float = field(default_factory=time.monotonic)
    # Upstream computes AC on the host before anything else and keeps it whatever happens next.
    static_ac: APICoverage = field(init=False)
    _runtime: SandboxRuntime | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.static_ac = coverage.static_api_coverage(self.task.readme, self.repo_dir)

    @property
    def deploy_only(self) -> bool:
        """Practice mode: only DSR is measured and no golden file enters any sandbox."""
        return self.plan.deploy_only

    def finish(
        self,
        *,
        outcome: Outcome,
        dsr: DSRResult,
        pass_at_1: PassAt1 | None = None,
        tests: list[TestCaseResult] | None = None,
        exit_code: int | None = None,
        error: str | None = None,
        infra_reason: InfraReason | None = None,
        build_error: str | None = None,
        dynamic_api_coverage: APICoverage | None = None,
        oom_killed: bool | None = None,
        white_box: bool | None = None,
        notes: list[str] | None = None,
    ) -> ProfileResult:
        """The profile's result: the given fields plus the ones every run sets (profile, static
        AC, log names, elapsed time). Fields not given keep the model's defaults."""
        given = {
            "pass_at_1": pass_at_1,
            "tests": tests,
            "exit_code": exit_code,
            "error": error,
            "infra_reason": infra_reason,
            "build_error": build_error,
            "dynamic_api_coverage": dynamic_api_coverage,
            "oom_killed": oom_killed,
            "white_box": white_box,
            "notes": notes,
        }
        return ProfileResult(
            profile=self.profile,
            outcome=outcome,
            dsr=dsr,
            api_coverage=self.static_ac,
            logs=self.logs.names(),
            elapsed_seconds=round(time.monotonic() - self.started, 3),
            **{name: value for name, value in given.items() if value is not None},
        )

    @property
    def runtime(self) -> SandboxRuntime:
        """The runtime every sandbox of this run is created by (Docker unless the context says)."""
        if self._runtime is None:
            self._runtime = self.ctx.sandboxes(self.client)
        return self._runtime

    def sandbox(
        self,
        role: str,
        image: str,
        *,
        sources: Mapping[str, Path] | None = None,
        volumes: Mapping[str, str] | None = None,
        share_network_of: Sandbox | None = None,
    ) -> Sandbox:
        """The plan's sandbox `role` from `image`, labelled with this run (a context manager
        that removes it). Sources default to the repo copy and the assets."""
        return create_sandbox(
            self.runtime,
            self.plan,
            role,
            image,
            name=self.ctx.container_name(NAME_PARTS.get(role, role)),
            run_id=self.ctx.run_id,
            metadata=self.ctx.extra_labels,
            sources=sources if sources is not None else {"repo": self.repo_dir, "assets": ASSETS},
            volumes=volumes,
            share_network_of=share_network_of,
        )
