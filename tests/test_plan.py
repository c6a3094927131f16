"""Scoring plans are data (JSON round trip, per profile and language), the runners execute them
through the Sandbox protocol only (an in-memory runtime stands in for Docker here), and
`rgbridge plan` prints them. The real Docker runtime is tested in tests/test_sandbox.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from bridge.scoring.images.sets import DepsImage
from bridge.scoring.plan import ScoringPlan
from bridge.scoring.python import compat as compat_mod
from bridge.scoring.python import strict as strict_mod
from bridge.scoring.python.plan import COLLECT_TIMEOUT, TESTER_LIMITS, suite_timing
from bridge.scoring.run.runner import plan_for, run_one_profile
from bridge.scoring.run.workdir import LogSink, ScoreContext
from bridge.scoring.sandbox.protocol import ExecOutcome, Sandbox, SandboxLimits, SandboxSpec, SandboxState, WaitOutcome
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS = Catalog.from_options(REPO_ROOT / "tasks")


@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
@pytest.mark.parametrize("profile", ["strict", "compat"])
def test_plan_round_trips_as_json(task_id: str, profile: str) -> None:
    plan = plan_for(TASKS.get(task_id), profile)
    text = plan.to_json()
    again = ScoringPlan.model_validate_json(text)
    assert again == plan and again.to_json() == text
    assert json.loads(text)["profile"] == profile


def test_python_plans_differ_by_profile() -> None:
    task = TASKS.get("kv-ledger")
    strict, compat = plan_for(task, "strict"), plan_for(task, "compat")
    assert [s.role for s in strict.sandboxes] == ["service", "tester"]
    tester = strict.sandbox("tester")
    assert tester.shares_network_of == "service" and tester.limits == TESTER_LIMITS
    # golden tests go to the tester only; the service holds the repo and our scripts
    assert {c.source for c in strict.sandbox("service").copies} == {"repo", "assets"}
    assert "golden-suite" in {c.source for c in tester.copies}
    per_test, budget, hard = suite_timing(task.manifest.timeouts.tests)
    tests = strict.step("tests")
    assert tests.timeout == hard and tests.env and tests.env["RGBRIDGE_SUITE_BUDGET"] == str(budget)
    assert f"timeout={per_test}" in tests.argv and "--junitxml=/tmp/rgbridge-junit.xml" in tests.argv
    assert strict.step("collect").timeout == COLLECT_TIMEOUT
    assert strict.step("collect").argv[:-2] == tests.argv[:-2]
    assert [s.role for s in compat.sandboxes] == ["compat"]
    assert [(s.name, s.kind) for s in compat.steps] == [("run", "wait")]
    assert compat.sandbox("compat").command == ["bash", "/opt/rgbridge/compat_entrypoint.sh"]
    for plan in (strict, compat):
        for box in plan.sandboxes:
            assert box.limits.cap_drop == ["ALL"] and box.limits.network_mode == "none"
            assert box.limits.security_opt == ["no-new-privileges:true"] and box.limits.user == "10001:10001"


def test_deploy_only_and_java_plans() -> None:
    practice = plan_for(TASKS.get("kv-ledger"), "strict", deploy_only=True)
    assert {s.name for s in practice.steps} == {"launcher-entry", "wait-ready", "oom-check"}
    java = TASKS.get("link-shortener")
    strict = plan_for(java, "strict", service_limits=SandboxLimits(mem_limit="3g"))
    assert strict.language == "java" and strict.step("compile").argv[:4] == ["mvn", "-o", "-B", "-Dstyle.color=never"]
    assert strict.step("tests").argv[-1] == "test" and strict.step("tests").timeout == java.manifest.timeouts.tests
    assert strict.sandbox("tester").limits.mem_limit == "3g"  # Java testers run agent code: service limits
    assert "collect" not in {s.name for s in strict.steps}
    assert plan_for(java, "compat").sandbox("compat").command == ["bash", "/opt/rgbridge/java_compat.sh"]
    with pytest.raises(ValueError):
        plan_for(java, "lenient")


def test_cli_prints_the_plan() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "plan", "kv-ledger", "--profile", "compat"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
    ).stdout
    assert ScoringPlan.model_validate_json(out) == plan_for(TASKS.get("kv-ledger"), "compat")


# ----------------------------------------------------------------------------- runners over a fake runtime


class FakeSandbox:
    def __init__(self, spec: SandboxSpec, script: dict[str, str], journal: list[tuple]) -> None:
        self.spec, self.script, self.journal = spec, script, journal
        self.removed = False

    @property
    def image_id(self) -> str:
        return "sha256:fake"

    def copy_in(self, host_dir: Path, dest: str, *, uid: int = 10001, gid: int = 10001) -> None:
        assert host_dir.is_dir()
        self.journal.append(("copy_in", self.spec.kind, dest, uid))

    def start(self) -> None:
        self.journal.append(("start", self.spec.kind))

    def exec(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        max_output: int = 1_000_000,
        user: str | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecOutcome:
        self.journal.append(("exec", self.spec.kind, argv[-1] if argv[0] == "cat" else argv[1], timeout))
        for key, output in self.script.items():
            if key in " ".join(argv):
                return ExecOutcome(exit_code=0, output=output, timed_out=False)
        return ExecOutcome(exit_code=1, output="", timed_out=False)

    def wait(self, timeout: float) -> WaitOutcome:
        self.journal.append(("wait", self.spec.kind, timeout))
        return WaitOutcome(exit_code=0, timed_out=False, oom_killed=False)

    def state(self) -> SandboxState:
        return SandboxState(running=True, exit_code=None, oom_killed=False)

    def attach(self, *, stdout: bool) -> Iterable[bytes]:
        return iter([self.script.get("stdout" if stdout else "stderr", "").encode()])

    def logs(self, *, max_bytes: int = 1_000_000, stdout: bool = True, stderr: bool = True) -> str:
        return self.script.get("stdout", "") if stdout else self.script.get("stderr", "")

    def copy_out(self, path: str, *, max_bytes: int) -> bytes | None:
        return None

    def remove(self) -> None:
        self.removed = True
        self.journal.append(("remove", self.spec.kind))

    def __enter__(self) -> FakeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class FakeRuntime:
    name = "fake"

    def __init__(self, script: dict[str, str]) -> None:
        self.script, self.journal, self.specs = script, [], []

    def create(self, spec: SandboxSpec) -> Sandbox:
        self.specs.append(spec)
        return FakeSandbox(spec, self.script, self.journal)


@pytest.fixture
def no_image_builds(monkeypatch):
    fake = DepsImage(tag="fake:deps", cached=True, seconds=0.0)
    for module in (strict_mod, compat_mod):
        monkeypatch.setattr(module, "ensure_deps_image", lambda *a, **k: fake)
    monkeypatch.setattr(strict_mod, "ensure_tester_image", lambda *a, **k: "fake:tester")
    monkeypatch.setattr(compat_mod, "compat_base_image", lambda *a, **k: None)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print('hi')\n")
    return repo


def test_compat_runs_its_plan_through_the_protocol(tmp_path, no_image_builds) -> None:
    task = TASKS.get("kv-ledger")
    log = (
        ">>>>> DSR_START\nDSR_RESULT=true\nDSR_MESSAGE=ok\n>>>>> DSR_END\n>>>>> TEST_START\n3 passed, 1 failed\n"
        "TEST_EXIT_CODE=1\n>>>>> TEST_END\n"
    )
    runtime = FakeRuntime({"stdout": log})
    ctx = ScoreContext(run_id="fake-run", runtime=runtime)
    result = run_one_profile(
        None,
        task,
        _repo(tmp_path),
        "compat",
        ctx=ctx,
        logs=LogSink(tmp_path / "logs"),  # type: ignore[arg-type]
        progress=lambda _m: None,
    )
    assert result.outcome == "scored" and result.dsr.success
    assert (result.pass_at_1.passed, result.pass_at_1.total) == (3, 4)
    plan = plan_for(task, "compat")
    (spec,) = runtime.specs
    assert spec.command == plan.sandbox("compat").command and spec.env == plan.sandbox("compat").env
    assert spec.image == "fake:deps" and spec.run_id == "fake-run" and spec.kind == "compat"
    assert runtime.journal == [
        ("copy_in", "compat", "/repo", 10001),
        ("copy_in", "compat", "/opt/rgbridge", 0),
        ("start", "compat"),
        ("wait", "compat", 900),
        ("remove", "compat"),
    ]


def test_strict_practice_check_runs_its_plan_through_the_protocol(tmp_path, no_image_builds) -> None:
    task = TASKS.get("kv-ledger")
    runtime = FakeRuntime(
        {"rgbridge-service/entry": "./start.sh\n", "wait_ready.py": '{"ready": true, "status": 200, "seconds": 0.4}\n'}
    )
    ctx = ScoreContext(run_id="fake-run", runtime=runtime)
    result = run_one_profile(
        None,
        task,
        _repo(tmp_path),
        "strict",
        ctx=ctx,
        logs=LogSink(tmp_path / "logs"),  # type: ignore[arg-type]
        progress=lambda _m: None,
        deploy_only=True,
    )
    assert result.outcome == "scored" and result.dsr.success and result.dsr.time_to_ready == 0.4
    service, tester = runtime.specs
    assert tester.share_network_of is not None and tester.share_network_of.spec is service  # type: ignore[attr-defined]
    assert (service.image, tester.image) == ("fake:deps", "fake:tester")
    assert ("copy_in", "tester", "/work", 10001) in runtime.journal  # an empty folder: no golden file
    wait_ready = task.manifest.timeouts.startup + 10
    assert ("exec", "tester", "/work/.rgbridge/wait_ready.py", wait_ready) in runtime.journal
    assert runtime.journal[-2:] == [("remove", "tester"), ("remove", "strict")]
