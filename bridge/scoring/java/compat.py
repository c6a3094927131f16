"""compat for Java: upstream's Dockerfile.java + entrypoint flow in one container.

Upstream (docs/upstream.md §2.3-2.6): `mvn dependency:go-offline` (errors
swallowed), `sed` Java 11 -> 17 in pom.xml, the golden `src/test` replaces the agent's,
`mvn clean compile -DskipTests` (errors swallowed), then the entrypoint: start.sh else
`mvn spring-boot:run`, the readiness loop with the 20 s Java limit, `timeout 600 mvn test`, and
grading by summing every Surefire `Tests run:` line of the log (bridge/scoring/upstream.py).

Deviations (docs/java-scoring.md): no network in the container (dependencies come from the
pom-keyed layer, resolved before; an unreachable repository is `infra_error` instead of a silent
0); uid 10001, capabilities dropped; JVMs sized by JAVA_TOOL_OPTIONS; the pom edit and test
replacement happen before the copy-in; the build steps' output is kept in compat-build.log.
"""

from __future__ import annotations

from pathlib import Path

from bridge.scoring import upstream
from bridge.scoring.java.common import ensure_layer, layer_failure, replace_golden_tests
from bridge.scoring.java.images import ensure_java_image
from bridge.scoring.java.layers import JavaDependencyError, MavenSources
from bridge.scoring.java.plan import COMPAT_BUILD_LOG
from bridge.scoring.java.pom import java11_to_17
from bridge.scoring.result import ProfileResult
from bridge.scoring.run.profile_run import ProfileRun
from bridge.scoring.sandbox.capture import strip_ansi
from bridge.tasks.model import Task

BUILD_LOG_MAX = 2_000_000


class MavenLogDigest(upstream.LogDigest):
    """The Java twin of upstream.LogDigest: upstream's Maven parser sums *every* `Tests run:`
    line, so all of them are kept (with the markers); other lines collapse to a placeholder."""

    def _line(self, line: str) -> None:
        # Maven 3.8 colours failure lines even without a terminal; upstream's Maven 3.9 does not
        # (style.color=auto), and its regex would not match coloured text.
        line = strip_ansi(line)
        self._n += 1
        if any(marker in line for marker in upstream.MARKERS) or upstream.SUREFIRE_RE.search(line):
            if self._dropped:
                self._out.append(self.PLACEHOLDER)
                self._dropped = False
            self._out.append(line)
        elif line.strip():
            self._dropped = True


def prepare_compat_repo(task: Task, repo: Path) -> None:
    """Upstream's pre-run edits: Java 11 -> 17 in pom.xml, golden src/test replacing the agent's."""
    pom = repo / "pom.xml"
    if pom.is_file() and not pom.is_symlink():
        text = pom.read_text(encoding="utf-8", errors="replace")
        rewritten = java11_to_17(text)
        if rewritten != text:
            pom.unlink()
            pom.write_text(rewritten, encoding="utf-8")
    replace_golden_tests(task, repo)


def run_java_compat(run: ProfileRun) -> ProfileResult:
    """Upstream's Java container over the run's repo copy (static AC taken before the pom edit)."""
    task, repo_dir, logs = run.task, run.repo_dir, run.logs
    prepare_compat_repo(task, repo_dir)
    run.progress("compat: resolving Maven dependencies")
    image = ensure_java_image(run.client, progress=run.ctx.image_progress)
    try:
        layer = ensure_layer(
            run.client,
            repo_dir,
            timeout=task.manifest.timeouts.build,
            sources=run.maven or MavenSources.from_env(),
            progress=run.ctx.image_progress,
        )
        image = layer.tag
        if layer.log_tail:
            logs.write("build.log", layer.log_tail)
    except JavaDependencyError as exc:
        if exc.kind in ("unreachable", "timeout"):
            return layer_failure(
                exc, logs, run.finish, exit_code=upstream.EXIT_BUILD_FAILED, dsr_message=upstream.NO_DSR_MARKERS_MESSAGE
            )
        # Upstream swallows go-offline failures and carries on: Maven fails inside the run.
        logs.write("build.log", exc.log_tail)

    with run.sandbox("compat", image) as box:
        run.progress("compat: building, deploying and testing (upstream phases)")
        container = upstream.run_compat_container(box, run.plan.step("run").timeout, MavenLogDigest)
        build_log = box.copy_out(COMPAT_BUILD_LOG, max_bytes=BUILD_LOG_MAX)
    if build_log:
        logs.write_bytes("compat-build.log", build_log)
    logs.write("container.log", container.kept_log)
    return upstream.grade_compat_run(run.finish, container, "java")
