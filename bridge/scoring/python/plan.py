"""The plans of Python tasks: strict (service + tester, pinned pytest) and compat (upstream's one
container), as `ScoringPlan` data (bridge/scoring/plan.py).

Pytest's command line, the suite's timing and the tester's layout and limits live here: they
are what strict runs, so a reader finds them in the plan (`rgbridge plan TASK`).
"""

from __future__ import annotations

from pathlib import Path

from bridge.scoring.plan import (
    TESTER_ROOT,
    CopyIn,
    ImageRecipe,
    ScoringPlan,
    Step,
    compat_plan_of,
    strict_plan_of,
    tester_sandbox,
)
from bridge.scoring.sandbox.protocol import SandboxLimits
from bridge.tasks.model import Task
from bridge.tasks.suite import DEFAULT_PER_TEST_TIMEOUT, pinned_ini_options

JUNIT_PATH = "/tmp/rgbridge-junit.xml"
REPORT_PATH = "/tmp/rgbridge-report.json"
COLLECT_REPORT_PATH = "/tmp/rgbridge-collect.json"
AGENT_DIR = f"{TESTER_ROOT}/.rgbridge-agent"  # white-box suites only; outside tests/, never collected
JUNIT_MAX_BYTES = 20_000_000
PLUGIN = "rgbridge_pytest_report"  # assets/rgbridge_pytest_report.py, installed in the tester venv
COLLECT_TIMEOUT = 120
OUR_INI = ".rgbridge-pytest.ini"
# Tester limits: generous but bounded; the tester runs our code only, yet shares the pid budget
# of nothing else and must not be starved by a hostile service's output.
TESTER_LIMITS = SandboxLimits(pids_limit=512, mem_limit="2g", nano_cpus=1_000_000_000)
SERVICE_ENV_EXTRA = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1"}


