"""One self-contained HTML report of a run or a recording (`rgbridge report ... --html OUT`).

The page has inline CSS and inline SVG only: no scripts, no external fonts, images or styles,
so it opens anywhere, offline, and can be mailed around. Every string that comes from a
recording or a report (task names, test ids, messages, notes, tool names) is untrusted and is
HTML-escaped; numbers are formatted by us.

A RUN_DIR is read through its `report_<run_id>.json` (written by `reporting.RunWriter`); a
recording is shown as a one-task run of its latest result, plus its timeline and a
score-over-time chart (from the newest `results/curve-*.json`, else the submission alone).
"""

from __future__ import annotations

from pathlib import Path

from bridge.reports.markup import page
from bridge.reports.recording_sections import recording_html
from bridge.reports.runreport import load_run_report, recording_report
from bridge.reports.score_sections import contamination_html, summary_html, tasks_html
from bridge.sessions.contamination import evidence


def render_html(target: Path | str, *, run_id: str | None = None) -> str:
    """The HTML page of a RUN_DIR (with report_<run_id>.json) or of a recording."""
    target = Path(target)
    if (target / "session.json").is_file():
        report = recording_report(target)
        md = report["metadata"]
        title = f"Recording {md.get('session_id')} — {md.get('task_id')}"
        body = summary_html(report) + tasks_html(report["results"]) + recording_html(target, report)
        if md.get("contaminated") and not report["results"]:  # not scored: the evidence still shows
            body = contamination_html(evidence(target)) + body
        return page(title, md, body)
    path, report = load_run_report(target, run_id)
    md = dict(report.get("metadata") or {})
    md.setdefault("report", path.name)
    title = f"RepoGenesis run {md.get('run_id') or path.stem.removeprefix('report_')}"
    return page(title, md, summary_html(report) + tasks_html(report["results"]))


def write_html(target: Path | str, out_html: Path | str, *, run_id: str | None = None) -> Path:
    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(target, run_id=run_id), encoding="utf-8")
    return out
