"""Strict's view of the running service, for both languages: did it deploy (DSR), is it still
up, was it killed for memory, which README endpoints answer (dynamic API coverage).

Each check is a step of the plan (bridge/scoring/plan.py `deploy_steps`, `probe_step`) run in
the service or the tester sandbox; the tester shares the service's loopback only.
"""

from __future__ import annotations

import json
import re
import time

from bridge.scoring import coverage
from bridge.scoring.plan import ScoringPlan, run_step
from bridge.scoring.result import APICoverage, DSRResult
from bridge.scoring.run.workdir import LogSink
from bridge.scoring.sandbox.protocol import Sandbox
from bridge.scoring.types import ProgressFn
from bridge.tasks.model import Task

_OOM_KILL_RE = re.compile(r"^oom_kill (\d+)", re.MULTILINE)


def wait_deployed(
    task: Task, plan: ScoringPlan, service: Sandbox, tester: Sandbox, logs: LogSink, progress: ProgressFn
) -> tuple[DSRResult, bool]:
    """Strict DSR: does the service answer HTTP on the task port within the startup timeout?
    Returns (DSR, OOM kill seen); the service log is saved when it did not deploy."""
    timeouts = task.manifest.timeouts
    progress("strict: waiting for the service to answer")
    if launcher_entry(plan, service) == "none":
        logs.write("service.log", service.logs())
        return DSRResult(success=False, message="No service entry point found"), False
    ready = run_step(tester, plan.step("wait-ready"))
    try:
        probe = json.loads(ready.output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        probe = {"ready": False, "error": f"readiness probe failed: {ready.output[-300:]}"}
    if probe.get("ready"):
        return DSRResult(
            success=True,
            message=f"service answered HTTP {probe.get('status')} on port {task.port}",
            time_to_ready=probe.get("seconds"),
        ), False
    running, exit_code, oom = service_state(plan, service)
    logs.write("service.log", service.logs())
    if oom:
        message = "service was killed: out of memory"
    elif launcher_entry(plan, service, wait_seconds=1.0) == "none":
        # the launcher's state file can come later than the quick look above on a loaded machine
        return DSRResult(success=False, message="No service entry point found"), False
    elif not running:
        message = f"service container exited (code {exit_code}) before answering on port {task.port}"
    else:
        message = f"service did not answer HTTP on port {task.port} within {timeouts.startup}s"
    return DSRResult(success=False, message=message), oom


def launcher_entry(plan: ScoringPlan, service: Sandbox, wait_seconds: float = 3.0) -> str | None:
    """What the launcher started ("none" when it found no entry point), read from its state file."""
    step = plan.step("launcher-entry")
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        out = run_step(service, step)
        if out.exit_code == 0 and out.output.strip():
            return out.output.strip().splitlines()[-1]
        time.sleep(0.2)
    return None


def service_state(plan: ScoringPlan, service: Sandbox) -> tuple[bool, int | None, bool]:
    """(running, exit code, OOM kill seen). The engine sets OOMKilled only when the container's
    init exits, and our launcher outlives a killed service, so the cgroup's own counter is read
    too (v2 memory.events, v1 memory.oom_control)."""
    state = service.state()
    oom = state.oom_killed
    if state.running and not oom:
        probe = run_step(service, plan.step("oom-check"))
        oom = any(int(n) > 0 for n in _OOM_KILL_RE.findall(probe.output))
    return state.running, state.exit_code, oom


def dynamic_coverage(task: Task, plan: ScoringPlan, tester: Sandbox) -> APICoverage:
    endpoints = coverage.extract_endpoints(task.readme)
    if not plan.has_step("probe-endpoints"):
        return coverage.dynamic_api_coverage(endpoints, [])
    out = run_step(tester, plan.step("probe-endpoints"))
    try:
        probes = json.loads(out.output.strip().splitlines()[-1]) if out.output.strip() else []
    except (ValueError, IndexError):
        probes = []
    return coverage.dynamic_api_coverage(endpoints, probes)


def after_suite(
    task: Task, plan: ScoringPlan, service: Sandbox, tester: Sandbox, logs: LogSink, *, probe: bool
) -> tuple[APICoverage | None, bool]:
    """Once the golden suite has run: the README's endpoints probed (when `probe`: the service
    deployed), whether the service was killed for memory meanwhile, and its log kept."""
    dynamic = dynamic_coverage(task, plan, tester) if probe else None
    _, _, oom = service_state(plan, service)
    logs.write("service.log", service.logs())
    return dynamic, oom
