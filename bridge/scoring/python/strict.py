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

What runs where is the plan's (bridge/scoring/python/plan.py), which the runner receives; this
module builds the images, creates the sandboxes and hands over to grading (strict_grade.py,
collection.py, deploy.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bridge.scoring.deploy import wait_deployed
from bridge.scoring.images.base import DependencyInstallError, ensure_tester_image
from bridge.scoring.images.sets import DepsImage, ensure_deps_image
from bridge.scoring.python.plan import OUR_INI, golden_ini
from bridge.scoring.python.strict_grade import grade_suite
from bridge.scoring.result import DSRResult, PassAt1, ProfileResult
from bridge.scoring.run.profile_run import ProfileRun
from bridge.scoring.run.workdir import ASSETS, place_file, requirements_of, score_on_accepted_set
from bridge.tasks.model import Task


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
    ini, host = golden_ini(task)
    if host is None:
        (dest / OUR_INI).write_text("[pytest]\n", encoding="utf-8")
    return ini


def test_requirements(task: Task) -> str:
    parts = []
    for path in (task.tests_dir / "requirements.txt", task.test_extras.get("requirements.txt")):
        if path is not None and path.is_file():
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def run_strict(run: ProfileRun) -> ProfileResult:
    """Score the run's repo copy; in a deploy-only plan (practice mode) only DSR is measured and
    the tester holds no golden file at all, so nothing about the tests can leak into a practice check."""
    client, task, repo_dir, ctx, progress = run.client, run.task, run.repo_dir, run.ctx, run.progress
    # The original README is restored before scoring (synapse's tests read it; agents may edit it).
    place_file(task.readme_path, repo_dir, "README.md")

    def build(installer: str | None) -> DepsImage:
        progress("strict: installing dependencies")
        return ensure_deps_image(
            client,
            requirements_of(repo_dir),
            wheelhouse=ctx.wheelhouse,
            timeout=task.manifest.timeouts.build,
            progress=ctx.image_progress,
            env_volume=True,
            allow_pending_check=True,
            installer=installer,
            before_build=lambda: run.ctx.turns.wait("strict"),
        )

    # The score runs while pip checks uv's install; a rejection scores again on pip's own set.
    return score_on_accepted_set(
        build,
        lambda deps: _score_with(run, deps),
        build_failed=lambda exc: _install_failed(run, exc),
        logs=run.logs,
        progress=progress,
        profile="strict",
    )


def _install_failed(run: ProfileRun, exc: DependencyInstallError, *, white_box: bool | None = None) -> ProfileResult:
    """Strict's result when a dependency set could not be installed (the task's or the agent's)."""
    return run.finish(
        outcome="timeout" if exc.timed_out else "build_failed",
        dsr=DSRResult(success=False, message=str(exc)),
        build_error=str(exc),
        exit_code=-3,
        pass_at_1=PassAt1(),
        white_box=white_box,
    )


def _score_with(run: ProfileRun, deps: DepsImage) -> ProfileResult:
    """Score with the service's dependency set ``deps``: the tester's images, then the sandboxes."""
    client, task, repo_dir, ctx, plan = run.client, run.task, run.repo_dir, run.ctx, run.plan
    deploy_only = run.deploy_only
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
            run.logs.write("build.log", exc.log_tail)
            return _install_failed(run, exc, white_box=True)

    with run.sandbox("service", deps.tag, volumes=deps.mounts) as service:
        run.progress("strict: starting the service")
        service.start()
        # not `rgbridge-golden-`: a server starting meanwhile sweeps that prefix (earlier versions'
        # leftovers, bridge/sessions/contamination.py) and would remove a suite being copied in
        with tempfile.TemporaryDirectory(prefix="rgbridge-suite-") as tmp:
            if not deploy_only:
                stage_golden_suite(task, Path(tmp))
            sources = {"golden-suite": Path(tmp), "assets": ASSETS, "repo": repo_dir}
            with run.sandbox("tester", tester_image, sources=sources, share_network_of=service) as tester:
                tester.start()
                if deploy_only:
                    dsr, oom = wait_deployed(task, plan, service, tester, run.logs, run.progress)
                    return run.finish(outcome="scored" if dsr.success else "deploy_failed", dsr=dsr, oom_killed=oom)
                return grade_suite(
                    task,
                    plan,
                    service,
                    tester,
                    static_ac=run.static_ac,
                    logs=run.logs,
                    progress=run.progress,
                    finish=run.finish,
                )
