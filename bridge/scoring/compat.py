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

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import docker

from bridge.errors import ScoringError
from bridge.scoring import coverage, upstream
from bridge.scoring.images.base import official_python_image
from bridge.scoring.images.build import DependencyInstallError, docker_build, image_exists
from bridge.scoring.images.deps import ensure_deps_image
from bridge.scoring.images.recipe import APP_DIRS, APP_GID, APP_UID
from bridge.scoring.images.store import DepsImage
from bridge.scoring.plan import create_sandbox
from bridge.scoring.python_plan import FALLBACK_PACKAGES, TEST_TOOLS, compat_plan
from bridge.scoring.result import DSRResult, ProfileResult
from bridge.scoring.sandbox import Sandbox
from bridge.scoring.workdir import ASSETS, LogSink, ScoreContext, merge_tree, requirements_of, score_on_accepted_set
from bridge.tasks.model import Task

ProgressFn = Callable[[str], None]


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


def follow_digests(
    box: Sandbox, digest_factory: Callable[[], upstream.LogDigest] = upstream.LogDigest
) -> list[tuple[threading.Thread, upstream.LogDigest]]:
    """Attach to stdout and stderr (one stream each) and digest them live for grading.

    The live streams, not the kept log: an engine's log file can rotate under a flood and lose
    the markers (bridge/scoring/docker_sandbox.py `attach`).
    """
    out = []
    for is_stdout in (True, False):
        digest = digest_factory()
        stream = box.attach(stdout=is_stdout)

        def pump(digest: upstream.LogDigest = digest, stream: Iterable[bytes] = stream) -> None:
            for chunk in stream:
                digest.feed(chunk)

        thread = threading.Thread(target=pump, daemon=True, name="rgbridge-compat-log")
        thread.start()
        out.append((thread, digest))
    return out


def _requirement_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def run_compat(
    client: docker.DockerClient, task: Task, repo_dir: Path, *, ctx: ScoreContext, logs: LogSink, progress: ProgressFn
) -> ProfileResult:
    started = time.monotonic()
    # Upstream computes AC on the host before the build and keeps it even if the build fails.
    static_ac = coverage.static_api_coverage(task.readme, repo_dir)

    def finish(**fields: object) -> ProfileResult:
        return ProfileResult(
            profile="compat",
            api_coverage=static_ac,
            logs=logs.names(),
            elapsed_seconds=round(time.monotonic() - started, 3),
            **fields,
        )

    if task.lang != "python":
        return finish(
            outcome="infra_error",
            dsr=DSRResult(success=False, message="Java scoring is not supported yet"),
            error="compat: no Maven/JDK image recipe in this version (Java tasks cannot be scored yet)",
            infra_reason="bridge",
            exit_code=upstream.EXIT_UNEXPECTED,
        )

    requirements = requirements_of(repo_dir)
    extras: list[str] = []
    if not (repo_dir / "requirements.txt").is_file():
        extras.extend(FALLBACK_PACKAGES)
    golden_reqs = task.tests_dir / "requirements.txt"
    if golden_reqs.is_file():
        extras.extend(_requirement_lines(golden_reqs.read_text(encoding="utf-8", errors="replace")))
    extras.extend(TEST_TOOLS)

    base = compat_base_image(client, ctx.image_progress)

    def build(installer: str | None) -> DepsImage:
        progress("compat: building the image")
        return ensure_deps_image(
            client,
            requirements,
            extra_packages=extras,
            wheelhouse=ctx.wheelhouse,
            base=base,
            timeout=task.manifest.timeouts.build,
            progress=ctx.image_progress,
            env_volume=True,
            defer_check=True,
            installer=installer,
        )

    def build_failed(exc: DependencyInstallError) -> ProfileResult:
        return finish(
            outcome="timeout" if exc.timed_out else "build_failed",
            dsr=DSRResult(success=False, message=upstream.NO_DSR_MARKERS_MESSAGE),
            build_error=f"Build failed: {exc}",
            exit_code=upstream.EXIT_BUILD_FAILED,
        )

    # The run goes on while pip checks uv's install; a rejection runs again on pip's own set.
    return score_on_accepted_set(
        build,
        lambda image: _deploy_and_test(
            client, task, repo_dir, image, ctx=ctx, logs=logs, progress=progress, finish=finish
        ),
        build_failed=build_failed,
        logs=logs,
        progress=progress,
        profile="compat",
    )


def _deploy_and_test(
    client: docker.DockerClient,
    task: Task,
    repo_dir: Path,
    image: DepsImage,
    *,
    ctx: ScoreContext,
    logs: LogSink,
    progress: ProgressFn,
    finish: Callable[..., ProfileResult],
) -> ProfileResult:
    """Upstream's one container from ``image``, its log graded by the upstream parsers."""
    merge_golden_tests(task, repo_dir)
    plan = compat_plan(task, service_limits=ctx.service_limits)
    run = plan.step("run")
    with create_sandbox(
        ctx.sandboxes(client),
        plan,
        "compat",
        image.tag,
        name=ctx.container_name("compat"),
        run_id=ctx.run_id,
        metadata=ctx.extra_labels,
        sources={"repo": repo_dir, "assets": ASSETS},
        volumes=image.mounts,
    ) as box:
        progress("compat: deploying and testing (upstream phases)")
        digests = follow_digests(box)  # attached before start: no output is missed
        box.start()
        outcome = box.wait(run.timeout)
        for thread, _ in digests:
            thread.join(timeout=30)
        stdout = box.logs(stdout=True, stderr=False)
        stderr = box.logs(stdout=False, stderr=True)
    kept_log = upstream.combine_container_log(stdout, stderr)
    logs.write("container.log", kept_log)
    # Grade on the digests of the complete streams (the kept log file is capped).
    log = upstream.combine_container_log(digests[0][1].text(), digests[1][1].text())
    if outcome.timed_out:
        # Upstream replaces the log and scores the repo from that text: zero tests, no DSR.
        timeout_log = f"Container timed out after {upstream.CONTAINER_TIMEOUT}s"
        dsr, p1 = upstream.grade_upstream_log(timeout_log, task.lang)
        return finish(
            outcome="timeout", dsr=dsr, pass_at_1=p1, exit_code=upstream.EXIT_TIMEOUT, oom_killed=outcome.oom_killed
        )
    dsr, p1 = upstream.grade_upstream_log(log, task.lang)
    return finish(
        outcome="scored" if dsr.success else "deploy_failed",
        dsr=dsr,
        pass_at_1=p1,
        # per-test lines for display, from the kept log (the grading digest keeps count lines only)
        tests=upstream.tests_from_log(kept_log) if task.lang == "python" else [],
        exit_code=outcome.exit_code,
        oom_killed=outcome.oom_killed,
    )
