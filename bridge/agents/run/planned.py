"""Every planned attempt of `rgbridge run` is a row (issue 38, item 8): before any agent starts,
every task's prompt is rendered and its inputs read, and the run is refused with the list of
tasks it cannot run; an attempt that still cannot start later (its MCP server fails, a bind is
refused), is not started (the cost cap) or is abandoned (`--on-exit abandon`) is a row of its own,
outcome `infra_error` or `not_run`, its reason under `unscored`. Such rows are in no mean, the
leaderboard line counts the tasks that have a score ("N of M tasks scored"), and the run's exit
is non-zero (`EXIT_UNSCORED`)."""

from __future__ import annotations

from collections.abc import Sequence

from bridge.agents.adapters.base import AgentError
from bridge.agents.run.prompt import PromptTemplate
from bridge.agents.run.settings import RunSettings
from bridge.errors import BridgeError
from bridge.scoring.run.report_row import AgentInfo, ReportRow
from bridge.tasks.model import Task

#: `rgbridge run`'s exit code when a planned attempt has no score (and no agent_error explains it)
EXIT_UNSCORED = 4
#: tasks named in the refusal before the list is cut (a whole dataset may be missing its variants)
LISTED = 50


def check_planned(template: PromptTemplate, tasks: Sequence[Task], time_limit: float) -> None:
    """Render every task's prompt (reading its inputs: README, the upstream README-only variant,
    requirements or pom); AgentError naming every task that cannot be prepared, before any agent
    starts and before the run folder holds anything."""
    failed: dict[str, str] = {}
    for task in tasks:
        try:
            template.render(task, time_limit)
        except (BridgeError, OSError, UnicodeDecodeError) as exc:
            failed[task.id] = str(exc)
    if not failed:
        return
    shown = [f"{task}: {why}" for task, why in list(failed.items())[:LISTED]]
    more = f"; and {len(failed) - LISTED} more" if len(failed) > LISTED else ""
    raise AgentError(
        f"{len(failed)} of {len(tasks)} tasks cannot be run (no agent was started): "
        + "; ".join(shown)
        + more
        + ". Fix the dataset, or leave those tasks out (--tasks)"
    )


def unscored_row(settings: RunSettings, task: Task, number: int, outcome: str, reason: str) -> ReportRow:
    """The row of a planned attempt that has no score: `infra_error` (it could not start or
    failed before its score) or `not_run` (not started, or abandoned), with why."""
    return ReportRow(
        repo_name=task.id,
        lang=task.lang,
        outcome=outcome,
        agent=AgentInfo(name=settings.adapter.name, version=settings.agent_version, model=settings.model),
        attempt=number,
        unscored=reason[:2000],
    )
