"""strict for Java: upstream's deploy-and-test job done right.

* The tester's copy of the repo: the golden `src/test` *replaces* the agent's, `target/`,
  `.mvn/` (maven.config, jvm.config, extensions) and Maven wrappers are dropped, and every pom is
  rewritten so no test gate remains (pom.py); the gate properties are pinned on the command
  line as well. Maven runs offline (`-o`) from the dependency layer; no container has a network.
* The agent's main code is compiled first: a compile error is `build_failed` with the compiler
  output. A golden class that fails to compile counts all its methods as not passed.
* Pass@1 = golden methods passed / golden methods counted from the golden sources (golden.py),
  from Surefire's XML reports only (never Maven's console text); unreported = not run.
* DSR: the agent's service (start.sh, else `mvn spring-boot:run`) answers HTTP on the task port
  in its own container (same security profile and limits as Python); the tester joins its
  network namespace to probe it. Java golden tests start the app in-process, so they run
  whatever DSR says; a repo that does not deploy is reported `deploy_failed` with the in-process
  Pass@1 kept.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from bridge.scoring import grading
from bridge.scoring.deploy import after_suite, wait_deployed
from bridge.scoring.java import golden, surefire
from bridge.scoring.java.common import (
    ensure_layer,
    fetch_reports,
    layer_failure,
    maven_errors,
    replace_golden_tests,
)
from bridge.scoring.java.images import ensure_java_image
from bridge.scoring.java.layers import JavaDependencyError, MavenSources
from bridge.scoring.java.pom import PomError, sanitize_repo_poms
from bridge.scoring.plan import ScoringPlan, run_step
from bridge.scoring.result import DSRResult, PassAt1, ProfileResult, TestCaseResult
from bridge.scoring.run.profile_run import ProfileRun
from bridge.scoring.run.workdir import ASSETS, LogSink, place_file
from bridge.scoring.sandbox.protocol import Sandbox
from bridge.scoring.types import ProgressFn
from bridge.tasks.model import Task

#: dropped from the tester's copy: build output (stale or forged reports), Maven's per-project
#: configuration (extra CLI flags, JVM flags, build extensions) and wrappers.
TESTER_DROP = ("target", ".mvn", "mvnw", "mvnw.cmd")


def _tester_copy(task: Task, repo_dir: Path, dest: Path, *, with_golden: bool = True) -> list[str]:
    shutil.copytree(repo_dir, dest, symlinks=True)
    for name in TESTER_DROP:
        path = dest / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    if with_golden:  # practice checks never touch a golden file
        replace_golden_tests(task, dest)
    return sanitize_repo_poms(dest)


def run_java_strict(run: ProfileRun) -> ProfileResult:
    """Score the run's repo copy; a deploy-only plan (practice mode) measures DSR alone and no
    golden file is copied anywhere."""
    client, task, repo_dir, ctx, logs, progress = run.client, run.task, run.repo_dir, run.ctx, run.logs, run.progress
    deploy_only = run.deploy_only
    place_file(task.readme_path, repo_dir, "README.md")
    items = [] if deploy_only else golden.golden_items(task.tests_dir)
    if not deploy_only and not items:
        raise RuntimeError(f"the golden suite of {task.id} has no test methods")

    def not_passed(results: list[TestCaseResult] | None = None) -> tuple[PassAt1, list[TestCaseResult]]:
        got = results or []
        return grading.strict_pass_at_1(items, got), grading.merge_results(items, got)

    tester_dir = repo_dir.parent / f"{repo_dir.name}-tester"
    has_pom = (repo_dir / "pom.xml").is_file() and not (repo_dir / "pom.xml").is_symlink()
    image = ensure_java_image(client, progress=ctx.image_progress)
    if has_pom:
        try:
            changes = _tester_copy(task, repo_dir, tester_dir, with_golden=not deploy_only)
        except PomError as exc:
            p1, tests = not_passed()
            return run.finish(
                outcome="build_failed",
                dsr=DSRResult(success=False, message=str(exc)),
                build_error=str(exc),
                exit_code=-3,
                pass_at_1=p1,
                tests=tests,
            )
        if changes:
            logs.write("pom-rewrite.log", "\n".join(changes) + "\n")
        progress("strict: resolving Maven dependencies")
        try:
            layer = ensure_layer(
                client,
                tester_dir,
                timeout=task.manifest.timeouts.build,
                sources=run.maven or MavenSources.from_env(),
                progress=ctx.image_progress,
            )
        except JavaDependencyError as exc:
            p1, tests = not_passed()
            return layer_failure(exc, logs, run.finish, exit_code=-3, pass_at_1=p1, tests=tests)
        if layer.log_tail:
            logs.write("build.log", layer.log_tail)
        image = layer.tag

    plan = run.plan
    with run.sandbox("service", image) as service:
        progress("strict: starting the service")
        service.start()
        sources = {"assets": ASSETS} | ({"tester-repo": tester_dir} if has_pom and not deploy_only else {})
        with run.sandbox("tester", image, sources=sources, share_network_of=service) as tester:
            tester.start()
            if deploy_only or not has_pom:
                dsr, oom = wait_deployed(task, plan, service, tester, logs, progress)
                if deploy_only:
                    return run.finish(outcome="scored" if dsr.success else "deploy_failed", dsr=dsr, oom_killed=oom)
                p1, tests = not_passed()
                message = "no pom.xml: the golden tests cannot be built"
                return run.finish(
                    outcome="build_failed" if dsr.success else "deploy_failed",
                    dsr=dsr,
                    pass_at_1=p1,
                    tests=tests,
                    build_error=message,
                    oom_killed=oom,
                )
            return _build_and_test(
                task,
                plan,
                service,
                tester,
                items,
                logs=logs,
                progress=progress,
                finish=run.finish,
                not_passed=not_passed,
            )


def _build_and_test(
    task: Task,
    plan: ScoringPlan,
    service: Sandbox,
    tester: Sandbox,
    items: list[str],
    *,
    logs: LogSink,
    progress: ProgressFn,
    finish: Callable[..., ProfileResult],
    not_passed: Callable[..., tuple[PassAt1, list[TestCaseResult]]],
) -> ProfileResult:
    timeouts = task.manifest.timeouts
    progress("strict: compiling the repo (offline)")
    build = run_step(tester, plan.step("compile"))
    logs.write("compile.log", build.output)
    dsr, oom = wait_deployed(task, plan, service, tester, logs, progress)
    if build.exit_code != 0:
        p1, tests = not_passed()
        outcome = "timeout" if build.timed_out else "build_failed"
        return finish(
            outcome=outcome,
            dsr=dsr,
            pass_at_1=p1,
            tests=tests,
            exit_code=build.exit_code,
            build_error="Maven compile failed:\n" + maven_errors(build.output),
            oom_killed=oom,
        )

    progress(f"strict: running {len(items)} golden tests")
    run = run_step(tester, plan.step("tests"))
    logs.write("tests.log", run.output)
    reports = fetch_reports(plan, tester)
    results, bad = surefire.parse_reports(reports)
    if bad:
        logs.write("reports-refused.log", "\n".join(bad) + "\n")
    p1, tests = not_passed(results)
    error = None
    if run.timed_out:
        error = f"golden tests exceeded {timeouts.tests}s"
    elif "COMPILATION ERROR" in run.output and not reports:
        error = "golden tests did not compile against the repo:\n" + maven_errors(run.output)
    dynamic, oom_now = after_suite(task, plan, service, tester, logs, probe=dsr.success)
    outcome = "timeout" if run.timed_out else ("scored" if dsr.success else "deploy_failed")
    return finish(
        outcome=outcome,
        dsr=dsr,
        pass_at_1=p1,
        tests=tests,
        exit_code=run.exit_code,
        dynamic_api_coverage=dynamic,
        oom_killed=oom or oom_now,
        error=error,
    )
