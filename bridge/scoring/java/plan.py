"""The plans of Java tasks: strict (service + tester, offline Maven) and compat (upstream's
Dockerfile.java + entrypoint in one container), as `ScoringPlan` data (bridge/scoring/plan.py).

The Maven command lines, the JVM environment and the report fetch live here: what Java strict
runs, readable with `rgbridge plan TASK`.
"""

from __future__ import annotations

from bridge.scoring import upstream
from bridge.scoring.java.images import JVM_OPTIONS
from bridge.scoring.java.pom import forced_property_args
from bridge.scoring.plan import (
    ASSETS_DIR,
    PROBE_DIR,
    TESTER_ROOT,
    CopyIn,
    ImageRecipe,
    SandboxPlan,
    ScoringPlan,
    Step,
    deploy_steps,
    probe_step,
)
from bridge.scoring.sandbox.protocol import SandboxLimits
from bridge.tasks.model import Task

#: Every JVM in a scoring container (Maven, the forked test JVM, the service) gets these.
JAVA_ENV = {"JAVA_TOOL_OPTIONS": JVM_OPTIONS, "HOME": "/tmp", "MAVEN_OPTS": f"{JVM_OPTIONS} -Dstyle.color=never"}
MAVEN_FLAGS = ["-o", "-B", "-Dstyle.color=never"]
#: JVM system properties beat `junit-platform.properties`: the agent's main resources are on the
#: test classpath and could otherwise switch on ServiceLoader registration of a JUnit extension
#: (e.g. a TestExecutionExceptionHandler that swallows every golden failure).
TESTER_JAVA_ENV = JAVA_ENV | {
    "JAVA_TOOL_OPTIONS": f"{JAVA_ENV['JAVA_TOOL_OPTIONS']} -Djunit.jupiter.extensions.autodetection.enabled=false",
}
REPORTS_TAR = "/tmp/rgbridge-surefire.tar"
REPORTS_TIMEOUT = 60
COMPAT_BUILD_LOG = "/results/compat-build.log"
_LAYER = ImageRecipe(
    name="layer",
    base="java (JDK + Maven)",
    inputs=["the repo's poms", "test sources (plugins they need)"],
    purpose="Maven dependencies resolved once, then offline",
)


def reports_argv(project: str) -> list[str]:
    """Tar the `TEST-*.xml` files of `<project>/target/surefire-reports` in the sandbox."""
    script = (
        f"cd {project}/target 2>/dev/null && tar -cf {REPORTS_TAR} "
        "--no-recursion surefire-reports surefire-reports/TEST-*.xml"
    )
    return ["sh", "-c", script]


def java_strict_plan(task: Task, *, service_limits: SandboxLimits, deploy_only: bool = False) -> ScoringPlan:
    timeouts = task.manifest.timeouts
    forced = forced_property_args()
    repo_copies = [CopyIn(source="repo", dest="/repo"), CopyIn(source="assets", dest=ASSETS_DIR, owner="root")]
    steps = deploy_steps(task)
    if not deploy_only:
        steps += [
            Step(
                name="compile",
                sandbox="tester",
                argv=["mvn", *MAVEN_FLAGS, *forced, "compile"],
                timeout=timeouts.build,
                workdir=TESTER_ROOT,
                failure="a non-zero exit is build_failed with the compiler's [ERROR] lines",
            ),
            Step(
                name="tests",
                sandbox="tester",
                argv=["mvn", *MAVEN_FLAGS, *forced, "test"],
                timeout=timeouts.tests,
                workdir=TESTER_ROOT,
                failure="per golden method, from Surefire XML only; unreported = not run; over time: timeout",
            ),
            Step(
                name="fetch-reports",
                sandbox="tester",
                argv=reports_argv(TESTER_ROOT),
                timeout=REPORTS_TIMEOUT,
                failure="no reports: every golden method counts as not passed",
            ),
        ]
        steps += probe_step(task)
    return ScoringPlan(
        task=task.id,
        language="java",
        profile="strict",
        deploy_only=deploy_only,
        images=[_LAYER],
        sandboxes=[
            SandboxPlan(
                role="service",
                kind="strict",
                image="layer",
                command=["bash", f"{ASSETS_DIR}/strict_service.sh"],
                workdir="/repo",
                env={"SERVICE_PORT": str(task.port), "PORT": str(task.port), "REPO_LANG": "java", **JAVA_ENV},
                limits=service_limits,
                copies=repo_copies,
            ),
            # The tester runs agent code too (golden tests start the app in-process): the service's
            # security profile and limits, its network namespace (no network), none of its files.
            SandboxPlan(
                role="tester",
                kind="tester",
                image="layer",
                command=["sleep", "infinity"],
                workdir=TESTER_ROOT,
                env=TESTER_JAVA_ENV,
                limits=service_limits,
                shares_network_of="service",
                copies=[CopyIn(source="tester-repo", dest=TESTER_ROOT), CopyIn(source="assets", dest=PROBE_DIR)],
            ),
        ],
        steps=steps,
        timeouts={"build": timeouts.build, "startup": timeouts.startup, "tests": timeouts.tests},
        notes=[
            "tester-repo: the repo with the golden src/test, without target/, .mvn/ or wrappers, poms "
            "rewritten so no test gate remains (copied only when the repo has a pom.xml and tests run)",
        ],
    )


def java_compat_plan(task: Task, *, service_limits: SandboxLimits) -> ScoringPlan:
    return ScoringPlan(
        task=task.id,
        language="java",
        profile="compat",
        images=[_LAYER],
        sandboxes=[
            SandboxPlan(
                role="compat",
                kind="compat",
                image="layer",
                command=["bash", f"{ASSETS_DIR}/java_compat.sh"],
                workdir="/repo",
                env={
                    "REPO_LANG": "java",
                    "SERVICE_PORT": str(task.port),
                    "STARTUP_TIMEOUT": str(upstream.STARTUP_TIMEOUTS["java"]),
                    "TEST_TIMEOUT": str(upstream.TEST_TIMEOUTS["java"]),
                    **JAVA_ENV,
                },
                limits=service_limits,
                copies=[CopyIn(source="repo", dest="/repo"), CopyIn(source="assets", dest=ASSETS_DIR, owner="root")],
            )
        ],
        steps=[
            Step(
                name="run",
                sandbox="compat",
                kind="wait",
                timeout=upstream.CONTAINER_TIMEOUT,
                failure="graded by summing Surefire `Tests run:` lines of the log; past the limit: timeout",
            )
        ],
        timeouts={"build": task.manifest.timeouts.build, "container": upstream.CONTAINER_TIMEOUT},
        notes=[
            "before the copy-in: pom.xml Java 11 -> 17, the golden src/test replaces the repo's",
            f"the build steps' output is read back from {COMPAT_BUILD_LOG}",
        ],
    )
