"""A recording's scoring results (submission and rescores) and its `results/index.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.fs.files import write_json_atomic
from bridge.recording.format import FORMAT_VERSION
from bridge.recording.reader import INDEX_NAME, load_meta
from bridge.scoring.result import summarize_result

# ----------------------------------------------------------------------------- results & index


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def list_results(rec_dir: Path | str) -> list[dict[str, Any]]:
    """Every scoring result of a recording (submission and rescores), oldest first."""
    rec_dir = Path(rec_dir)
    results = rec_dir / "results"
    meta = load_meta(rec_dir)
    out: list[dict[str, Any]] = []
    if not results.is_dir():
        return out
    for folder in sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")):
        data = _read_json(folder / "result.json")
        if not isinstance(data, dict):
            continue
        label = _read_json(folder / "label.json")
        label = label if isinstance(label, dict) else {}
        kind = "submission" if folder.name.startswith("submission-") else label.get("kind", "rescore")
        moment = label.get("moment") or ({"spec": "submission"} if kind == "submission" else {})
        profiles = sorted((data.get("profiles") or {}).keys())
        out.append(
            {
                "name": folder.name,
                "kind": kind,
                "path": f"results/{folder.name}/result.json",
                "grader_version": data.get("grader_version"),
                "profile": label.get("profile") or ("both" if len(profiles) > 1 else (profiles[0] if profiles else "")),
                "profiles": profiles,
                "moment": moment,
                "snapshot_hash": data.get("snapshot_hash"),
                "moment_tree_hash": label.get("tree_hash")
                or (meta.submission.tree_hash if kind == "submission" and meta.submission else None),
                "task_hash": data.get("task_hash"),
                "created_at": data.get("created_at"),
                "summary": summarize_result(data),
            }
        )
    out.sort(key=lambda r: (str(r.get("created_at") or ""), r["name"]))
    return out


def write_index(rec_dir: Path | str) -> Path:
    """(Re)write results/index.json from the result folders on disk."""
    rec_dir = Path(rec_dir)
    (rec_dir / "results").mkdir(exist_ok=True)
    path = rec_dir / "results" / INDEX_NAME
    curves = sorted(p.name for p in (rec_dir / "results").glob("curve-*.json"))
    write_json_atomic(
        path,
        {
            "format_version": FORMAT_VERSION,
            "results": list_results(rec_dir),
            "curves": [f"results/{c}" for c in curves],
        },
    )
    return path


def latest_result(rec_dir: Path | str) -> dict[str, Any] | None:
    """The newest result entry (see list_results), or None."""
    results = list_results(rec_dir)
    return results[-1] if results else None
