"""What scoring one task under one profile will do, as data: a `ScoringPlan`.

In the spirit of SWE-bench's `TestSpec`: the images a profile needs, the sandboxes it creates
(image, command, env, limits, network, what is copied in) and the commands it runs in them
(argv, timeout, output cap, what counts as failure) are fields of one JSON-serialisable model,
built from the task alone by `plan_for` (bridge/scoring/run/runner.py). The profile runners read
their sandboxes and steps from it and keep only the decisions (which step next, how to grade)
in code; `rgbridge plan TASK --profile strict|compat` prints it.

This module holds the model and the parts every plan shares (the tester layout, the readiness
probe, the endpoint probe, the service state checks). Python plans: bridge/scoring/python/plan.py;
Java plans: bridge/scoring/java/plan.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bridge.scoring import coverage
from bridge.scoring.sandbox.protocol import (
    DEFAULT_LOG_CAP,
    ExecOutcome,
    Sandbox,
    SandboxLimits,
    SandboxRuntime,
    SandboxSpec,
)
from bridge.tasks.model import Task

TESTER_ROOT = "/work"
PROBE_DIR = "/work/.rgbridge"
ASSETS_DIR = "/opt/rgbridge"
SERVICE_STATE = "/tmp/rgbridge-service/entry"
APP_USER = "10001"

Source = Literal["repo", "assets", "golden-suite", "tester-repo"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ImageRecipe(_Frozen):
    """An image the plan needs: built (or found cached) before any sandbox starts."""

    name: str
    base: str
    inputs: list[str] = Field(default_factory=list)
    purpose: str = ""


class CopyIn(_Frozen):
    """A host folder copied into a sandbox before it starts (`owner` root for our own scripts)."""

    source: Source
    dest: str
    owner: Literal["app", "root"] = "app"


class SandboxPlan(_Frozen):
    """One sandbox: `role` names it in the plan and in container names, `kind` tags it for sweeps."""

    role: str
    kind: str
    image: str  # the ImageRecipe.name it runs
    command: list[str]
    workdir: str
    env: dict[str, str] = Field(default_factory=dict)
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    shares_network_of: str | None = None  # role of the sandbox whose loopback it joins
    copies: list[CopyIn] = Field(default_factory=list)

    def spec(
        self,
        image_tag: str,
        *,
        name: str,
        run_id: str,
        task_id: str,
        metadata: Mapping[str, str],
        share_network_of: Sandbox | None = None,
        volumes: Mapping[str, str] | None = None,
    ) -> SandboxSpec:
        return SandboxSpec(
            image=image_tag,
            name=name,
            command=list(self.command),
            env=dict(self.env),
            workdir=self.workdir,
            limits=SandboxLimits(**asdict(self.limits)),
            kind=self.kind,
            run_id=run_id,
            task_id=task_id,
            metadata=dict(metadata),
            share_network_of=share_network_of,
            volumes=dict(volumes or {}),
        )


class Step(_Frozen):
    """A command run in a sandbox (`exec`), or the wait for its main command to exit (`wait`)."""

    name: str
    sandbox: str
    kind: Literal["exec", "wait"] = "exec"
    argv: list[str] = Field(default_factory=list)
    timeout: float
    max_output: int = DEFAULT_LOG_CAP
    env: dict[str, str] | None = None
    workdir: str | None = None
    user: str | None = None
    failure: str = ""  # what counts as failure, for a reader


class ScoringPlan(_Frozen):
    task: str
    language: str
    profile: Literal["strict", "compat"]
    deploy_only: bool = False
    images: list[ImageRecipe]
    sandboxes: list[SandboxPlan]
    steps: list[Step]
    timeouts: dict[str, float]
    notes: list[str] = Field(default_factory=list)

    def sandbox(self, role: str) -> SandboxPlan:
        return next(s for s in self.sandboxes if s.role == role)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def has_step(self, name: str) -> bool:
        return any(s.name == name for s in self.steps)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2)


def create_sandbox(
    runtime: SandboxRuntime,
    plan: ScoringPlan,
    role: str,
    image_tag: str,
    *,
    name: str,
    run_id: str,
    metadata: Mapping[str, str],
    sources: Mapping[str, Path],
    share_network_of: Sandbox | None = None,
    volumes: Mapping[str, str] | None = None,
) -> Sandbox:
    """Create the plan's sandbox `role` and copy in its folders (those `sources` provides);
    `volumes` (name -> path) are mounted read-only (a dependency set kept in a volume)."""
    planned = plan.sandbox(role)
    box = runtime.create(
        planned.spec(
            image_tag,
            name=name,
            run_id=run_id,
            task_id=plan.task,
            metadata=metadata,
            share_network_of=share_network_of,
            volumes=volumes,
        )
    )
    try:
        for copy in planned.copies:
            if copy.source in sources:
                owner = {"uid": 0, "gid": 0} if copy.owner == "root" else {}
                box.copy_in(sources[copy.source], copy.dest, **owner)
    except BaseException:
        box.remove()
        raise
    return box


def run_step(box: Sandbox, step: Step) -> ExecOutcome:
    """Run an exec step of the plan in its sandbox."""
    return box.exec(
        step.argv, step.timeout, max_output=step.max_output, user=step.user, workdir=step.workdir, env=step.env
    )


# ----------------------------------------------------------------------------- shared steps


def deploy_steps(task: Task) -> list[Step]:
    """How every strict plan decides DSR and reads the service's state (bridge/scoring/deploy.py)."""
    startup = task.manifest.timeouts.startup
    return [
        Step(
            name="launcher-entry",
            sandbox="service",
            argv=["cat", SERVICE_STATE],
            timeout=5,
            user=APP_USER,
            failure="the launcher found no entry point (polled for 3 s): DSR fails at once",
        ),
        Step(
            name="wait-ready",
            sandbox="tester",
            argv=["python", f"{PROBE_DIR}/wait_ready.py", str(task.port), str(startup)],
            timeout=startup + 10,
            workdir=TESTER_ROOT,
            failure=f"no HTTP answer on 127.0.0.1:{task.port} within {startup}s: DSR fails",
        ),
        Step(
            name="oom-check",
            sandbox="service",
            argv=["sh", "-c", "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"],
            timeout=10,
            user=APP_USER,
            failure="an oom_kill count above 0 marks the result oom_killed",
        ),
    ]


def probe_step(task: Task) -> list[Step]:
    """Dynamic API coverage: the README's HTTP endpoints probed from the tester (none: no step)."""
    payload = coverage.probeable_endpoints(coverage.extract_endpoints(task.readme))
    if not payload:
        return []
    return [
        Step(
            name="probe-endpoints",
            sandbox="tester",
            argv=["python", f"{PROBE_DIR}/probe_endpoints.py", json.dumps(payload), f"http://127.0.0.1:{task.port}"],
            timeout=60 + 4 * len(payload),
            workdir=TESTER_ROOT,
            failure="an endpoint that does not answer is not covered",
        )
    ]
