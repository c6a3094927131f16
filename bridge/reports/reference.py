"""This run beside reference rows: a chart per metric (Pass@1, AC, DSR) with the run's
leaderboard rows next to rows the user supplies (`rgbridge report RUN --html OUT --reference
results.json`), e.g. the published RepoGenesis leaderboard.

The reference file is upstream's leaderboard `results.json` (docs/upstream.md §4.1): a list of
rows with `model`, `category`, `language`, `pass_at_1`, `ac`, `dsr` in percent (a `{"results":
[...]}` wrapper is accepted too). It is input like any other: read through a pydantic model, a
bad row is a one-line error, every string is escaped on the page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from bridge.errors import ScoringError
from bridge.reports.export import leaderboard_rows
from bridge.reports.markup import e

METRICS = (("pass_at_1", "Pass@1"), ("ac", "AC"), ("dsr", "DSR"))
MAX_ROWS = 60


class LeaderboardRow(BaseModel):
    """One row of upstream's leaderboard results.json (extra keys such as org, date are kept)."""

    model_config = ConfigDict(extra="allow")

    model: str
    category: str = ""
    language: str = ""
    pass_at_1: float
    ac: float
    dsr: float

    @field_validator("pass_at_1", "ac", "dsr")
    @classmethod
    def _percent(cls, v: float) -> float:
        if not math.isfinite(v) or not 0.0 <= v <= 100.0:
            raise ValueError("must be a percentage between 0 and 100")
        return v


def load_reference(path: Path | str) -> list[LeaderboardRow]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScoringError(f"{path}: unreadable reference results: {exc}") from None
    if isinstance(data, Mapping) and isinstance(data.get("results"), list):
        data = data["results"]
    if not isinstance(data, list):
        raise ScoringError(f"{path}: not a leaderboard results.json (expected a list of rows)")
    rows = []
    for i, raw in enumerate(data[:MAX_ROWS]):
        try:
            rows.append(LeaderboardRow.model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ScoringError(f"{path}: row {i}: {where}: {err['msg']}") from None
    return rows


def run_rows(report: Mapping[str, Any]) -> list[LeaderboardRow]:
    """This report's own rows (compat aggregation, as upstream computes the leaderboard)."""
    md = report.get("metadata") or {}
    who = " ".join(
        str(x) for x in (md.get("agent_name") or md.get("agent"), md.get("model_name") or md.get("model")) if x
    )
    label = f"{who} (this run)" if who else "this run"
    rows = leaderboard_rows(dict(report), ide="this-run", model="-", org="")
    return [LeaderboardRow.model_validate({**r, "model": label}) for r in rows]


def bars_svg(title: str, rows: Sequence[tuple[str, float, bool]], width: int = 900) -> str:
    """Horizontal bars, 0-100 %, this run's in red, reference rows in blue-grey."""
    left, right, bar, gap, top = 330, 60, 16, 6, 26
    height = top + len(rows) * (bar + gap) + 24
    pw = width - left - right
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fbfcfd"/>',
        f'<text x="8" y="17" font-size="13" font-weight="600" fill="#1d2430">{e(title)} (%)</text>',
    ]
    for i in range(5):
        gx = left + pw * i / 4
        parts.append(
            f'<line x1="{gx:.1f}" y1="{top - 4}" x2="{gx:.1f}" y2="{height - 20}" stroke="#e3e8ef"/>'
            f'<text x="{gx:.1f}" y="{height - 6}" font-size="11" fill="#6b7a8c" text-anchor="middle">{25 * i}</text>'
        )
    for k, (label, value, ours) in enumerate(rows):
        y = top + k * (bar + gap)
        color = "#d92d20" if ours else "#7d8fa6"
        weight = "600" if ours else "400"
        parts.append(
            f'<text x="{left - 8}" y="{y + bar - 4}" font-size="12" font-weight="{weight}" fill="#1d2430" '
            f'text-anchor="end">{e(label[:48])}</text>'
            f'<rect x="{left}" y="{y}" width="{max(1.0, pw * value / 100):.1f}" height="{bar}" fill="{color}">'
            f"<title>{e(label)}: {value:.2f}</title></rect>"
            f'<text x="{left + pw * value / 100 + 4:.1f}" y="{y + bar - 4}" font-size="11" fill="#33475b">'
            f"{value:.2f}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def reference_html(report: Mapping[str, Any], reference: Sequence[LeaderboardRow]) -> str:
    """A chart per metric: this run's rows beside the reference rows, best first."""
    ours = run_rows(report)
    rows = [(r, True) for r in ours] + [(r, False) for r in reference]
    out = [
        "<h2>Beside the reference</h2><p class='muted'>This run's rows (red, compat aggregation as "
        f"upstream) beside {len(reference)} reference row(s) (grey) from the supplied results.json.</p>"
    ]
    for key, title in METRICS:
        bars = sorted(
            (
                (f"{r.model} — {r.language}" if r.language else r.model, float(getattr(r, key)), mine)
                for r, mine in rows
            ),
            key=lambda b: -b[1],
        )
        out.append(bars_svg(title, bars))
    return "".join(out)
