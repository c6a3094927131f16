"""What scoring one task under one profile will do, as data: a `ScoringPlan`.

In the spirit of SWE-bench's `TestSpec`: the images a profile needs, the sandboxes it creates
(image, command, env, limits, network, what is copied in) and the commands it runs in them
(argv, timeout, output cap, what counts as failure) are fields of one JSON-serialisable model,
built from the task alone by the (language, profile) table's plan builder (`plan_for`,
bridge/scoring/run/runner.py). The profile runners receive it, read their sandboxes and steps
from it and keep only the decisions (which step next, how to grade) in code;
`rgbridge plan TASK --profile strict|compat` prints it.

This module holds the model and the parts every plan shares (the tester layout, the readiness
probe, the endpoint probe, the service state checks, strict's service and tester sandboxes and
the shape of both profiles' plans: `strict_plan_of`, `compat_plan_of`). Python plans:
bridge/scoring/python/plan.py; Java plans: bridge/scoring/java/plan.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bridge.scoring import coverage, upstream
from bridge.scoring.sandbox.protocol import (
    DEFAULT_LOG_CAP,
    ExecOutcome,
    Sandbox,
    SandboxLimits,
    SandboxRuntime,
    SandboxSpec,
)
from bridge.scoring.types import Profile
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
    profile: Profile
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


def repo_copies() -> list[CopyIn]:
    """The repo at /repo and our scripts, root-owned, in ASSETS_DIR: what a service or compat
    container gets."""
    return [CopyIn(source="repo", dest="/repo"), CopyIn(source="assets", dest=ASSETS_DIR, owner="root")]


def service_sandbox(task: Task, *, image: str, env: Mapping[str, str], limits: SandboxLimits) -> SandboxPlan:
    """Strict's service, any language: the repo started by strict_service.sh on the task's port."""
    return SandboxPlan(
        role="service",
        kind="strict",
        image=image,
        command=["bash", f"{ASSETS_DIR}/strict_service.sh"],
        workdir="/repo",
        env={"SERVICE_PORT": str(task.port), "PORT": str(task.port), **env},
        limits=limits,
        copies=repo_copies(),
    )


def tester_sandbox(
    *, image: str, env: Mapping[str, str], limits: SandboxLimits, suite: Source, extra: Sequence[CopyIn] = ()
) -> SandboxPlan:
    """Strict's tester, any language: idle until its steps run, in the service's network
    namespace, holding the `suite` folder as its workdir and our probes beside it."""
    return SandboxPlan(
        role="tester",
        kind="tester",
        image=image,
        command=["sleep", "infinity"],
        workdir=TESTER_ROOT,
        env=dict(env),
        limits=limits,
        shares_network_of="service",
        copies=[CopyIn(source=suite, dest=TESTER_ROOT), CopyIn(source="assets", dest=PROBE_DIR), *extra],
    )


def tester_step(name: str, argv: list[str], *, timeout: float, failure: str, workdir: str | None = TESTER_ROOT) -> Step:
    """A step of the golden suite, run in the tester (from the suite's folder unless told)."""
    return Step(name=name, sandbox="tester", argv=argv, timeout=timeout, workdir=workdir, failure=failure)


def strict_plan_of(
    task: Task,
    *,
    language: str,
    deploy_only: bool,
    images: list[ImageRecipe],
    service_image: str,
    service_env: Mapping[str, str],
    service_limits: SandboxLimits,
    tester: SandboxPlan,
    test_steps: Sequence[Step],
    timeouts: Mapping[str, float],
    notes: list[str],
) -> ScoringPlan:
    """Strict, any language: the service (`service_sandbox`) and the language's tester; the
    readiness steps, then (unless the plan is deploy-only) the language's test steps and the
    endpoint probe."""
    steps = deploy_steps(task)
    if not deploy_only:
        steps += [*test_steps, *probe_step(task)]
    return ScoringPlan(
        task=task.id,
        language=language,
        profile="strict",
        deploy_only=deploy_only,
        images=images,
        sandboxes=[service_sandbox(task, image=service_image, env=service_env, limits=service_limits), tester],
        steps=steps,
        timeouts=dict(timeouts),
        notes=notes,
    )


def compat_plan_of(
    task: Task,
    *,
    language: str,
    image: ImageRecipe,
    script: str,
    env: Mapping[str, str],
    limits: SandboxLimits,
    failure: str,
    notes: list[str],
) -> ScoringPlan:
    """Compat, any language: upstream's one container running our entrypoint `script` (its
    phases and markers) under upstream's timeouts, graded from the log."""
    lang = task.lang
    return ScoringPlan(
        task=task.id,
        language=language,
        profile="compat",
        images=[image],
        sandboxes=[
            SandboxPlan(
                role="compat",
                kind="compat",
                image=image.name,
                command=["bash", f"{ASSETS_DIR}/{script}"],
                workdir="/repo",
                env={
                    "REPO_LANG": lang,
                    "SERVICE_PORT": str(task.port),
                    "STARTUP_TIMEOUT": str(upstream.STARTUP_TIMEOUTS.get(lang, 15)),
                    "TEST_TIMEOUT": str(upstream.TEST_TIMEOUTS.get(lang, 300)),
                    **env,
                },
                limits=limits,
                copies=repo_copies(),
            )
        ],
        steps=[Step(name="run", sandbox="compat", kind="wait", timeout=upstream.CONTAINER_TIMEOUT, failure=failure)],
        timeouts={"build": task.manifest.timeouts.build, "container": upstream.CONTAINER_TIMEOUT},
        notes=notes,
    )
