"""The plans of Java tasks: strict (service + tester, offline Maven) and compat (upstream's
Dockerfile.java + entrypoint in one container), as `ScoringPlan` data (bridge/scoring/plan.py).

The Maven command lines, the JVM environment and the report fetch live here: what Java strict
runs, readable with `rgbridge plan TASK`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.scoring.java.images import JVM_OPTIONS
from bridge.scoring.java.pom import forced_property_args
from bridge.scoring.plan import (
    TESTER_ROOT,
    ImageRecipe,
    ScoringPlan,
    compat_plan_of,
    strict_plan_of,
    tester_sandbox,
    tester_step,
)
from bridge.scoring.sandbox.protocol import SandboxLimits
from bridge.tasks.model import Task

if TYPE_CHECKING:  # annotations only: the steps are made by tester_step
    from bridge.scoring.plan import Step

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
    return strict_plan_of(
        task,
        language="java",
        deploy_only=deploy_only,
        images=[_LAYER],
        service_image="layer",
        service_env={"REPO_LANG": "java", **JAVA_ENV},
        service_limits=service_limits,
        # The tester runs agent code too (golden tests start the app in-process): the service's
        # security profile and limits, its network namespace (no network), none of its files.
        tester=tester_sandbox(image="layer", env=TESTER_JAVA_ENV, limits=service_limits, suite="tester-repo"),
        test_steps=maven_steps(task),
        timeouts={"build": timeouts.build, "startup": timeouts.startup, "tests": timeouts.tests},
        notes=[
            "tester-repo: the repo with the golden src/test, without target/, .mvn/ or wrappers, poms "
            "rewritten so no test gate remains (copied only when the repo has a pom.xml and tests run)",
        ],
    )


def maven_steps(task: Task) -> list[Step]:
    """The golden suite's steps in the tester: compile the repo offline, run the tests, fetch the
    Surefire reports."""
    timeouts = task.manifest.timeouts
    forced = forced_property_args()
    return [
        tester_step(
            "compile",
            ["mvn", *MAVEN_FLAGS, *forced, "compile"],
            timeout=timeouts.build,
            failure="a non-zero exit is build_failed with the compiler's [ERROR] lines",
        ),
        tester_step(
            "tests",
            ["mvn", *MAVEN_FLAGS, *forced, "test"],
            timeout=timeouts.tests,
            failure="per golden method, from Surefire XML only; unreported = not run; over time: timeout",
        ),
        tester_step(
            "fetch-reports",
            reports_argv(TESTER_ROOT),
            timeout=REPORTS_TIMEOUT,
            failure="no reports: every golden method counts as not passed",
            workdir=None,
        ),
    ]


def java_compat_plan(task: Task, *, service_limits: SandboxLimits, deploy_only: bool = False) -> ScoringPlan:
    """Upstream's Java container; compat has no practice mode (`deploy_only` is ignored)."""
    return compat_plan_of(
        task,
        language="java",
        image=_LAYER,
        script="java_compat.sh",
        env=JAVA_ENV,
        limits=service_limits,
        failure="graded by summing Surefire `Tests run:` lines of the log; past the limit: timeout",
        notes=[
            "before the copy-in: pom.xml Java 11 -> 17, the golden src/test replaces the repo's",
            f"the build steps' output is read back from {COMPAT_BUILD_LOG}",
        ],
    )
