"""One self-contained HTML report of a run or a recording (`rgbridge report ... --html OUT`).

The page has inline CSS and inline SVG only: no scripts, no external fonts, images or styles,
so it opens anywhere, offline, and can be mailed around. Every string that comes from a
recording or a report (task names, test ids, messages, notes, tool names) is untrusted and is
HTML-escaped; numbers are formatted by us.

Any output folder is read through bridge/reports/targets.py: a RUN_DIR through its
`report_<run_id>.json` (written by `reporting.RunWriter`), a `score --output-dir` folder through
its result.json; a recording is shown as a one-task run of its latest result, plus its timeline and a
score-over-time chart (from the newest `results/curve-*.json`, else the submission alone).

An agent run's page (`rgbridge run`) starts with whose row it is and one line per attempt;
`write_html` also writes each attempt's recording page (its trajectory beside the file events)
into `<OUT stem>_attempts/` beside the page and links it: the only links on any page, relative
file names of pages written here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bridge.errors import BridgeError, RecordingError
from bridge.reports.leaderboard import attempt_key
from bridge.reports.markup import page
from bridge.reports.recording_sections import recording_html
from bridge.reports.run_sections import attempts_html, is_agent_run, whose_row_html
from bridge.reports.score_sections import contamination_html, summary_html, tasks_html
from bridge.reports.stats_sections import stats_html
from bridge.reports.targets import Target, open_target
from bridge.sessions.contamination import evidence

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def render_html(
    target: Path | str,
    *,
    run_id: str | None = None,
    reference: Path | str | None = None,
    reference_board: str | None = None,
    links: Mapping[str, str] | None = None,
    seed: int = 0,
) -> str:
    """The HTML page of any output folder (bridge/reports/targets.py): a run (report_<run_id>.json),
    a `score --output-dir` folder or a recording; `reference` puts the run's row among the rows of
    a leaderboard results.json; `links` maps an attempt (`<task>.a<k>`) to its recording page."""
    return _render(
        open_target(target, run_id), reference=reference, reference_board=reference_board, links=links, seed=seed
    )


def _render(
    found: Target,
    *,
    reference: Path | str | None,
    reference_board: str | None,
    links: Mapping[str, str] | None,
    seed: int = 0,
) -> str:
    report = found.report
    md = dict(report.get("metadata") or {})
    beside = ""
    if reference is not None:
        from bridge.reports.reference import load_reference, reference_html

        if not report["results"]:
            raise RecordingError(f"{found.path}: no results to put beside the reference")
        beside = reference_html(report, load_reference(reference, reference_board))
    head = ""
    if found.kind == "run" and is_agent_run(report):
        head = whose_row_html(report)
        beside += attempts_html(report, links)
    body = head + summary_html(report) + stats_html(report, seed=seed) + beside + tasks_html(report["results"])
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


def _recording_of(entry: Mapping[str, Any]) -> Path | None:
    """The attempt's recording folder, if the row names one that is the attempt's recording (the
    report is untrusted: its path must hold a recording of the session the row names)."""
    from bridge.recording.reader import load_meta

    run = entry.get("run")
    if not isinstance(run, Mapping) or not isinstance(run.get("recording"), str):
        return None
    rec = Path(run["recording"])
    try:
        if not (rec / "session.json").is_file() or load_meta(rec).session_id != run.get("session_id"):
            return None
    except (OSError, BridgeError):
        return None
    return rec


def write_attempt_pages(found: Target, out: Path) -> dict[str, str]:
    """Each attempt's recording page beside the run's page; {attempt key: relative link}."""
    links: dict[str, str] = {}
    if found.kind != "run":
        return links
    folder_name = f"{out.stem}_attempts"
    used: set[str] = set()
    for i, entry in enumerate(found.report.get("results") or []):
        if not isinstance(entry, Mapping):
            continue
        rec = _recording_of(entry)
        key = attempt_key(entry)
        if rec is None or key in links:
            continue
        name = f"{_UNSAFE.sub('_', key)[:120]}.html"  # never a path of the report's choosing
        if name in used or name.startswith("."):
            name = f"{i}-{name}"
        used.add(name)
        try:
            html = render_html(rec)
        except BridgeError:  # an unreadable recording: no page, the row still shows its path
            continue
        (out.parent / folder_name).mkdir(parents=True, exist_ok=True)
        (out.parent / folder_name / name).write_text(html, encoding="utf-8")
        links[key] = f"{quote(folder_name)}/{quote(name)}"
    return links


def write_html(
    target: Path | str,
    out_html: Path | str,
    *,
    run_id: str | None = None,
    reference: Path | str | None = None,
    reference_board: str | None = None,
    seed: int = 0,
) -> Path:
    """Write the page of `target` (and of each attempt's recording, for an agent run)."""
    out = Path(out_html)
    found = open_target(target, run_id)
    if reference is not None:  # a bad reference file fails before any page is written
        from bridge.reports.reference import load_reference

        load_reference(reference, reference_board)
    out.parent.mkdir(parents=True, exist_ok=True)
    links = write_attempt_pages(found, out) if is_agent_run(found.report) else {}
    html = _render(found, reference=reference, reference_board=reference_board, links=links, seed=seed)
    out.write_text(html, encoding="utf-8")
    return out
