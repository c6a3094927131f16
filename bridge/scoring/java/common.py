"""What both Java profiles share: the scoring copy of a repo, the layer, reports, Maven errors."""

from __future__ import annotations

import io
import re
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import docker

from bridge.scoring.images.sets import DepsImage
from bridge.scoring.java.layers import (
    JavaDependencyError,
    MavenSources,
    ensure_java_deps_image,
    repo_poms,
    test_sources_text,
)
from bridge.scoring.java.plan import REPORTS_TAR
from bridge.scoring.plan import ScoringPlan, run_step
from bridge.scoring.result import DSRResult, PassAt1, ProfileResult
from bridge.scoring.run.workdir import LogSink
from bridge.scoring.sandbox.protocol import Sandbox
from bridge.scoring.types import ProgressFn
from bridge.tasks.model import Task

REPORTS_MAX_BYTES = 20_000_000
REPORT_MAX_FILES = 2000

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def replace_golden_tests(task: Task, repo: Path) -> None:
    """The golden `src/test` replaces the repo's (upstream Dockerfile.java step 4 does the same);
    never written through an agent symlink."""
    src = repo / "src"
    if src.is_symlink() or (src.exists() and not src.is_dir()):
        src.unlink()
    src.mkdir(exist_ok=True)
    test = src / "test"
    if test.is_symlink() or test.is_file():
        test.unlink()
    elif test.is_dir():
        shutil.rmtree(test)
    shutil.copytree(task.tests_dir, test, ignore=shutil.ignore_patterns(".DS_Store", "*.class"))


def ensure_layer(
    client: docker.DockerClient,
    repo: Path,
    *,
    timeout: float,
    sources: MavenSources,
    progress: ProgressFn | None,
) -> DepsImage:
    return ensure_java_deps_image(
        client, repo_poms(repo), sources=sources, tests_text=test_sources_text(repo), timeout=timeout, progress=progress
    )


def layer_failure(
    exc: JavaDependencyError,
    logs: LogSink,
    finish: Callable[..., ProfileResult],
    *,
    exit_code: int,
    dsr_message: str | None = None,
    pass_at_1: PassAt1 | None = None,
    **extra: object,
) -> ProfileResult:
    """unreachable repositories are the bridge's problem (infra_error, flagged for re-run); a
    pom naming artifacts nowhere to be found, or broken, is the agent's (build_failed)."""
    logs.write("build.log", exc.log_tail)
    outcome = {"unreachable": "infra_error", "timeout": "timeout"}.get(exc.kind, "build_failed")
    return finish(
        outcome=outcome,
        dsr=DSRResult(success=False, message=dsr_message or str(exc)),
        build_error=str(exc),
        error=str(exc) if outcome == "infra_error" else None,
        infra_reason="index" if outcome == "infra_error" else None,  # no Maven repository answered
        exit_code=exit_code,
        pass_at_1=pass_at_1 or PassAt1(),
        **extra,
    )


def fetch_reports(plan: ScoringPlan, box: Sandbox) -> list[bytes]:
    """The `TEST-*.xml` files of the tester's `target/surefire-reports`, read through one tar
    made in the sandbox (regular files only, count and size capped)."""
    made = run_step(box, plan.step("fetch-reports"))
    if made.exit_code != 0:
        return []
    data = box.copy_out(REPORTS_TAR, max_bytes=REPORTS_MAX_BYTES)
    if not data:
        return []
    out: list[bytes] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers()[:REPORT_MAX_FILES]:
            name = member.name.rsplit("/", 1)[-1]
            if member.isreg() and name.startswith("TEST-") and name.endswith(".xml"):
                fh = tar.extractfile(member)
                if fh is not None:
                    out.append(fh.read())
    return out


def maven_errors(output: str, limit: int = 40) -> str:
    """The `[ERROR]` lines of a Maven run (compiler messages included), ANSI stripped."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in output.splitlines()]
    errors = [ln for ln in lines if ln.startswith("[ERROR]") and ln.strip() != "[ERROR]"]
    return "\n".join(errors[:limit]) or "\n".join(lines[-limit:])
