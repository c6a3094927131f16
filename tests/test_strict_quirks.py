"""Every golden-suite quirk of issue 9, on synthetic fixture tasks, under both profiles.

Fixtures: tests/fixtures/strict_quirks/<quirk>/ (original tasks reproducing what real RepoGenesis
suites do; never upstream files) served by one stdlib items service (strict_quirks/server/).
Repos: `solution` (the service; plus `white_box_app/` for the white-box task), `404` (the
conformance control: up on the port, 404 to everything) and `empty`. The expected outcome of
each case is the rule in docs/strict-rules.md; compat must keep upstream's numbers.

The unit tests at the top run the plugin and the suite rules without Docker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge.scoring import grading
from bridge.scoring.images.base import TESTER_PINS
from bridge.scoring.python import pytest_results
from bridge.scoring.python.collection import white_box_denominator
from bridge.scoring.python.plan import suite_timing
from bridge.scoring.python.strict import stage_golden_suite
from bridge.scoring.result import ProfileResult, ScoreResult
from bridge.scoring.run.conformance import make_control_repos
from bridge.tasks.model import load_task
from bridge.tasks.suite import (
    agent_imports,
    detect_quirks,
    filter_addopts,
    optional_imports,
    pinned_ini_options,
    read_ini_section,
    static_test_ids,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "strict_quirks"
PLUGIN_DIR = Path(__file__).resolve().parent.parent / "bridge" / "scoring" / "assets"


# ----------------------------------------------------------------------------- suite rules (no Docker)


def test_addopts_filter_keeps_suite_meaning_and_drops_what_strict_owns() -> None:
    kept, dropped = filter_addopts(
        "-q -v --tb=short --strict-markers -n auto --dist load --cov=app --cov-report "
        "term --cov-fail-under=80 --html=r.html --self-contained-html -x --maxfail 3 "
        "--junitxml=j.xml -p no:warnings --timeout=30 -m 'not slow' -c other.ini"
    )
    assert kept == ["-q", "-v", "--tb=short", "--strict-markers", "-p", "no:warnings", "--timeout=30", "-m", "not slow"]
    assert "-n" in dropped and "--cov=app" in dropped and "-x" in dropped and "--junitxml=j.xml" in dropped
    assert filter_addopts("-n4 --cov")[0] == []


def test_tool_pytest_header_in_pytest_ini_is_ignored_like_pytest_does(tmp_path: Path) -> None:
    ini = tmp_path / "pytest.ini"
    ini.write_text("[tool:pytest]\naddopts = -p no:python\ntimeout = 1\n")
    assert read_ini_section(ini) is None
    opts = pinned_ini_options(ini, per_test_timeout=42)
    assert opts == ["-o", "addopts=", "-o", "timeout=42"]
    ini.write_text("[pytest]\naddopts = -q -n 2\ntimeout = 7\n")
    assert pinned_ini_options(ini) == ["-o", "addopts=-q"]  # the suite's own timeout is kept


def test_suite_timing_bounds_the_whole_run() -> None:
    per_test, budget, hard = suite_timing(300)
    assert (per_test, budget, hard) == (60, 235, 330)
    per_test, budget, hard = suite_timing(40)
    assert per_test == 10 and budget + per_test <= 40 and hard > 40


def test_static_ids_and_white_box_detection() -> None:
    ids = static_test_ids(FIXTURES / "broken_tests" / "tests")
    assert ids["tests/test_broken_import.py"] == [
        "tests/test_broken_import.py::test_never_runs_a",
        "tests/test_broken_import.py::test_never_runs_b",
    ]
    assert static_test_ids(FIXTURES / "runner_class" / "tests")["tests/test_runner.py"] == []
    assert agent_imports(FIXTURES / "white_box" / "tests") == ["app"]
    assert agent_imports(FIXTURES / "root_ini" / "tests") == []  # `from conftest import` ships with the suite
    task = load_task(FIXTURES / "white_box")
    assert task.white_box
    assert white_box_denominator(task, ["tests/test_core.py::test_add"]) == [
        "tests/test_core.py::test_add",
        "tests/test_core.py::test_version",
    ]


def test_quirk_detection_labels() -> None:
    def quirks(name: str) -> list[str]:
        task = load_task(FIXTURES / name)
        return detect_quirks(task.tests_dir, task.test_extras, provided=TESTER_PINS)

    assert "addopts:-q" in quirks("addopts_q") and "markers" in quirks("addopts_q")
    assert "ini[tool:pytest]-ignored" in quirks("tool_pytest_header")
    assert "root-pytest.ini" in quirks("root_ini")
    assert any(q.startswith("plugins:") and "xdist" in q for q in quirks("plugin_options"))
    assert "pytest.exit" in quirks("session_exit")
    # synapse-style `try: import jsonschema ... = None` + skipif: flagged unless the task (or the
    # tester's own pins, like requests) provides the package
    assert optional_imports(FIXTURES / "optional_import" / "tests") == ["requests", "rgbridge_undeclared_schema_lib"]
    assert "optional-import:rgbridge_undeclared_schema_lib" in quirks("optional_import")
    assert not [q for q in quirks("skip_gates") if q.startswith("optional-import")]
    assert "autouse-skip" in quirks("autouse_poll")
    assert "white-box:app" in quirks("white_box")
    assert "no-service" in quirks("no_service")
    assert {"runner-class", "no-collectable-tests"} <= set(quirks("runner_class"))
    assert {"url:SERVICE_BASE_URL", "url:API_BASE_URL"} <= set(quirks("base_urls"))


def test_item_outcome_from_phases() -> None:
    ok = {"outcome": "passed"}
    assert pytest_results.item_outcome({"setup": ok, "call": ok, "teardown": ok})[0] == "passed"
    assert pytest_results.item_outcome({"setup": {"outcome": "skipped", "message": "down"}, "teardown": ok})[:2] == (
        "skipped",
        "down",
    )
    assert pytest_results.item_outcome({"setup": {"outcome": "failed"}, "teardown": ok})[0] == "error"
    assert pytest_results.item_outcome({"setup": ok, "call": {"outcome": "failed"}, "teardown": ok})[0] == "failed"
    assert pytest_results.item_outcome({"setup": ok, "call": ok, "teardown": {"outcome": "failed"}})[0] == "error"
    assert pytest_results.item_outcome({"setup": ok})[0] == "not_run"
    assert pytest_results.parse_plugin_report(b"not json") is None
    assert pytest_results.parse_plugin_report(json.dumps({"version": 2}).encode()) is None


def _run_plugin(tmp_path: Path, files: dict[str, str], *args: str, budget: str = "") -> pytest_results.PluginReport:
    suite = tmp_path / "suite"
    (suite / "tests").mkdir(parents=True)
    for rel, text in files.items():
        (suite / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    return _run_suite(suite, tmp_path / "report.json", *args, budget=budget)


def _run_suite(suite: Path, report: Path, *args: str, budget: str = "") -> pytest_results.PluginReport:
    """Run `suite/tests` with the plugin the way the tester does, on the host (no Docker)."""
    env = {**os.environ, "PYTHONPATH": str(PLUGIN_DIR), "RGBRIDGE_REPORT": str(report)}
    env.pop("PYTEST_ADDOPTS", None)
    if budget:
        env["RGBRIDGE_SUITE_BUDGET"] = budget
    ini = suite / "tests" / "pytest.ini"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests",
        "--rootdir",
        str(suite),
        "-p",
        "no:cacheprovider",
        "-p",
        "rgbridge_pytest_report",
        *pinned_ini_options(ini if ini.exists() else None),
        *args,
    ]
    if ini.exists():
        cmd[4:4] = ["-c", str(ini)]
    subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=120, check=False)
    parsed = pytest_results.parse_plugin_report(report.read_bytes())
    assert parsed is not None
    return parsed


def test_plugin_records_collection_whatever_the_verbosity(tmp_path: Path) -> None:
    """Issue 9: `addopts = -q` plus our `-q` gave `tests/test_x.py: 2` lines and an empty
    denominator; the plugin's record does not depend on the terminal format."""
    report = _run_plugin(
        tmp_path,
        {
            "tests/pytest.ini": "[pytest]\naddopts = -q\n",
            "tests/test_x.py": "def test_a():\n    pass\n\ndef test_b():\n    assert False\n",
        },
        "--collect-only",
        "-q",
    )
    assert report.collected == ["tests/test_x.py::test_a", "tests/test_x.py::test_b"]
    legacy = pytest_results.parse_collect_only("tests/test_x.py: 2\n")
    assert legacy == []  # what the old text parser made of the same suite


