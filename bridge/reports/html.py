"""One self-contained HTML report of a run or a recording (`rgbridge report ... --html OUT`).

The page has inline CSS and inline SVG only: no scripts, no external fonts, images or styles,
so it opens anywhere, offline, and can be mailed around. Every string that comes from a
recording or a report (task names, test ids, messages, notes, tool names) is untrusted and is
HTML-escaped; numbers are formatted by us.

Any output folder is read through bridge/reports/targets.py: a RUN_DIR through its
`report_<run_id>.json` (written by `reporting.RunWriter`), a `score --output-dir` folder through
its result.json; a recording is shown as a one-task run of its latest result, plus its timeline and a
score-over-time chart (from the newest `results/curve-*.json`, else the submission alone).
"""

from __future__ import annotations

from pathlib import Path

from bridge.errors import RecordingError
from bridge.reports.markup import page
from bridge.reports.recording_sections import recording_html
from bridge.reports.score_sections import contamination_html, summary_html, tasks_html
from bridge.reports.targets import open_target
from bridge.sessions.contamination import evidence


def render_html(target: Path | str, *, run_id: str | None = None, reference: Path | str | None = None) -> str:
    """The HTML page of any output folder (bridge/reports/targets.py): a run (report_<run_id>.json),
    a `score --output-dir` folder or a recording; `reference` adds charts beside a results.json."""
    found = open_target(target, run_id)
    report = found.report
    md = dict(report.get("metadata") or {})
    beside = ""
    if reference is not None:
        from bridge.reports.reference import load_reference, reference_html

        if not report["results"]:
            raise RecordingError(f"{target}: no results to chart beside the reference")
        beside = reference_html(report, load_reference(reference))
    body = summary_html(report) + beside + tasks_html(report["results"])
    if found.kind == "recording":
        title = f"Recording {md.get('session_id')} — {md.get('task_id')}"
        body += recording_html(found.path, report)
        if md.get("contaminated") and not report["results"]:  # not scored: the evidence still shows
            body = contamination_html(evidence(found.path)) + body
    else:
        md.setdefault("report", found.source.name)
        title = (
            f"RepoGenesis run {md.get('run_id') or found.source.stem.removeprefix('report_')}"
            if found.kind == "run"
            else f"Score of {md.get('task_id')}"
        )
    return page(title, md, body)


def write_html(
    target: Path | str, out_html: Path | str, *, run_id: str | None = None, reference: Path | str | None = None
) -> Path:
    out = Path(out_html)
    html = render_html(target, run_id=run_id, reference=reference)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
