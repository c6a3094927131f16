"""The strict profile: the deploy-and-test job done right.

* The service container holds the snapshot only (never golden tests): non-root, capabilities
  dropped, no-new-privileges, pids/memory/CPU limits, `network_mode=none`.
* A tester container joins the service's network namespace (so `localhost:<port>` works),
  holds the golden tests, which *replace* any agent tests, and runs pytest with a pinned config
  (`-c`, `--rootdir`) under an in-container `timeout -k`. Agent code cannot touch it.
* DSR means the service answers HTTP on the task port within the startup timeout.
* Pass@1 = passed / items collected from the golden suite itself; results come from our pytest
  plugin's JSON report (collected node ids, setup/call/teardown outcomes), cross-checked against
  JUnit XML, never from log text. The rule for each suite quirk is in docs/strict-rules.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import docker
from docker.models.containers import Container

from bridge.fs.files import write_json_atomic
from bridge.locations import cache_dir
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
from bridge.scoring.images.build import DependencyInstallError
from bridge.scoring.images.deps import ensure_deps_image
from bridge.scoring.images.tester import ensure_tester_image
from bridge.scoring.result import (
    APICoverage,
    DSRResult,
    PassAt1,
    ProfileResult,
    TestCaseResult,
)
from bridge.scoring.workdir import (
    ASSETS,
    LogSink,
    ScoreContext,
    place_file,
    requirements_of,
)
from bridge.tasks.model import Task
from bridge.tasks.suite import DEFAULT_PER_TEST_TIMEOUT, pinned_ini_options, static_test_ids

ProgressFn = Callable[[str], None]

TESTER_ROOT = "/work"
PROBE_DIR = "/work/.rgbridge"
JUNIT_PATH = "/tmp/rgbridge-junit.xml"
REPORT_PATH = "/tmp/rgbridge-report.json"
COLLECT_REPORT_PATH = "/tmp/rgbridge-collect.json"
AGENT_DIR = f"{TESTER_ROOT}/.rgbridge-agent"  # white-box suites only; outside tests/, never collected
JUNIT_MAX_BYTES = 20_000_000
PLUGIN = "rgbridge_pytest_report"  # assets/rgbridge_pytest_report.py, installed in the tester venv
COLLECT_TIMEOUT = 120
#: bump when the collection rules change (part of the collection cache key)
COLLECTION_RULES = "3"
# Tester limits: generous but bounded; the tester runs our code only, yet shares the pid budget
# of nothing else and must not be starved by a hostile service's output.
TESTER_LIMITS = ContainerLimits(pids_limit=512, mem_limit="2g", nano_cpus=1_000_000_000)


def stage_golden_suite(task: Task, dest: Path) -> str:
    """Lay out the tester workdir: `tests/` (golden), the task's README and task-root extras;
    return the ini path.

    The config is always pinned: the task-root pytest.ini when the task has one (GameBackend's
    `pythonpath = tests`, upstream W3), else the golden `tests/pytest.ini`, else an empty ini of
    ours, so nothing else can become the config or the rootdir.
    """
    shutil.copytree(task.tests_dir, dest / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # Suites read the README beside their tests folder (synapse's contract tests): the task's
    # original, as in the service's repo, never an agent's edit.
    shutil.copyfile(task.readme_path, dest / "README.md")
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


def _pytest_args(ini: str, ini_opts: list[str]) -> list[str]:
    # Our plugin is loaded explicitly (last `-p` wins over a suite's `-p no:...`); xdist is off so
    # every item runs in the process that records it; `ini_opts` pin addopts and the per-test
    # timeout (bridge/tasks/suite.py). Modules that fail to import do not stop the others.
    return [
        "python",
        "-m",
        "pytest",
        "tests",
        "-c",
        ini,
        "--rootdir",
        TESTER_ROOT,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-p",
        PLUGIN,
        *ini_opts,
        "-o",
        "console_output_style=classic",
        "--continue-on-collection-errors",
    ]


def suite_timing(tests_timeout: int) -> tuple[int, int, int]:
    """(per-test timeout, suite budget, hard limit) in seconds for a task's `tests` timeout.

    No item starts after the budget; the one running then is bounded by the per-test timeout;
    the hard limit (an in-container `timeout -k`) only backs the plugin up.
    """
    per_test = max(5, min(DEFAULT_PER_TEST_TIMEOUT, tests_timeout // 4))
    budget = max(tests_timeout // 2, tests_timeout - per_test - 5)
    return per_test, budget, tests_timeout + 30


def _ini_host_path(staged: Path, ini: str) -> Path | None:
    rel = ini.removeprefix(TESTER_ROOT + "/")
    path = staged / rel
    return path if path.is_file() else None


def run_strict(
    client: docker.DockerClient,
    task: Task,
    repo_dir: Path,
    *,
    ctx: ScoreContext,
    logs: LogSink,
    progress: ProgressFn,
    deploy_only: bool = False,
) -> ProfileResult:
    """Score `repo_dir`; with `deploy_only` (practice mode) only DSR is measured and the tester
    holds no golden file at all, so nothing about the tests can leak into a practice check."""
    started = time.monotonic()
    static_ac = coverage.static_api_coverage(task.readme, repo_dir)
    # The original README is restored before scoring (synapse's tests read it; agents may edit it).
    place_file(task.readme_path, repo_dir, "README.md")

    def finish(**fields: object) -> ProfileResult:
        return ProfileResult(
            profile="strict",
            api_coverage=static_ac,
            logs=logs.names(),
            elapsed_seconds=round(time.monotonic() - started, 3),
            **fields,
        )

    progress("strict: installing dependencies")
    try:
        deps = ensure_deps_image(
            client,
            requirements_of(repo_dir),
            wheelhouse=ctx.wheelhouse,
            timeout=task.manifest.timeouts.build,
            progress=ctx.image_progress,
        )
    except DependencyInstallError as exc:
        logs.write("build.log", exc.log_tail)
        outcome = "timeout" if exc.timed_out else "build_failed"
        return finish(
            outcome=outcome,
            dsr=DSRResult(success=False, message=str(exc)),
            build_error=str(exc),
            exit_code=-3,
            pass_at_1=PassAt1(),
        )
    if deps.log_tail:
        logs.write("build.log", deps.log_tail)
    tester_image = ensure_tester_image(client, wheelhouse=ctx.wheelhouse, progress=ctx.image_progress)
    extra_test_reqs = "" if deploy_only else test_requirements(task)
    if extra_test_reqs.strip():
        tester_image = ensure_deps_image(
            client, extra_test_reqs, base=tester_image, wheelhouse=ctx.wheelhouse, progress=ctx.image_progress
        ).tag

    if task.white_box and not deploy_only:
        # White-box suites import the agent's code: the tester gets the agent's requirements too.
        try:
            tester_image = ensure_deps_image(
                client,
                requirements_of(repo_dir),
                base=tester_image,
                wheelhouse=ctx.wheelhouse,
                timeout=task.manifest.timeouts.build,
                progress=ctx.image_progress,
            ).tag
        except DependencyInstallError as exc:
            logs.write("build.log", exc.log_tail)
            return finish(
                outcome="timeout" if exc.timed_out else "build_failed",
                dsr=DSRResult(success=False, message=str(exc)),
                build_error=str(exc),
                exit_code=-3,
                pass_at_1=PassAt1(),
                white_box=True,
            )

    labels = make_labels(kind="strict", run_id=ctx.run_id, task=task.id, extra=ctx.extra_labels)
    env = {"SERVICE_PORT": str(task.port), "PORT": str(task.port), "HOME": "/tmp", "PYTHONUNBUFFERED": "1"}
    service = create_container(
        client,
        deps.tag,
        name=ctx.container_name("svc"),
        command=["bash", "/opt/rgbridge/strict_service.sh"],
        labels=labels,
        env=env,
        working_dir="/repo",
        limits=ctx.service_limits,
    )
    with managed(service):
        put_directory(service, repo_dir, "/repo")
        put_directory(service, ASSETS, "/opt/rgbridge", uid=0, gid=0)
        progress("strict: starting the service")
        service.start()
        with tempfile.TemporaryDirectory(prefix="rgbridge-golden-") as tmp:
            ini = "" if deploy_only else stage_golden_suite(task, Path(tmp))
            ini_opts = (
                []
                if deploy_only
                else pinned_ini_options(
                    _ini_host_path(Path(tmp), ini), per_test_timeout=suite_timing(task.manifest.timeouts.tests)[0]
                )
            )
            tester = create_container(
                client,
                tester_image,
                name=ctx.container_name("tst"),
                command=["sleep", "infinity"],
                labels=labels | {"rgbridge.kind": "tester"},
                env={"HOME": "/tmp"},
                working_dir=TESTER_ROOT,
                network_mode=f"container:{service.id}",
                limits=TESTER_LIMITS,
            )
            with managed(tester):
                put_directory(tester, Path(tmp), TESTER_ROOT)
                put_directory(tester, ASSETS, PROBE_DIR)
                if task.white_box and not deploy_only:
                    put_directory(tester, repo_dir, AGENT_DIR)
                tester.start()
                if deploy_only:
                    dsr, oom = _wait_deployed(task, service, tester, logs, progress)
                    return finish(outcome="scored" if dsr.success else "deploy_failed", dsr=dsr, oom_killed=oom)
                return _grade(
                    task,
                    service,
                    tester,
                    ini,
                    ini_opts,
                    static_ac=static_ac,
                    logs=logs,
                    progress=progress,
                    finish=finish,
                )


@dataclass
class Collection:
    """What the golden suite collects on its own: Pass@1's denominator.

    `items` are the plugin's collected node ids; `error_items` stand for modules pytest could not
    import (their tests, read with `ast`, or the module itself): they count as `error`, so one
    broken file never shrinks the denominator. `task_error` is set when the suite cannot be
    graded at all (nothing collectable): a fault of the task, not of any submission.
    """

    items: list[str] = field(default_factory=list)
    error_items: dict[str, str] = field(default_factory=dict)  # nodeid -> collection error
    exitstatus: int | None = None
    task_error: str = ""
    cached: bool = False

    @property
    def nodeids(self) -> list[str]:
        return list(dict.fromkeys([*self.items, *self.error_items]))


def _error_items(task: Task, errors: list[dict[str, str]]) -> dict[str, str]:
    static = static_test_ids(task.tests_dir)
    out: dict[str, str] = {}
    for err in errors:
        module = grading.normalize_nodeid(err["nodeid"])
        message = f"collection error: {err['message'][-500:]}"
        for nodeid in static.get(module) or [module]:
            out[nodeid] = message
    return out


def _last_error_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("E ") or "Error" in line:
            return line.removeprefix("E").strip()[:200]
    return lines[-1][:200] if lines else "collection error"


def collection_cache_key(task: Task, tester_image_id: str, args: list[str]) -> str:
    raw = "\0".join([COLLECTION_RULES, task.content_hash, tester_image_id, *args])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def collect_suite(task: Task, tester: Container, ini: str, ini_opts: list[str], logs: LogSink) -> Collection:
    """Collect the golden suite alone (no agent file is in the tester), through the plugin.

    The collection depends only on the task and the tester image, so it is cached on
    (rules, task hash, tester image id, arguments): a task error is found once, not per
    submission.
    """
    args = _pytest_args(ini, ini_opts)
    cache = cache_dir() / "collections" / f"{collection_cache_key(task, tester.image.id, args)}.json"
    try:
        cached = Collection(**json.loads(cache.read_text(encoding="utf-8")))
        cached.cached = True
        logs.write(
            "collect.log",
            f"(cached collection of the golden suite: {len(cached.nodeids)} items"
            f"{'; task error: ' + cached.task_error if cached.task_error else ''})\n"
            + "\n".join(cached.nodeids)
            + "\n",
        )
        return cached
    except (OSError, ValueError, TypeError):
        pass
    env = task.test_environment() | {"RGBRIDGE_REPORT": COLLECT_REPORT_PATH}
    run = exec_with_timeout(tester, [*args, "--collect-only", "-q"], COLLECT_TIMEOUT, workdir=TESTER_ROOT, env=env)
    logs.write("collect.log", run.output)
    report = grading.parse_plugin_report(fetch_file(tester, COLLECT_REPORT_PATH, max_bytes=JUNIT_MAX_BYTES))
    if run.timed_out:
        raise RuntimeError(f"collecting the golden suite of {task.id} took over {COLLECT_TIMEOUT}s")
    collection = Collection(exitstatus=report.exitstatus if report else run.exit_code)
    if report is None:
        tail = " | ".join(line for line in run.output.strip().splitlines()[-3:] if line.strip())[-400:]
        collection.task_error = f"pytest cannot load the golden suite (exit {run.exit_code}): {tail}"
    else:
        collection.items = report.collected
        collection.error_items = _error_items(task, report.collect_errors)
        if not collection.items and report.collect_errors:
            # Nothing importable in the tester (e.g. the suite imports a package its task never
            # declares): a defect of the task, not of any submission.
            why = _last_error_line(report.collect_errors[0]["message"])
            collection.error_items = {}
            collection.task_error = (
                f"no golden test module can be imported in the tester ({why}); "
                "declare the suite's packages in tests/requirements.txt"
            )
        elif not collection.nodeids:
            collection.task_error = (
                f"the golden suite collects no test items (pytest exit {report.exitstatus}); see docs/strict-rules.md"
            )
    if not task.white_box:
        write_json_atomic(cache, {k: v for k, v in asdict(collection).items() if k != "cached"}, indent=None)
    return collection


def white_box_denominator(task: Task, run_collected: list[str]) -> list[str]:
    """White-box suites cannot be collected without the agent's code, so their denominator is
    the union of what the run collected and the test ids read from the source (a parametrized
    id `m::t[x]` stands in for its static `m::t`): an agent whose code breaks the import loses
    those tests instead of shrinking the suite."""
    seen = dict.fromkeys(grading.normalize_nodeid(n) for n in run_collected)
    bases = {n.split("[", 1)[0] for n in seen}
    for ids in static_test_ids(task.tests_dir).values():
        for nodeid in ids:
            if nodeid not in bases:
                seen.setdefault(nodeid, None)
    return list(seen)


def _wait_deployed(
    task: Task, service: Container, tester: Container, logs: LogSink, progress: ProgressFn
) -> tuple[DSRResult, bool]:
    """Strict DSR: does the service answer HTTP on the task port within the startup timeout?
    Returns (DSR, OOM kill seen); the service log is saved when it did not deploy."""
    timeouts = task.manifest.timeouts
    progress("strict: waiting for the service to answer")
    if _launcher_entry(service) == "none":
        logs.write("service.log", read_logs(service))
        return DSRResult(success=False, message="No service entry point found"), False
    ready = exec_with_timeout(
        tester,
        ["python", f"{PROBE_DIR}/wait_ready.py", str(task.port), str(timeouts.startup)],
        timeouts.startup + 10,
        workdir=TESTER_ROOT,
    )
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
            service,
            ["sh", "-c", "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"],
            10,
            user="10001",
        )
        oom = any(int(n) > 0 for n in _OOM_KILL_RE.findall(probe.output))
    return running, state.get("ExitCode"), oom


def _grade(
    task: Task,
    service: Container,
    tester: Container,
    ini: str,
    ini_opts: list[str],
    *,
    static_ac: APICoverage,
    logs: LogSink,
    progress: ProgressFn,
    finish: Callable[..., ProfileResult],
) -> ProfileResult:
    timeouts = task.manifest.timeouts
    white_box = task.white_box
    if white_box:
        collection = Collection()
        collected = white_box_denominator(task, [])
    else:
        collection = collect_suite(task, tester, ini, ini_opts, logs)
        if collection.task_error:
            return finish(
                outcome="task_error",
                dsr=DSRResult(success=False, message="not measured: task error"),
                error=collection.task_error,
                pass_at_1=PassAt1(),
            )
        collected = collection.nodeids
    collection_errors = [
        TestCaseResult(nodeid=n, outcome="error", message=m) for n, m in collection.error_items.items()
    ]

    dsr, oom = _wait_deployed(task, service, tester, logs, progress)
    if not dsr.success:
        return finish(
            outcome="deploy_failed",
            dsr=dsr,
            pass_at_1=grading.strict_pass_at_1(collected, collection_errors),
            tests=grading.merge_results(collected, collection_errors),
            oom_killed=oom,
            white_box=white_box,
            dynamic_api_coverage=coverage.dynamic_api_coverage(
                coverage.extract_endpoints(task.readme), [], unreachable="service did not deploy"
            ),
        )

    progress(f"strict: running {len(collected)} golden tests")
    _, budget, hard_limit = suite_timing(timeouts.tests)
    env = task.test_environment() | {"RGBRIDGE_REPORT": REPORT_PATH, "RGBRIDGE_SUITE_BUDGET": str(budget)}
    if white_box:
        env["RGBRIDGE_AGENT_PATH"] = AGENT_DIR
    run = exec_with_timeout(
        tester,
        [*_pytest_args(ini, ini_opts), "-rA", f"--junitxml={JUNIT_PATH}"],
        hard_limit,
        workdir=TESTER_ROOT,
        env=env,
    )
    logs.write("tests.log", run.output)
    raw_report = fetch_file(tester, REPORT_PATH, max_bytes=JUNIT_MAX_BYTES)
    report = grading.parse_plugin_report(raw_report)
    junit = fetch_file(tester, JUNIT_PATH, max_bytes=JUNIT_MAX_BYTES)
    junit_results: list[TestCaseResult] = []
    if junit:
        logs.write_bytes("junit.xml", junit)
        try:
            junit_results = grading.parse_junit_xml(junit, known_nodeids=collected)
        except grading.JUnitError as exc:
            logs.write("junit-crosscheck.log", f"JUnit XML unreadable: {exc}\n")
    notes: list[str] = []
    results: list[TestCaseResult] = list(collection_errors)
    if report is not None:
        logs.write_bytes("pytest-report.json", raw_report or b"")
        if white_box:
            collected = white_box_denominator(task, report.collected)
        plugin_results = grading.results_from_plugin(report)
        results += plugin_results
        mismatch = grading.junit_disagreements(plugin_results, junit_results) if junit else []
        if mismatch:
            logs.write("junit-crosscheck.log", "plugin and JUnit XML disagree on:\n" + "\n".join(mismatch) + "\n")
            notes.append(f"JUnit XML disagrees with the plugin on {len(mismatch)} item(s); the plugin's record is used")
        notes += grading.session_notes(report, budget)
    elif not run.timed_out:
        notes.append(f"pytest wrote no report (exit {run.exit_code}); no item counts as passed")
    merged = grading.merge_results(collected, results)
    pass_at_1 = grading.strict_pass_at_1(collected, results)

    progress("strict: probing README endpoints")
    dynamic = _dynamic_coverage(task, tester)
    _, _, oom = _service_state(service)
    logs.write("service.log", read_logs(service))
    outcome = "timeout" if run.timed_out else "scored"
    if run.timed_out:
        notes.append(f"golden tests exceeded the hard limit of {hard_limit}s")
    return finish(
        outcome=outcome,
        dsr=dsr,
        pass_at_1=pass_at_1,
        tests=merged,
        exit_code=run.exit_code,
        dynamic_api_coverage=dynamic,
        oom_killed=oom,
        white_box=white_box,
        notes=notes,
        error=f"golden tests exceeded {hard_limit}s" if run.timed_out else None,
    )


def _dynamic_coverage(task: Task, tester: Container) -> APICoverage:
    endpoints = coverage.extract_endpoints(task.readme)
    payload = coverage.probeable_endpoints(endpoints)
    if not payload:
        return coverage.dynamic_api_coverage(endpoints, [])
    spec = json.dumps(payload)
    out = exec_with_timeout(
        tester,
        ["python", f"{PROBE_DIR}/probe_endpoints.py", spec, f"http://127.0.0.1:{task.port}"],
        60 + 4 * len(payload),
        workdir=TESTER_ROOT,
    )
    try:
        probes = json.loads(out.output.strip().splitlines()[-1]) if out.output.strip() else []
    except (ValueError, IndexError):
        probes = []
    return coverage.dynamic_api_coverage(endpoints, probes)
