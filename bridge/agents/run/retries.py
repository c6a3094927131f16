"""Retries and spending of `rgbridge run`: an `agent_error` attempt's try is set aside (its attempt
folder and recording renamed `a<k>.agent-error-<n>`, as `.interrupted-` folders are) and tried
again after a backoff; `Budget` holds what the run's tries cost (as their CLIs reported it) against
`--max-cost`."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from bridge.scoring.run.report_row import ReportRow, RetriedTry

if TYPE_CHECKING:
    from bridge.agents.attempt.lifecycle import Attempt


def backoff(delays: list[float], retry: int) -> float:
    """The wait before retry `retry` (1-based): the listed delays, the last one repeated."""
    return max(0.0, float(delays[min(retry, len(delays)) - 1])) if delays else 0.0


def set_aside(attempt: Attempt, row: ReportRow, number: int) -> RetriedTry:
    """The failed try's attempt folder and recording move to `a<k>.agent-error-<n>` (kept, as
    `.interrupted-` folders are); what it was, cost and where it went, for the final row."""
    moved: dict[str, str] = {}
    for name, path in (("attempt", attempt.dir), ("recording", attempt.rec_dir)):
        if path.exists():
            target = path.with_name(f"{path.name}.agent-error-{number}")
            if target.exists():  # a try set aside by an earlier run of this folder (resumed)
                target = path.with_name(f"{target.name}-{time.strftime('%Y%m%dT%H%M%S')}")
            path.rename(target)
            moved[name] = str(target)
    run, error = row.run, row.agent_error
    tried: dict[str, object] = {"class": error.cls if error else None, "message": error.message if error else None}
    if run is not None:
        tried |= {"cost_usd": run.cost_usd, "tokens": run.tokens, "agent_seconds": run.agent_seconds}
    return RetriedTry.model_validate({**tried, **moved})


def row_cost(row: ReportRow) -> float:
    """What a row's tries cost as the CLI reported it (the final try and the retried ones)."""
    run = row.run
    if run is None:
        return 0.0
    costs = [run.cost_usd, *[r.cost_usd for r in run.retried or []]]
    # a row read back from disk is untrusted: a cost that is no non-negative number counts nothing
    return sum(float(c) for c in costs if isinstance(c, int | float) and not isinstance(c, bool) and c >= 0)


class Budget:
    """`--max-cost`: the run's spending so far; no attempt starts once it is reached."""

    def __init__(self, cap: float | None, spent: float = 0.0) -> None:
        self.cap = cap
        self.spent = spent
        self.skipped: list[str] = []
        self._lock = threading.Lock()

    def spend(self, usd: float) -> None:
        with self._lock:
            self.spent += usd

    def allows(self) -> bool:
        with self._lock:
            return self.cap is None or self.spent < self.cap