def test_plugin_records_outcomes_and_a_session_exit(tmp_path: Path) -> None:
    report = _run_plugin(
        tmp_path,
        {
            "tests/conftest.py": """
            import pytest

            @pytest.fixture(autouse=True)
            def gate(request):
                if request.node.name == "test_c":
                    pytest.exit("service down")
        """,
            "tests/test_x.py": "def test_a():\n    pass\n\ndef test_b():\n    assert False\n\ndef test_c():\n    pass\n"
            "\ndef test_d():\n    pass\n",
        },
    )
    results = {r.nodeid: r.outcome for r in pytest_results.results_from_plugin(report)}
    assert results["tests/test_x.py::test_a"] == "passed" and results["tests/test_x.py::test_b"] == "failed"
    assert report.exit_reason and "service down" in report.exit_reason
    p = grading.strict_pass_at_1(report.collected, pytest_results.results_from_plugin(report))
    assert (p.passed, p.total) == (1, 4)  # the exit does not shrink the denominator


def test_plugin_suite_deadline_stops_starting_items(tmp_path: Path) -> None:
    report = _run_plugin(
        tmp_path,
        {
            "tests/test_x.py": "import time\n\n"
            + "".join(f"def test_{i}():\n    time.sleep(0.4)\n\n" for i in range(10)),
        },
        budget="1",
    )
    assert report.deadline_hit
    assert len(report.collected) == 10 and 1 <= len(report.tests) < 10


