"""Scoring result models shared by both profiles, the engine and the reports.

The models keep our richer view (outcomes, per-test results, logs) while `to_upstream()` /
`ScoreResult.to_upstream_dict()` give the exact dict shapes of the upstream RepoGenesis harness
(docs/upstream.md §2.6) so compat results can sit in the published table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from bridge.errors import ScoringError
from bridge.scoring.explanations import ac_disagreement, capped, case_rows, failure_text
from bridge.scoring.types import Profile

#: Bumped whenever a change can alter a score; part of the result cache key.
GRADER_VERSION = "1.1.1"

#: `task_error`: the task itself cannot be graded (e.g. a golden suite pytest collects nothing
#: from): not the agent's fault and not the engine's; excluded from aggregates, never re-run.
Outcome = Literal["scored", "build_failed", "deploy_failed", "timeout", "infra_error", "task_error"]
OUTCOMES: tuple[str, ...] = ("scored", "build_failed", "deploy_failed", "timeout", "infra_error", "task_error")

#: what broke when the outcome is `infra_error` (the environment, never the agent)
InfraReason = Literal["engine", "disk", "index", "image", "timeout-infra", "bridge"]
INFRA_REASONS: tuple[str, ...] = ("engine", "disk", "index", "image", "timeout-infra", "bridge")

TestOutcome = Literal["passed", "failed", "error", "skipped", "not_run"]


class TestCaseResult(BaseModel):
    """One golden test item as seen by the grader."""

    __test__ = False  # not a pytest test class despite the name

    nodeid: str
    outcome: TestOutcome
    duration: float = 0.0
    message: str = ""
    #: the pytest phase that decided the outcome (setup, call, teardown); "" when unknown
    phase: str = ""


class DSRResult(BaseModel):
    """Deployment success. `time_to_ready` is seconds until the service answered (strict)."""

    success: bool
    message: str
    time_to_ready: float | None = None

    def to_upstream(self) -> dict[str, Any]:
        return {"success": self.success, "message": self.message}


class PassAt1(BaseModel):
    """Test counts for one repo. `not_run` is ours (strict); upstream has no such bucket."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    total: int = 0
    score: float = 0.0
    not_run: int = 0

    @classmethod
    def from_counts(
        cls,
        passed: int,
        failed: int,
        errors: int,
        skipped: int = 0,
        total: int | None = None,
        not_run: int = 0,
    ) -> PassAt1:
        """Build with upstream's score rule: round(passed/total, 4), 0.0 when total is 0.

        `total` defaults to passed + failed + errors (the upstream pytest rule).
        """
        if total is None:
            total = passed + failed + errors
        score = round(passed / total, 4) if total > 0 else 0.0
        return cls(
            passed=passed,
            failed=failed,
            errors=errors,
            skipped=skipped,
            total=total,
            score=score,
            not_run=not_run,
        )

    def to_upstream(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": self.skipped,
            "total": self.total,
            "score": self.score,
        }


class EndpointCoverage(BaseModel):
    """One README endpoint and whether (and why) it counts as implemented."""

    method: str
    path: str
    implemented: bool
    evidence: str = ""  # static: relative file that matched; dynamic: classification reason
    status: int | None = None  # dynamic only: HTTP status of the probe


class APICoverage(BaseModel):
    total_apis: int = 0
    implemented_apis: int = 0
    score: float = 0.0
    endpoints: list[EndpointCoverage] = Field(default_factory=list)
    note: str = ""

    @classmethod
    def from_endpoints(cls, endpoints: list[EndpointCoverage], note: str = "") -> APICoverage:
        total = len(endpoints)
        impl = sum(1 for e in endpoints if e.implemented)
        score = round(impl / total, 4) if total else 0.0
        if not total and not note:
            note = "No API endpoints found in README"
        return cls(total_apis=total, implemented_apis=impl, score=score, endpoints=endpoints, note=note)

    def to_upstream(self) -> dict[str, Any]:
        return {"total_apis": self.total_apis, "implemented_apis": self.implemented_apis, "score": self.score}


class ProfileResult(BaseModel):
    """The result of one profile (strict or compat) on one snapshot."""

    profile: Profile
    outcome: Outcome
    dsr: DSRResult
    pass_at_1: PassAt1 = Field(default_factory=PassAt1)
    api_coverage: APICoverage | None = None  # static, upstream rules
    dynamic_api_coverage: APICoverage | None = None  # strict only
    tests: list[TestCaseResult] = Field(default_factory=list)
    exit_code: int | None = None
    error: str | None = None  # infra / unexpected error (upstream `error`)
    #: infra_error only: engine | disk | index | image | timeout-infra | bridge (runner.infra_reason)
    infra_reason: InfraReason | None = None
    build_error: str | None = None  # dependency install failure (upstream `build_error`)
    logs: dict[str, str] = Field(default_factory=dict)  # log name -> file name next to the result
    elapsed_seconds: float = 0.0
    oom_killed: bool = False
    white_box: bool = False  # strict: the golden suite imported the agent's code (docs/strict-rules.md)
    notes: list[str] = Field(default_factory=list)  # strict: rules applied (session exit, deadline, ...)


class ScoreResult(BaseModel):
    """Everything the engine knows about scoring one snapshot of one task."""

    task_id: str
    task_hash: str
    snapshot_hash: str
    grader_version: str = GRADER_VERSION
    lang: str
    port: int
    framework: str
    profiles: dict[str, ProfileResult] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    def profile(self, name: str) -> ProfileResult:
        try:
            return self.profiles[name]
        except KeyError:
            raise ScoringError(f"result for {self.task_id} has no {name!r} profile") from None

    def to_upstream_dict(self, profile: str = "compat") -> dict[str, Any]:
        """The per-repo dict exactly as the upstream harness writes it (§2.6).

        Key order follows upstream. `api_coverage` appears only when AC was computed;
        `build_error` / `error` only when set.
        """
        p = self.profile(profile)
        out: dict[str, Any] = {
            "repo_name": self.task_id,
            "lang": self.lang,
            "port": self.port,
            "framework": self.framework,
            "exit_code": p.exit_code,
            "dsr": p.dsr.to_upstream(),
            "pass_at_1": p.pass_at_1.to_upstream(),
        }
        if p.api_coverage is not None:
            out["api_coverage"] = p.api_coverage.to_upstream()
        out["elapsed_seconds"] = p.elapsed_seconds
        if p.build_error is not None:
            out["build_error"] = p.build_error
        if p.error is not None:
            out["error"] = p.error
        return out


def summarize_result(data: dict[str, Any]) -> dict[str, Any]:
    """Per profile: outcome, DSR, Pass@1 passed/total/score, static AC score, and why not full
    marks: the tests not passed with their message lines (capped) and, under strict, where static
    and dynamic AC disagree (bridge/scoring/explanations.py)."""
    out: dict[str, Any] = {}
    profiles = data.get("profiles") or {}
    for name, prof in profiles.items():
        p1 = prof.get("pass_at_1") or {}
        ac = prof.get("api_coverage") or {}
        out[name] = {
            "outcome": prof.get("outcome"),
            "dsr": (prof.get("dsr") or {}).get("success"),
            "passed": p1.get("passed"),
            "total": p1.get("total"),
            "pass_at_1": p1.get("score"),
            "api_coverage": ac.get("score"),
            "failed_tests": capped(
                [failure_text(r) for r in case_rows({**prof, "profile": ""}) if r.outcome != "passed"]
            ),
        }
        disagreement = ac_disagreement(profiles) if name == "strict" else None
        if disagreement is not None:
            out[name]["ac_disagreement"] = disagreement.lines()
    return out
