"""What a report page shows, as data: a run's `report_<run_id>.json` (written by
`reporting.RunWriter`), or a recording's latest result as a one-task run report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError, ScoringError
from bridge.scoring.reporting import build_entry, profile_rows, summarize_strict, summarize_upstream
from bridge.scoring.result import ScoreResult
from bridge.sessions.contamination import evidence, mark_entries


def load_run_report(run_dir: Path | str, run_id: str | None = None) -> tuple[Path, dict[str, Any]]:
    run_dir = Path(run_dir)
    if run_id:
        path = run_dir / f"report_{run_id}.json"
        if not path.is_file():
            raise ScoringError(f"{run_dir}: no report_{run_id}.json")
    else:
        reports = sorted(run_dir.glob("report_*.json"))
        if not reports:
            raise ScoringError(f"{run_dir}: no report_<run_id>.json (run `rgbridge evaluate` first)")
        path = reports[-1]  # run ids are timestamps: the last sorts newest
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScoringError(f"{path}: unreadable report: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ScoringError(f"{path}: not a run report (no results list)")
    return path, data


def report_from_entries(entries: list[dict[str, Any]], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The same aggregates RunWriter.finalize writes, for entries built elsewhere."""
    return {
        "metadata": dict(metadata),
        "summary": summarize_upstream(entries),
        "results": entries,
        "strict_summary": summarize_strict(profile_rows(entries, "strict")),
        "compat_strict_view": summarize_strict(profile_rows(entries, "compat")),
    }


def recording_report(rec_dir: Path | str) -> dict[str, Any]:
    """A recording's latest result as a one-task run report."""
    from bridge.recording.reader import load_meta
    from bridge.recording.results import latest_result

    rec_dir = Path(rec_dir)
    meta = load_meta(rec_dir)
    latest = latest_result(rec_dir)
    entries: list[dict[str, Any]] = []
    md: dict[str, Any] = {
        "session_id": meta.session_id,
        "task_id": meta.task_id,
        "state": meta.state,
        "created_at": meta.created_at,
        "timestamp": meta.ended_at or meta.created_at,
        "client": f"{meta.client.name} {meta.client.version}".strip(),
        "mode": meta.mode,
    }
    extra = meta.model_extra or {}
    if isinstance(extra.get("attempt"), int):  # recorded since attempts exist (bridge/sessions/attempts.py)
        md.update(attempt=extra["attempt"], run_id=str(extra.get("run_id") or ""))
    if latest is not None:
        try:
            result = ScoreResult.model_validate_json((rec_dir / latest["path"]).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RecordingError(f"{latest['path']}: unreadable result: {str(exc).splitlines()[0]}") from None
        entries.append(build_entry(result))
        md.update(
            result=latest["name"],
            grader_version=result.grader_version,
            moment=(latest.get("moment") or {}).get("spec", ""),
        )
    # Golden files opened while the session was open (bridge/sessions/contamination.py): on every entry.
    mark_entries(entries, rec_dir)
    md["contaminated"] = bool(evidence(rec_dir))
    return report_from_entries(entries, md)