def suite_timing(tests_timeout: int) -> tuple[int, int, int]:
    """(per-test timeout, suite budget, hard limit) in seconds for a task's `tests` timeout.

    No item starts after the budget; the one running then is bounded by the per-test timeout;
    the hard limit (an in-container `timeout -k`) only backs the plugin up.
    """
    per_test = max(5, min(DEFAULT_PER_TEST_TIMEOUT, tests_timeout // 4))
    budget = max(tests_timeout // 2, tests_timeout - per_test - 5)
    return per_test, budget, tests_timeout + 30


def pytest_args(ini: str, ini_opts: list[str]) -> list[str]:
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


def golden_ini(task: Task) -> tuple[str, Path | None]:
    """The ini the golden suite is pinned to in the tester, and its file on the host: the
    task-root pytest.ini, else the golden `tests/pytest.ini`, else an empty ini of ours
    (bridge/scoring/python/strict.py lays the files out the same way)."""
    if "pytest.ini" in task.test_extras:
        return f"{TESTER_ROOT}/pytest.ini", task.test_extras["pytest.ini"]
    if (task.tests_dir / "pytest.ini").is_file():
        return f"{TESTER_ROOT}/tests/pytest.ini", task.tests_dir / "pytest.ini"
    return f"{TESTER_ROOT}/{OUR_INI}", None


def strict_plan(task: Task, *, service_limits: SandboxLimits, deploy_only: bool = False) -> ScoringPlan:
    timeouts = task.manifest.timeouts
    per_test, budget, hard_limit = suite_timing(timeouts.tests)
    white_box = task.white_box and not deploy_only
    tester_inputs = ["tests/requirements.txt and task-root requirements.txt"] if not deploy_only else []
    if white_box:
        tester_inputs.append("the repo's requirements.txt (white-box suite)")
    images = [
        ImageRecipe(
            name="deps",
            base="base",
            inputs=["the repo's requirements.txt"],
            purpose="the service (the set in a volume on the base's venv, mounted read-only)",
        ),
        ImageRecipe(name="tester", base="tester", inputs=tester_inputs, purpose="pytest and the probes"),
    ]
    # In deploy-only (practice) plans the golden-suite folder is empty: no golden file is copied.
    agent_copy = [CopyIn(source="repo", dest=AGENT_DIR)] if white_box else []
    return strict_plan_of(
        task,
        language="python",
        deploy_only=deploy_only,
        images=images,
        service_image="deps",
        service_env=SERVICE_ENV_EXTRA,
        service_limits=service_limits,
        tester=tester_sandbox(
            image="tester", env={"HOME": "/tmp"}, limits=TESTER_LIMITS, suite="golden-suite", extra=agent_copy
        ),
        test_steps=[] if deploy_only else pytest_steps(task, white_box=white_box),
        timeouts={
            "build": timeouts.build,
            "startup": timeouts.startup,
            "per_test": per_test,
            "suite_budget": budget,
            "tests_hard_limit": hard_limit,
        },
        notes=["the service never holds a golden file; the tester never holds agent code unless white-box"],
    )


def pytest_steps(task: Task, *, white_box: bool) -> list[Step]:
    """The golden suite's steps in the tester: its own collection (Pass@1's denominator; a
    white-box suite is counted from the source instead), then the run."""
    per_test, budget, hard_limit = suite_timing(task.manifest.timeouts.tests)
    ini, ini_host = golden_ini(task)
    args = pytest_args(ini, pinned_ini_options(ini_host, per_test_timeout=per_test))
    test_env = task.test_environment() | {"RGBRIDGE_REPORT": REPORT_PATH, "RGBRIDGE_SUITE_BUDGET": str(budget)}
    if white_box:
        test_env["RGBRIDGE_AGENT_PATH"] = AGENT_DIR
    steps = []
    if not white_box:
        steps.append(
            Step(
                name="collect",
                sandbox="tester",
                argv=[*args, "--collect-only", "-q"],
                timeout=COLLECT_TIMEOUT,
                env=task.test_environment() | {"RGBRIDGE_REPORT": COLLECT_REPORT_PATH},
                workdir=TESTER_ROOT,
                failure="nothing collectable is a task error; a timeout is an infra error; cached per task",
            )
        )
    steps.append(
        Step(
            name="tests",
            sandbox="tester",
            argv=[*args, "-rA", f"--junitxml={JUNIT_PATH}"],
            timeout=hard_limit,
            env=test_env,
            workdir=TESTER_ROOT,
            failure="per item, from the plugin report (JUnit cross-checked); past the hard limit: timeout",
        )
    )
    return steps


#: installed when the repo has no requirements.txt (upstream Dockerfile.python step 3)
FALLBACK_PACKAGES = (
    "flask",
    "fastapi",
    "uvicorn",
    "django",
    "djangorestframework",
    "requests",
    "sqlalchemy",
    "pydantic",
)
#: always installed after tests/requirements.txt (upstream Dockerfile.python step 5)
TEST_TOOLS = ("pytest", "pytest-json-report", "requests", "httpx")


def compat_plan(task: Task, *, service_limits: SandboxLimits, deploy_only: bool = False) -> ScoringPlan:
    """Upstream's one Python container; compat has no practice mode (`deploy_only` is ignored)."""
    inputs = [
        "the repo's requirements.txt (else: " + ", ".join(FALLBACK_PACKAGES) + ")",
        "tests/requirements.txt",
        ", ".join(TEST_TOOLS),
    ]
    image = ImageRecipe(
        name="deps",
        base="compat-base (python:3.10-slim when present, else base)",
        inputs=inputs,
        purpose="upstream's container (on a venv base: the set in a volume, mounted read-only)",
    )
    return compat_plan_of(
        task,
        language="python",
        image=image,
        script="compat_entrypoint.sh",
        env={"HOME": "/tmp"},
        limits=service_limits,
        failure="graded from the log by upstream's parsers; past the limit: timeout, zero tests",
        notes=["golden tests are merged into the repo's tests/ (agent-only files survive), as upstream does"],
    )
