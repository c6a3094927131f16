"""Strict grading of a Python run: the golden suite collected, the service's DSR, the suite run
in the tester, its plugin report (cross-checked against JUnit XML) turned into Pass@1, and the
README endpoints probed. Never from log text; rules in docs/strict-rules.md.
"""

from __future__ import annotations

from collections.abc import Callable

from bridge.scoring import coverage, grading
from bridge.scoring.deploy import after_suite, wait_deployed
from bridge.scoring.plan import ScoringPlan, run_step
from bridge.scoring.python import pytest_results
from bridge.scoring.python.collection import Collection, collect_suite, white_box_denominator
from bridge.scoring.python.plan import JUNIT_MAX_BYTES, JUNIT_PATH, REPORT_PATH
from bridge.scoring.result import APICoverage, DSRResult, PassAt1, ProfileResult, TestCaseResult
from bridge.scoring.run.workdir import LogSink
from bridge.scoring.sandbox.protocol import Sandbox
from bridge.scoring.types import ProgressFn
from bridge.tasks.model import Task


def grade_suite(
    task: Task,
    plan: ScoringPlan,
    service: Sandbox,
    tester: Sandbox,
    *,
    static_ac: APICoverage,
    logs: LogSink,
    progress: ProgressFn,
    finish: Callable[..., ProfileResult],
) -> ProfileResult:
    """Strict's grade of the deployed service by the golden suite."""
    white_box = task.white_box
    if white_box:
        collection = Collection()
        collected = white_box_denominator(task, [])
    else:
        collection = collect_suite(task, plan, tester, logs)
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

    dsr, oom = wait_deployed(task, plan, service, tester, logs, progress)
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
    budget, hard_limit = int(plan.timeouts["suite_budget"]), int(plan.timeouts["tests_hard_limit"])
    run = run_step(tester, plan.step("tests"))
    logs.write("tests.log", run.output)
    raw_report = tester.copy_out(REPORT_PATH, max_bytes=JUNIT_MAX_BYTES)
    report = pytest_results.parse_plugin_report(raw_report)
    junit = tester.copy_out(JUNIT_PATH, max_bytes=JUNIT_MAX_BYTES)
    junit_results: list[TestCaseResult] = []
    if junit:
        logs.write_bytes("junit.xml", junit)
        try:
            junit_results = pytest_results.parse_junit_xml(junit, known_nodeids=collected)
        except grading.JUnitError as exc:
            logs.write("junit-crosscheck.log", f"JUnit XML unreadable: {exc}\n")
    notes: list[str] = []
    results: list[TestCaseResult] = list(collection_errors)
    if report is not None:
        logs.write_bytes("pytest-report.json", raw_report or b"")
        if white_box:
            collected = white_box_denominator(task, report.collected)
        plugin_results = pytest_results.results_from_plugin(report)
        results += plugin_results
        mismatch = pytest_results.junit_disagreements(plugin_results, junit_results) if junit else []
        if mismatch:
            logs.write("junit-crosscheck.log", "plugin and JUnit XML disagree on:\n" + "\n".join(mismatch) + "\n")
            notes.append(f"JUnit XML disagrees with the plugin on {len(mismatch)} item(s); the plugin's record is used")
        notes += pytest_results.session_notes(report, budget)
    elif not run.timed_out:
        notes.append(f"pytest wrote no report (exit {run.exit_code}); no item counts as passed")
    merged = grading.merge_results(collected, results)
    pass_at_1 = grading.strict_pass_at_1(collected, results)

    progress("strict: probing README endpoints")
    dynamic, oom = after_suite(task, plan, service, tester, logs, probe=True)
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
