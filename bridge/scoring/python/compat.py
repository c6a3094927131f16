"""The compat profile: one container, as the upstream RepoGenesis Docker harness does it.

Golden tests are merged into the repo's `tests/` (upstream W2: agent-only files survive), our
own entrypoint reproduces upstream's phases and markers (assets/compat_entrypoint.sh), and the
log is graded by the upstream parsers (bridge/scoring/upstream.py): its purpose is to reproduce
upstream numbers, weak points included, so IDE results can sit in the published table.

Deliberate deviations, none of which changes a score on a well-behaved repo (documented in
README "Scoring profiles"): the container has no network and runs as uid 10001 with caps
dropped; a failed dependency install is reported as `build_failed` with pip's error instead of
being ignored (`|| true`); the base image is our Debian rootfs unless `python:3.10-slim` exists;
on our base the installed environment is a volume mounted read-only (README "Dependency sets").
"""

from __future__ import annotations

from pathlib import Path

import docker

from bridge.errors import ScoringError
from bridge.scoring import upstream
from bridge.scoring.images.base import (
    APP_DIRS,
    APP_GID,
    APP_UID,
    DependencyInstallError,
    docker_build,
    image_exists,
    official_python_image,
)
from bridge.scoring.images.sets import DepsImage, ensure_deps_image
from bridge.scoring.python.plan import FALLBACK_PACKAGES, TEST_TOOLS
from bridge.scoring.result import DSRResult, ProfileResult
from bridge.scoring.run.profile_run import ProfileRun
from bridge.scoring.run.workdir import merge_tree, requirements_of, score_on_accepted_set
from bridge.scoring.types import ProgressFn
from bridge.tasks.model import Task


def merge_golden_tests(task: Task, repo_dir: Path) -> None:
    """COPY-style merge: golden files overwrite same-named agent files; agent-only files stay."""
    merge_tree(task.tests_dir, repo_dir, "tests", ignore=("__pycache__", "*.pyc", ".DS_Store"))


def compat_base_image(client: docker.DockerClient, progress: ProgressFn | None) -> str | None:
    """Upstream's `python:3.10-slim` plus its apt tools and our non-root user, when that image
    exists locally or can be pulled quickly; None otherwise (then our Debian base is used)."""
    official = official_python_image(client)
    if official is None:
        return None
    tag = f"rgbridge-compat-base:{official.replace(':', '-').replace('/', '-')}"
    if image_exists(client, tag):
        return tag
    dirs = " ".join(APP_DIRS)
    body = (
        "RUN apt-get update && apt-get install -y --no-install-recommends curl procps netcat-openbsd "
        "&& rm -rf /var/lib/apt/lists/*"
        f" && groupadd -g {APP_GID} app && useradd -u {APP_UID} -g {APP_GID} -m app"
        f" && mkdir -p {dirs} && chown {APP_UID}:{APP_GID} {dirs}\n"
    )
    built = docker_build(
        client, dockerfile_body=body, base=official, tag=tag, kind="compat-base", timeout=600, progress=progress
    )
    if not built.ok:
        raise ScoringError(f"could not derive the compat base from {official}: {built.error}")
    return tag


def requirement_lines(text: str) -> list[str]:
    """The requirement lines of a requirements file: blank lines and comments left out."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def compat_extras(task: Task, repo_dir: Path) -> list[str]:
    """What upstream's container installs after the repo's requirements, in order: its fallback
    packages when the repo has no requirements.txt, the golden tests' requirements, the test tools."""
    extras: list[str] = []
    if not (repo_dir / "requirements.txt").is_file():
        extras.extend(FALLBACK_PACKAGES)
    golden_reqs = task.tests_dir / "requirements.txt"
    if golden_reqs.is_file():
        extras.extend(requirement_lines(golden_reqs.read_text(encoding="utf-8", errors="replace")))
    extras.extend(TEST_TOOLS)
    return extras


def run_compat(run: ProfileRun) -> ProfileResult:
    """Upstream's one container over the run's repo copy (static AC taken before the merge)."""
    client, task, repo_dir, ctx, progress = run.client, run.task, run.repo_dir, run.ctx, run.progress
    requirements = requirements_of(repo_dir)
    extras = compat_extras(task, repo_dir)

    base = compat_base_image(client, ctx.image_progress)

    def build(installer: str | None) -> DepsImage:
        progress("compat: building the image")
        try:
            return ensure_deps_image(
                client,
                requirements,
                extra_packages=extras,
                wheelhouse=ctx.wheelhouse,
                base=base,
                timeout=task.manifest.timeouts.build,
                progress=ctx.image_progress,
                env_volume=True,
                allow_pending_check=True,
                installer=installer,
                # strict's set (the requirements alone on our base) from this build's first file
                twin=ctx.turns.paired and base is None,
            )
        finally:
            ctx.turns.done("compat")  # its set is ready (or will not be): strict's build may start

    def build_failed(exc: DependencyInstallError) -> ProfileResult:
        return run.finish(
            outcome="timeout" if exc.timed_out else "build_failed",
            dsr=DSRResult(success=False, message=upstream.NO_DSR_MARKERS_MESSAGE),
            build_error=f"Build failed: {exc}",
            exit_code=upstream.EXIT_BUILD_FAILED,
        )

    # The run goes on while pip checks uv's install; a rejection runs again on pip's own set.
    return score_on_accepted_set(
        build,
        lambda image: _deploy_and_test(run, image),
        build_failed=build_failed,
        logs=run.logs,
        progress=progress,
        profile="compat",
    )


def _deploy_and_test(run: ProfileRun, image: DepsImage) -> ProfileResult:
    """Upstream's one container from ``image``, its log graded by the upstream parsers."""
    merge_golden_tests(run.task, run.repo_dir)
    with run.sandbox("compat", image.tag, volumes=image.mounts) as box:
        run.progress("compat: deploying and testing (upstream phases)")
        container = upstream.run_compat_container(box, run.plan.step("run").timeout)
    run.logs.write("container.log", container.kept_log)
    return upstream.grade_compat_run(run.finish, container, run.task.lang, python_tests=True)
