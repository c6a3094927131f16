"""The view's plots, drawn by the server as inline SVG (no script, no library, nothing fetched):
Pass@1 per task with intervals (one bar per run and task), cost against Pass@1 per run, and the
outcome counts per run. Every label is escaped (bridge/reports/markup.py)."""

from __future__ import annotations

from collections.abc import Sequence

from bridge.reports.markup import e

COLORS = ("#2e6bd9", "#e08a00", "#3fb37f", "#b42318", "#7a5af8", "#0e9384", "#c11574", "#5a6b80")
OUTCOME_COLORS = {
    "scored": "#3fb37f",
    "deploy_failed": "#e08a00",
    "build_failed": "#b54708",
    "timeout": "#7a5af8",
    "infra_error": "#98a2b3",
    "agent_error": "#b42318",
}


def _head(width: int, height: int, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(label)}">'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fbfcfd"/>'
    )


def _legend(names: Sequence[str], x: float, y: float) -> str:
    return "".join(
        f'<rect x="{x:.0f}" y="{y + 18 * i:.0f}" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>'
        f'<text x="{x + 18:.0f}" y="{y + 18 * i + 11:.0f}" font-size="12" fill="#1d2430">{e(n[:40])}</text>'
        for i, n in enumerate(names)
    )


def pass_per_task_svg(
    tasks: Sequence[str],
    runs: Sequence[str],
    values: Sequence[Sequence[tuple[float, float, float] | None]],
    width: int = 1000,
) -> str:
    """Horizontal bars: for each task, one bar per run (mean Pass@1) with its interval as a
    whisker. `values[task][run]` is (mean, low, high) or None (the run has no score there)."""
    row_h = max(14, 8 + 12 * len(runs))
    left, right, top = 180, 190, 24
    height = top + row_h * len(tasks) + 34
    pw = width - left - right
    parts = [_head(width, height, "Pass@1 per task with intervals")]
    for i in range(5):
        x = left + pw * i / 4
        parts.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 30}" stroke="#e3e8ef"/>'
            f'<text x="{x:.1f}" y="{height - 16}" font-size="11" fill="#6b7a8c" text-anchor="middle">{i / 4:.2f}</text>'
        )
    for t, task in enumerate(tasks):
        y0 = top + row_h * t
        parts.append(
            f'<text x="{left - 8}" y="{y0 + row_h / 2 + 4:.1f}" font-size="12" fill="#1d2430" '
            f'text-anchor="end">{e(task[:28])}</text>'
        )
        for r, cell in enumerate(values[t]):
            if cell is None:
                continue
            mean, low, high = (max(0.0, min(1.0, v)) for v in cell)
            y = y0 + 4 + 12 * r
            color = COLORS[r % len(COLORS)]
            parts.append(
                f'<rect x="{left}" y="{y:.1f}" width="{max(1.0, pw * mean):.1f}" height="9" fill="{color}">'
                f"<title>{e(runs[r])} · {e(task)}: Pass@1 {mean:.4f} [{low:.4f}, {high:.4f}]</title></rect>"
                f'<line x1="{left + pw * low:.1f}" y1="{y + 4.5:.1f}" x2="{left + pw * high:.1f}" y2="{y + 4.5:.1f}" '
                f'stroke="#1d2430" stroke-width="1.5"/>'
            )
    parts.append(_legend(runs, left + pw + 16, top))
    parts.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 2}" font-size="11" fill="#6b7a8c" text-anchor="middle">'
        "Pass@1 (mean over attempts; whisker: 95% bootstrap interval over attempts)</text></svg>"
    )
    return "".join(parts)


def cost_vs_pass_svg(points: Sequence[tuple[str, float | None, float]], width: int = 640, height: int = 320) -> str:
    """One point per run: its cost (x, USD) against its Pass@1 (y); runs without a cost sit at 0."""
    left, right, top, bottom = 60, 200, 16, 40
    pw, ph = width - left - right, height - top - bottom
    top_cost = max([c or 0.0 for _, c, _ in points] + [1e-6])
    parts = [_head(width, height, "cost against Pass@1 per run")]
    for i in range(5):
        v = i / 4
        y = top + ph * (1 - v)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e3e8ef"/>'
            f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="11" fill="#6b7a8c" text-anchor="end">{v:.2f}</text>'
            f'<text x="{left + pw * v:.1f}" y="{top + ph + 16}" font-size="11" fill="#6b7a8c" '
            f'text-anchor="middle">${top_cost * v:.2f}</text>'
        )
    for i, (name, cost, p1) in enumerate(points):
        x = left + pw * (cost or 0.0) / top_cost
        y = top + ph * (1 - max(0.0, min(1.0, p1)))
        shown = "not recorded" if cost is None else f"${cost:.4f}"
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{COLORS[i % len(COLORS)]}">'
            f"<title>{e(name)}: Pass@1 {p1:.4f}, cost {e(shown)}</title></circle>"
        )
    parts.append(_legend([p[0] for p in points], left + pw + 16, top))
    parts.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 4}" font-size="11" fill="#6b7a8c" text-anchor="middle">'
        "cost (USD) → ; Pass@1 ↑</text></svg>"
    )
    return "".join(parts)


def outcomes_svg(runs: Sequence[tuple[str, dict[str, int]]], width: int = 1000) -> str:
    """A stacked bar per run: how many attempts ended in each outcome."""
    left, right, top, row_h = 180, 20, 30, 24
    height = top + row_h * len(runs) + 10
    pw = width - left - right
    most = max([sum(c.values()) for _, c in runs] + [1])
    kinds = sorted({k for _, c in runs for k in c}, key=lambda k: (k not in OUTCOME_COLORS, k))
    parts = [_head(width, height, "outcome counts per run")]
    for i, k in enumerate(kinds):
        color = OUTCOME_COLORS.get(k, COLORS[i % len(COLORS)])
        parts.append(
            f'<rect x="{left + 120 * i}" y="6" width="12" height="12" fill="{color}"/>'
            f'<text x="{left + 120 * i + 16}" y="16" font-size="12" fill="#1d2430">{e(k[:16])}</text>'
        )
    for r, (name, counts) in enumerate(runs):
        y = top + row_h * r
        parts.append(
            f'<text x="{left - 8}" y="{y + 14}" font-size="12" fill="#1d2430" text-anchor="end">{e(name[:28])}</text>'
        )
        x = float(left)
        for i, k in enumerate(kinds):
            n = counts.get(k, 0)
            if not n:
                continue
            w = pw * n / most
            color = OUTCOME_COLORS.get(k, COLORS[i % len(COLORS)])
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="18" fill="{color}">'
                f"<title>{e(name)}: {n} {e(k)}</title></rect>"
            )
            if w > 18:
                parts.append(
                    f'<text x="{x + w / 2:.1f}" y="{y + 13}" font-size="11" fill="#fff" text-anchor="middle">{n}</text>'
                )
            x += w
    parts.append("</svg>")
    return "".join(parts)