def test_deadline_stop_is_not_blamed_on_the_suite(tmp_path: Path) -> None:
    """Real TaskManagement run (all-404 control): pytest reports strict's own deadline stop as an
    interruption, and the result said "the suite ended the session early" as if the suite had
    called pytest.exit(). Only the deadline note belongs there."""
    report = _run_plugin(
        tmp_path / "deadline",
        {
            "tests/test_x.py": "import time\n\n"
            + "".join(f"def test_{i}():\n    time.sleep(0.4)\n\n" for i in range(10)),
        },
        budget="1",
    )
    assert report.deadline_hit and report.exit_reason and pytest_results.DEADLINE_STOP_REASON in report.exit_reason
    notes = pytest_results.session_notes(report, 1)
    assert notes == ["suite deadline (1s) reached; items not started count as not passed"]
    exited = _run_plugin(
        tmp_path / "exit",
        {
            "tests/conftest.py": """
            import pytest

            @pytest.fixture(autouse=True)
            def gate():
                pytest.exit("service down")
        """,
            "tests/test_x.py": "def test_a():\n    pass\n",
        },
        budget="60",
    )
    assert not exited.deadline_hit
    assert [
        n for n in pytest_results.session_notes(exited, 60) if "ended the session early" in n and "service down" in n
    ]


def test_staged_suite_reads_the_task_readme_beside_its_tests(tmp_path: Path) -> None:
    """Real synapse suite: its contract tests open `<tests>/../README.md`; strict restored the
    README in the service's repo only, so the tester had none and a perfect submission failed
    them. The staged tester workdir now holds the task's README."""
    task = load_task(FIXTURES / "readme_reader")
    staged = tmp_path / "work"
    staged.mkdir()
    stage_golden_suite(task, staged)
    assert (staged / "README.md").read_bytes() == task.readme_path.read_bytes()
    report = _run_suite(staged, tmp_path / "report.json")
    results = {r.nodeid: r.outcome for r in pytest_results.results_from_plugin(report)}
    assert results == {
        "tests/test_readme_contract.py::test_readme_present_and_sections": "passed",
        "tests/test_readme_contract.py::test_readme_schemas_are_json": "passed",
    }


# ----------------------------------------------------------------------------- real Docker, both profiles

