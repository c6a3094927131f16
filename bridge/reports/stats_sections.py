"""The statistics section of a report page (bridge/reports/stats.py): Pass@k for every k and the
95% intervals of Pass@1, AC and DSR per profile, with the method and seed named."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.reports.markup import e, table
from bridge.reports.stats import DEFAULT_SEED, METHOD_PASS_AT_K, RunStats, interval_text, run_stats

PROFILES = ("compat", "strict")


def all_stats(report: Mapping[str, Any], *, seed: int = DEFAULT_SEED) -> list[RunStats]:
    """The statistics of a report under each profile its rows carry."""
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    found = [run_stats(results, p, seed=seed) for p in PROFILES]
    return [s for s in found if s.tasks]


def stats_html(report: Mapping[str, Any], *, seed: int = DEFAULT_SEED) -> str:
    stats = all_stats(report, seed=seed)
    if not stats:
        return ""
    most = max(max(s.pass_at_k, default=0) for s in stats)
    ks = list(range(1, most + 1))
    rows = [
        [
            e(s.profile),
            str(s.tasks),
            e(interval_text(s.pass_at_1)),
            e(interval_text(s.ac)),
            e(interval_text(s.dsr)),
            *[f"{s.pass_at_k[k]:.4f}" if k in s.pass_at_k else "–" for k in ks],
        ]
        for s in stats
    ]
    first = stats[0]
    return (
        "<h2>Statistics</h2>"
        + table(
            ["profile", "tasks", "Pass@1 [95% CI]", "AC [95% CI]", "DSR [95% CI]", *[f"Pass@{k} (solved)" for k in ks]],
            rows,
        )
        + f"<p class='muted stats-method'>Intervals: 95% {e(first.method)}, {first.resamples} resamples, seed "
        f"{first.seed}. Pass@k counts an attempt as solved when every golden test passed: {e(METHOD_PASS_AT_K)}.</p>"
    )
