"""An attempt's report row: its score (or why it has none: the agent's CLI failed, the scoring
job failed), the agent and its version, and how the attempt ran (times, tokens, cost, its
trajectory and prompt, the run's configuration and sandbox)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from bridge.agents.adapters.events import ParsedRun
from bridge.agents.adapters.failures import Failure
from bridge.agents.attempt.state import AttemptState
from bridge.agents.attempt.timing import overlap, scoring_window
from bridge.agents.gateway.door import Door
from bridge.agents.gateway.rows import run_fields
from bridge.agents.run.settings import RunSettings, declared_sandbox
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.report_row import AgentInfo, AgentRunInfo, ReportRow
from bridge.scoring.run.reporting import build_row
from bridge.sessions.models import ResultStatus
from bridge.tasks.model import Task


@dataclass(frozen=True)
class AttemptFacts:
    """What the row says of the attempt besides its score: the run's settings, the task, the
    attempt's number, its state file, its folder and its recordings' folder."""

    settings: RunSettings
    task: Task
    number: int
    state: AttemptState
    dir: Path
    rec_dir: Path
    door: Door | None = None  # its way to the model: the row's tokens and cost come from the wire


def attempt_row(
    facts: AttemptFacts,
    status: ResultStatus,
    parsed: ParsedRun,
    submitted_by: str,
    scoring_seconds: float,
    failure: Failure | None = None,
) -> ReportRow:
    """The row of an attempt whose session `status` ended as it did."""
    state = facts.state
    task = {"repo_name": facts.task.id, "lang": facts.task.lang}
    if failure is not None:  # not the agent's work: no score, in no mean (runner retries it)
        row = ReportRow.model_validate({**task, "outcome": "agent_error", "agent_error": failure.as_dict(0)})
    elif status.state == "done" and status.result is not None:
        result = ScoreResult.model_validate(status.result)
        row = build_row(result, "compat" if "compat" in result.profiles else None)
    else:  # the scoring job failed: an engine fault, not the agent's (infra_error)
        row = ReportRow.model_validate({**task, "error": status.message or "scoring failed", "outcome": "infra_error"})
    started = state.started_at or time.time()
    wall = round(time.time() - started, 3)
    agent_seconds = state.agent_seconds or 0.0
    # The bridge's own share: the attempt's wall time outside the agent's run and the scoring
    # (they overlap when the agent submitted and waited for its server to score).
    agent_end = state.agent_ended_at or started + agent_seconds
    busy = (
        agent_seconds
        + scoring_seconds
        - overlap((agent_end - agent_seconds, agent_end), scoring_window(facts.rec_dir / status.session_id))
    )
    errors = parsed.errors[:5]
    if state.server_lost:  # the session went unwatched from then on: the row says so
        errors.insert(0, state.server_lost)
    row.agent = AgentInfo(
        name=facts.settings.adapter.name,
        version=facts.settings.agent_version,
        model=parsed.model or facts.settings.model,
    )
    row.attempt = facts.number
    row.contaminated = status.contaminated
    row.run = AgentRunInfo(
        session_id=status.session_id,
        recording=str(facts.rec_dir / status.session_id),
        ended=state.ended,
        exit_code=state.exit_code,
        submitted_by=submitted_by,
        wall_seconds=wall,
        agent_seconds=agent_seconds,
        scoring_seconds=scoring_seconds,
        overhead_seconds=round(max(0.0, wall - busy), 3),
        tool_calls=parsed.tool_calls,
        steps=len(parsed.steps),
        prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.completion_tokens,
        cached_tokens=parsed.cached_tokens,
        **run_fields(facts.door, parsed),
        trajectory=str(facts.dir / "agent" / "trajectory.json"),
        errors=errors,
        prompt=str(facts.dir / "agent" / "prompt.txt"),
        prompt_hash=facts.settings.prompt.digest,
        time_limit_seconds=facts.settings.time_limit,
        config_hash=facts.settings.run_config.get("hash"),
        sandbox=state.sandbox or declared_sandbox(facts.settings),
    )
    return row