CASES: dict[str, tuple[str, str]] = {
    "addopts_q": ("addopts_q", "solution"),
    "plugin_options": ("plugin_options", "solution"),
    "tool_pytest_header": ("tool_pytest_header", "solution"),
    "root_ini": ("root_ini", "solution"),
    "skip_gates": ("skip_gates", "solution"),
    "skip_gates_404": ("skip_gates", "404"),
    "session_exit": ("session_exit", "solution"),
    "session_exit_404": ("session_exit", "404"),
    "autouse_poll": ("autouse_poll", "solution"),
    "white_box": ("white_box", "solution"),
    "white_box_empty": ("white_box", "empty"),
    "no_service": ("no_service", "solution"),
    "no_service_empty": ("no_service", "empty"),
    "runner_class": ("runner_class", "solution"),
    "runner_class_again": ("runner_class", "404"),
    "broken_tests": ("broken_tests", "solution"),
    "base_urls": ("base_urls", "solution"),
    "readme_reader": ("readme_reader", "solution"),
    "optional_import": ("optional_import", "solution"),
}


@pytest.fixture(scope="module")
def quirks(docker_client, tmp_path_factory):
    base = tmp_path_factory.mktemp("quirks")
    controls = make_control_repos(base / "controls")
    from bridge.scoring.run.engine import ScoreOptions, score_repo
    from bridge.scoring.types import ScoreRequest

    def repo_for(quirk: str, kind: str) -> Path:
        if kind != "solution":
            return controls[kind]
        repo = base / "repos" / quirk
        shutil.copytree(FIXTURES / "server", repo)
        if quirk == "white_box":
            shutil.copytree(FIXTURES / "white_box_app", repo, dirs_exist_ok=True)
        if quirk == "readme_reader":  # the agent rewrote the README it was given
            (repo / "README.md").write_text("# Items service\n\nRewritten by the agent.\n")
        return repo

    def run(case: str) -> ScoreResult:
        quirk, kind = CASES[case]
        task = load_task(FIXTURES / quirk)
        return score_repo(
            task,
            repo_for(quirk, kind),
            ScoreRequest(
                profile="both",
                use_cache=False,
                output_dir=base / "out" / case,
                run_id=f"test-quirk-{case.replace('_', '-')}",
            ),
            ScoreOptions(client=docker_client),
        )

    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="quirk-score")
    # runner_class_again must see the cached task error of runner_class: it runs after it
    first = {c: pool.submit(run, c) for c in CASES if c != "runner_class_again"}
    futures: dict[str, Future] = dict(first)
    futures["runner_class_again"] = pool.submit(lambda: (first["runner_class"].result(), run("runner_class_again"))[1])
    yield futures, base
    pool.shutdown(wait=True, cancel_futures=True)


def _both(quirks, case: str) -> tuple[ProfileResult, ProfileResult]:
    futures, _ = quirks
    result: ScoreResult = futures[case].result(timeout=1500)
    return result.profile("strict"), result.profile("compat")


def _counts(p: ProfileResult) -> tuple[int, int]:
    return p.pass_at_1.passed, p.pass_at_1.total


@pytest.mark.docker
def test_addopts_q_solution_scores_one_in_strict(quirks) -> None:
    strict, compat = _both(quirks, "addopts_q")
    assert strict.outcome == "scored" and strict.pass_at_1.score == 1.0 and _counts(strict) == (3, 3)
    assert _counts(compat) == (3, 3)


@pytest.mark.docker
def test_plugin_options_from_the_suite_cannot_change_what_strict_counts(quirks) -> None:
    strict, compat = _both(quirks, "plugin_options")
    assert strict.outcome == "scored" and _counts(strict) == (3, 3)
    assert compat.pass_at_1.passed == 3  # upstream runs them with xdist/cov/html as asked


@pytest.mark.docker
def test_tool_pytest_header_is_ignored(quirks) -> None:
    strict, compat = _both(quirks, "tool_pytest_header")
    assert _counts(strict) == (3, 3) and _counts(compat) == (3, 3)


@pytest.mark.docker
def test_task_root_pytest_ini_is_carried_by_strict_only(quirks) -> None:
    strict, compat = _both(quirks, "root_ini")
    assert _counts(strict) == (2, 2)
    assert compat.pass_at_1.passed == 0 and compat.pass_at_1.errors >= 1  # upstream W3: root ini dropped


