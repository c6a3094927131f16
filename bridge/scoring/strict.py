"""The strict profile: the deploy-and-test job done right.

* The service container holds the snapshot only (never golden tests): non-root, capabilities
  dropped, no-new-privileges, pids/memory/CPU limits, `network_mode=none`.
* A tester container joins the service's network namespace (so `localhost:<port>` works),
  holds the golden tests, which *replace* any agent tests, and runs pytest with a pinned config
  (`-c`, `--rootdir`) under an in-container `timeout -k`. Agent code cannot touch it.
* DSR means the service answers HTTP on the task port within the startup timeout.
* Pass@1 = passed / items collected from the golden suite itself; results come from JUnit XML
  and the real exit code, never from log text.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
from docker.models.containers import Container

from bridge.files import write_json_atomic
from bridge.scoring import coverage, grading
from bridge.scoring.containers import (
    ContainerLimits,
    create_container,
    exec_with_timeout,
    fetch_file,
    managed,
    put_directory,
    read_logs,
)
from bridge.scoring.docker_client import make_labels
from bridge.scoring.images import DependencyInstallError, cache_dir, ensure_deps_image, ensure_tester_image
from bridge.scoring.result import APICoverage, DSRResult, PassAt1, ProfileResult, TestCaseResult
from bridge.scoring.workdir import ASSETS, LogSink, ScoreContext, place_file, requirements_of
from bridge.task import Task

ProgressFn = Callable[[str], None]

TESTER_ROOT = "/work"
PROBE_DIR = "/work/.rgbridge"
JUNIT_PATH = "/tmp/rgbridge-junit.xml"
JUNIT_MAX_BYTES = 20_000_000
# Tester limits: generous but bounded; the tester runs our code only, yet shares the pid budget
# of nothing else and must not be starved by a hostile service's output.
TESTER_LIMITS = ContainerLimits(pids_limit=512, mem_limit="2g", nano_cpus=1_000_000_000)


def stage_golden_suite(task: Task, dest: Path) -> str:
    """Lay out the tester workdir: `tests/` (golden) plus task-root extras; return the ini path.

    The config is always pinned: the task-root pytest.ini when the task has one (GameBackend's
    `pythonpath = tests`, upstream W3), else the golden `tests/pytest.ini`, else an empty ini of
    ours, so nothing else can become the config or the rootdir.
    """
    shutil.copytree(task.tests_dir, dest / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, source in task.test_extras.items():
        if name != "requirements.txt":
            shutil.copyfile(source, dest / name)
    if (dest / "pytest.ini").is_file():
        return f"{TESTER_ROOT}/pytest.ini"
    if (dest / "tests" / "pytest.ini").is_file():
        return f"{TESTER_ROOT}/tests/pytest.ini"
    (dest / ".rgbridge-pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return f"{TESTER_ROOT}/.rgbridge-pytest.ini"


def test_requirements(task: Task) -> str:
    parts = []
    for path in (task.tests_dir / "requirements.txt", task.test_extras.get("requirements.txt")):
        if path is not None and path.is_file():
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def _pytest_args(ini: str) -> list[str]:
    return ["python", "-m", "pytest", "tests", "-c", ini, "--rootdir", TESTER_ROOT,
            "-p", "no:cacheprovider", "-o", "console_output_style=classic"]


def run_strict(client: docker.DockerClient, task: Task, repo_dir: Path, *, ctx: ScoreContext,
               logs: LogSink, progress: ProgressFn, deploy_only: bool = False) -> ProfileResult:
    """Score `repo_dir`; with `deploy_only` (practice mode) only DSR is measured and the tester
    holds no golden file at all, so nothing about the tests can leak into a practice check."""
    started = time.monotonic()
    static_ac = coverage.static_api_coverage(task.readme, repo_dir)
    # The original README is restored before scoring (synapse's tests read it; agents may edit it).
    place_file(task.readme_path, repo_dir, "README.md")

    def finish(**fields: object) -> ProfileResult:
        return ProfileResult(profile="strict", api_coverage=static_ac, logs=logs.names(),
                             elapsed_seconds=round(time.monotonic() - started, 3), **fields)  # type: ignore[arg-type]

    progress("strict: installing dependencies")
    try:
        deps = ensure_deps_image(client, requirements_of(repo_dir), wheelhouse=ctx.wheelhouse,
                                 timeout=task.manifest.timeouts.build, progress=ctx.image_progress)
    except DependencyInstallError as exc:
        logs.write("build.log", exc.log_tail)
        outcome = "timeout" if exc.timed_out else "build_failed"
        return finish(outcome=outcome, dsr=DSRResult(success=False, message=str(exc)), build_error=str(exc),
                      exit_code=-3, pass_at_1=PassAt1())
    if deps.log_tail:
        logs.write("build.log", deps.log_tail)
    tester_image = ensure_tester_image(client, wheelhouse=ctx.wheelhouse, progress=ctx.image_progress)
    extra_test_reqs = "" if deploy_only else test_requirements(task)
    if extra_test_reqs.strip():
        tester_image = ensure_deps_image(client, extra_test_reqs, base=tester_image, wheelhouse=ctx.wheelhouse,
                                         progress=ctx.image_progress).tag

    labels = make_labels(kind="strict", run_id=ctx.run_id, task=task.id, extra=ctx.extra_labels)
    env = {"SERVICE_PORT": str(task.port), "PORT": str(task.port), "HOME": "/tmp", "PYTHONUNBUFFERED": "1"}
    service = create_container(
        client, deps.tag, name=ctx.container_name("svc"), command=["bash", "/opt/rgbridge/strict_service.sh"],
        labels=labels, env=env, working_dir="/repo", limits=ctx.service_limits,
    )
    with managed(service):
        put_directory(service, repo_dir, "/repo")
        put_directory(service, ASSETS, "/opt/rgbridge", uid=0, gid=0)
        progress("strict: starting the service")
        service.start()
        with tempfile.TemporaryDirectory(prefix="rgbridge-golden-") as tmp:
            ini = "" if deploy_only else stage_golden_suite(task, Path(tmp))
            tester = create_container(
                client, tester_image, name=ctx.container_name("tst"), command=["sleep", "infinity"],
                labels=labels | {"rgbridge.kind": "tester"}, env={"HOME": "/tmp"}, working_dir=TESTER_ROOT,
                network_mode=f"container:{service.id}", limits=TESTER_LIMITS,
            )
            with managed(tester):
                put_directory(tester, Path(tmp), TESTER_ROOT)
                put_directory(tester, ASSETS, PROBE_DIR)
                tester.start()
                if deploy_only:
                    dsr, oom = _wait_deployed(task, service, tester, logs, progress)
                    return finish(outcome="scored" if dsr.success else "deploy_failed", dsr=dsr, oom_killed=oom)
                return _grade(task, service, tester, ini, static_ac=static_ac, logs=logs,
                              progress=progress, finish=finish)


def _collect(task: Task, tester: Container, ini: str, logs: LogSink) -> list[str]:
    """Item ids collected from the golden suite alone: Pass@1's denominator.

    The tester holds only golden files, so the collection depends on the task and the tester
    image, never on the repo: it is cached on (task hash, tester image id).
    """
    key = hashlib.sha256(f"{task.content_hash}\0{tester.image.id}\0{ini}".encode()).hexdigest()[:24]
    cache = cache_dir() / "collections" / f"{key}.json"
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(cached, list) and cached and all(isinstance(n, str) for n in cached):
            logs.write("collect.log", f"(cached collection of the golden suite: {len(cached)} items)\n"
                       + "\n".join(cached) + "\n")
            return cached
    except (OSError, ValueError):
        pass
    collect = exec_with_timeout(tester, [*_pytest_args(ini), "--collect-only", "-q"], 120, workdir=TESTER_ROOT,
                                env=task.test_environment())
    logs.write("collect.log", collect.output)
    collected = grading.parse_collect_only(collect.output)
    if not collected:
        raise RuntimeError(f"the golden suite of {task.id} collected no items (exit {collect.exit_code})")
    write_json_atomic(cache, collected, indent=None)
    return collected


def _wait_deployed(task: Task, service: Container, tester: Container, logs: LogSink,
                   progress: ProgressFn) -> tuple[DSRResult, bool]:
    """Strict DSR: does the service answer HTTP on the task port within the startup timeout?
    Returns (DSR, OOM kill seen); the service log is saved when it did not deploy."""
    timeouts = task.manifest.timeouts
    progress("strict: waiting for the service to answer")
    if _launcher_entry(service) == "none":
        logs.write("service.log", read_logs(service))
        return DSRResult(success=False, message="No service entry point found"), False
    ready = exec_with_timeout(tester, ["python", f"{PROBE_DIR}/wait_ready.py", str(task.port), str(timeouts.startup)],
                              timeouts.startup + 10, workdir=TESTER_ROOT)
    try:
        probe = json.loads(ready.output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        probe = {"ready": False, "error": f"readiness probe failed: {ready.output[-300:]}"}
    if probe.get("ready"):
        return DSRResult(success=True, message=f"service answered HTTP {probe.get('status')} on port {task.port}",
                         time_to_ready=probe.get("seconds")), False
    running, exit_code, oom = _service_state(service)
    logs.write("service.log", read_logs(service))
    if oom:
        message = "service was killed: out of memory"
    elif not running:
        message = f"service container exited (code {exit_code}) before answering on port {task.port}"
    else:
        message = f"service did not answer HTTP on port {task.port} within {timeouts.startup}s"
    return DSRResult(success=False, message=message), oom


def _launcher_entry(service: Container, wait_seconds: float = 3.0) -> str | None:
    """What the launcher started ("none" when it found no entry point), read from its state file."""
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        out = exec_with_timeout(service, ["cat", "/tmp/rgbridge-service/entry"], 5, user="10001")
        if out.exit_code == 0 and out.output.strip():
            return out.output.strip().splitlines()[-1]
        time.sleep(0.2)
    return None


_OOM_KILL_RE = re.compile(r"^oom_kill (\d+)", re.MULTILINE)


def _service_state(service: Container) -> tuple[bool, int | None, bool]:
    """(running, exit code, OOM kill seen). The engine sets OOMKilled only when the container's
    init exits, and our launcher outlives a killed service, so the cgroup's own counter is read
    too (v2 memory.events, v1 memory.oom_control)."""
    service.reload()
    state = service.attrs.get("State", {}) or {}
    running = bool(state.get("Running"))
    oom = bool(state.get("OOMKilled"))
    if running and not oom:
        probe = exec_with_timeout(
            service, ["sh", "-c", "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"],
            10, user="10001",
        )
        oom = any(int(n) > 0 for n in _OOM_KILL_RE.findall(probe.output))
    return running, state.get("ExitCode"), oom


def _grade(task: Task, service: Container, tester: Container, ini: str, *, static_ac: APICoverage,
           logs: LogSink, progress: ProgressFn, finish: Callable[..., ProfileResult]) -> ProfileResult:
    timeouts = task.manifest.timeouts
    collected = _collect(task, tester, ini, logs)

    dsr, oom = _wait_deployed(task, service, tester, logs, progress)
    if not dsr.success:
        not_run = [TestCaseResult(nodeid=n, outcome="not_run") for n in collected]
        return finish(outcome="deploy_failed", dsr=dsr, pass_at_1=grading.strict_pass_at_1(collected, []),
                      tests=not_run, oom_killed=oom)

    progress(f"strict: running {len(collected)} golden tests")
    run = exec_with_timeout(
        tester, [*_pytest_args(ini), "-rA", f"--junitxml={JUNIT_PATH}"], timeouts.tests, workdir=TESTER_ROOT,
        env=task.test_environment(),
    )
    logs.write("tests.log", run.output)
    junit = fetch_file(tester, JUNIT_PATH, max_bytes=JUNIT_MAX_BYTES)
    results: list[TestCaseResult] = []
    if junit:
        logs.write_bytes("junit.xml", junit)
        results = grading.parse_junit_xml(junit, known_nodeids=collected)
    merged = grading.merge_results(collected, results)
    pass_at_1 = grading.strict_pass_at_1(collected, results)

    progress("strict: probing README endpoints")
    dynamic = _dynamic_coverage(task, tester)
    _, _, oom = _service_state(service)
    logs.write("service.log", read_logs(service))
    outcome = "timeout" if run.timed_out else "scored"
    return finish(outcome=outcome, dsr=dsr, pass_at_1=pass_at_1, tests=merged, exit_code=run.exit_code,
                  dynamic_api_coverage=dynamic, oom_killed=oom,
                  error=f"golden tests exceeded {timeouts.tests}s" if run.timed_out else None)


def _dynamic_coverage(task: Task, tester: Container) -> APICoverage:
    endpoints = coverage.extract_endpoints(task.readme)
    payload = coverage.probeable_endpoints(endpoints)
    if not payload:
        return coverage.dynamic_api_coverage(endpoints, [])
    spec = json.dumps(payload)
    out = exec_with_timeout(
        tester, ["python", f"{PROBE_DIR}/probe_endpoints.py", spec, f"http://127.0.0.1:{task.port}"],
        60 + 4 * len(payload), workdir=TESTER_ROOT,
    )
    try:
        probes = json.loads(out.output.strip().splitlines()[-1]) if out.output.strip() else []
    except (ValueError, IndexError):
        probes = []
    return coverage.dynamic_api_coverage(endpoints, probes)
