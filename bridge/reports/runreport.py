"""What a report page shows, as data: a run's `report_<run_id>.json` (written by
`reporting.RunWriter`), or a recording's latest result as a one-task run report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError, ScoringError
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import (
    build_entry,
    profile_rows,
    scored_entries,
    summarize_strict,
    summarize_upstream,
)
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
    check_numbers(data["results"], path)
    return path, data


#: the numbers of an entry's score blocks that tables and aggregates compute with
NUMBER_FIELDS = {
    "pass_at_1": ("passed", "total", "score"),
    "api_coverage": ("implemented_apis", "total_apis", "score"),
    "dynamic_api_coverage": ("implemented_apis", "total_apis", "score"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_numbers(results: list[Any], source: Path | str) -> None:
    """A report is untrusted input: every number the table and the aggregates use must be one
    (ScoringError naming the first that is not, instead of a traceback while printing)."""
    for i, entry in enumerate(results):
        if not isinstance(entry, dict):
            raise ScoringError(f"{source}: results[{i}] is not an object")
        extra = entry.get("rgbridge")
        profiles = extra.get("profiles") if isinstance(extra, dict) else None
        blocks: dict[str, Any] = {"": entry}
        if isinstance(profiles, dict):
            blocks.update({f"rgbridge.profiles.{k}.": v for k, v in profiles.items()})
        for prefix, block in blocks.items():
            if not isinstance(block, dict):
                raise ScoringError(f"{source}: results[{i}].{prefix.rstrip('.')} is not an object")
            for key, names in NUMBER_FIELDS.items():
                scores = block.get(key)
                if scores is None:
                    continue
                if not isinstance(scores, dict):
                    raise ScoringError(f"{source}: results[{i}].{prefix}{key} is not an object")
                for name in names:
                    value = scores.get(name)
                    if value is not None and not _is_number(value):
                        shown = json.dumps(value)[:40]
                        raise ScoringError(f"{source}: results[{i}].{prefix}{key}.{name} is {shown}, not a number")


def report_from_entries(entries: list[dict[str, Any]], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The same aggregates RunWriter.finalize writes, for entries built elsewhere."""
    return {
        "metadata": dict(metadata),
        "summary": summarize_upstream(scored_entries(entries)),
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
    if "attempt" in meta.model_fields_set:  # recorded since attempts exist (bridge/sessions/attempts.py)
        md.update(attempt=meta.attempt, run_id=meta.run_id)
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