@pytest.mark.docker
def test_skip_gates(quirks) -> None:
    strict, compat = _both(quirks, "skip_gates")
    assert _counts(strict) == (3, 3) and _counts(compat) == (3, 3)
    strict, compat = _both(quirks, "skip_gates_404")
    assert strict.outcome == "scored" and _counts(strict) == (0, 3) and strict.pass_at_1.skipped == 3
    assert compat.pass_at_1.total == 0  # upstream: skips are not counted (W10)


@pytest.mark.docker
def test_session_exit_counts_every_collected_item(quirks) -> None:
    strict, compat = _both(quirks, "session_exit")
    assert _counts(strict) == (3, 3)
    strict, compat = _both(quirks, "session_exit_404")
    assert strict.outcome == "scored" and _counts(strict) == (0, 3)
    assert any("ended the session" in n for n in strict.notes)
    assert compat.pass_at_1.total == 0


@pytest.mark.docker
def test_autouse_poll_is_bounded_by_the_suite_deadline(quirks) -> None:
    strict, compat = _both(quirks, "autouse_poll")
    assert strict.outcome == "scored" and _counts(strict) == (0, 10)
    assert strict.pass_at_1.not_run >= 5 and any("deadline" in n for n in strict.notes)
    assert not any("ended the session" in n for n in strict.notes)  # the stop was ours, not the suite's
    assert compat.outcome != "infra_error" and compat.pass_at_1.passed == 0


@pytest.mark.docker
def test_white_box_suite(quirks) -> None:
    strict, compat = _both(quirks, "white_box")
    assert strict.white_box and _counts(strict) == (2, 2)
    assert _counts(compat) == (2, 2)
    strict, _ = _both(quirks, "white_box_empty")
    assert strict.white_box and strict.outcome == "deploy_failed" and strict.pass_at_1.total == 2


@pytest.mark.docker
def test_suite_that_never_touches_the_service(quirks) -> None:
    strict, compat = _both(quirks, "no_service")
    assert _counts(strict) == (2, 2) and _counts(compat) == (2, 2)
    strict, compat = _both(quirks, "no_service_empty")
    assert strict.outcome == "deploy_failed" and _counts(strict) == (0, 2)  # DSR gates every suite
    assert compat.pass_at_1.passed == 2  # upstream runs the tests even when nothing deployed


@pytest.mark.docker
def test_runner_class_suite_is_a_task_error_found_once(quirks) -> None:
    strict, compat = _both(quirks, "runner_class")
    assert strict.outcome == "task_error" and "collects no test items" in (strict.error or "")
    assert compat.outcome == "scored" and compat.pass_at_1.total == 0
    strict, _ = _both(quirks, "runner_class_again")
    assert strict.outcome == "task_error"
    _, base = quirks
    assert "cached collection" in (base / "out" / "runner_class_again" / "logs" / "strict" / "collect.log").read_text()


@pytest.mark.docker
def test_name_error_and_unimportable_module(quirks) -> None:
    strict, compat = _both(quirks, "broken_tests")
    assert _counts(strict) == (3, 6)
    by_id = {t.nodeid: t.outcome for t in strict.tests}
    assert by_id["tests/test_items.py::test_uses_time_without_import"] == "failed"
    assert by_id["tests/test_broken_import.py::test_never_runs_a"] == "error"
    assert compat.pass_at_1.passed == 0 and compat.pass_at_1.errors >= 1  # upstream W4


@pytest.mark.docker
def test_base_urls(quirks) -> None:
    strict, compat = _both(quirks, "base_urls")
    assert _counts(strict) == (3, 3)
    assert _counts(compat) == (1, 3)  # upstream sets neither SERVICE_BASE_URL nor API_BASE_URL


@pytest.mark.docker
def test_suite_reading_the_readme_finds_the_original_in_the_tester(quirks) -> None:
    strict, compat = _both(quirks, "readme_reader")
    assert strict.outcome == "scored" and _counts(strict) == (2, 2)  # the task's README, not the agent's edit
    assert _counts(compat) == (0, 2)  # upstream: the suite reads the agent's copy of the README


@pytest.mark.docker
def test_optional_import_of_an_undeclared_package_skips_and_is_not_passed(quirks) -> None:
    strict, compat = _both(quirks, "optional_import")
    assert strict.outcome == "scored" and _counts(strict) == (1, 2) and strict.pass_at_1.skipped == 1
    assert _counts(compat) == (1, 1)  # upstream: skips are not counted (W10)
