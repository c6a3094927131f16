"""IDE sessions and runs as inspect_ai eval logs (`rgbridge export --layout inspect -o DIR`), so
they can be browsed in `inspect view` beside automated-agent runs.

One `.eval` log per source folder (a `run`/`evaluate` folder, or a folder of recordings), task
`repogenesis`; one sample per attempt (sample id = the task id, epoch = the attempt). Each sample
is scored under both profiles: a `strict` and a `compat` score whose value holds `pass_at_1`, `ac`
and `dsr` (0-1), answered by the outcome and explained by the tests not passed
(bridge/scoring/explanations.py). A recording's events are the sample's transcript (one info event
each, source `rgbridge`), followed by the agent's trajectory when the recording holds one
(`trajectory.json`, ATIF steps, source `agent`); contamination and the session's facts go into the
sample's metadata.

inspect-ai is an optional extra (`pip install 'repogenesis-bridge[inspect]'`), imported only here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError, RecordingError
from bridge.scoring.explanations import entry_profiles, explain_lines
from bridge.textsafe import show_raw_bytes

PROFILES = ("strict", "compat")
METRICS = ("pass_at_1", "ac", "dsr")
#: session events kept per sample (the transcript of a long session stays browsable)
MAX_EVENTS = 5000
TRAJECTORY_FILES = ("trajectory.json", "agent/trajectory.json")


@dataclass
class InspectExport:
    logs: list[Path] = field(default_factory=list)
    samples: int = 0


@dataclass
class _Attempt:
    task_id: str
    attempt: int
    entry: Mapping[str, Any] | None
    metadata: dict[str, Any]
    rec_dir: Path | None = None


def _values(prof: Mapping[str, Any]) -> dict[str, float]:
    p1 = prof.get("pass_at_1") or {}
    total = p1.get("total") or 0
    ac = prof.get("api_coverage") or {}
    return {
        "pass_at_1": round(float(p1.get("passed") or 0) / total, 4) if total else 0.0,
        "ac": float(ac.get("score") or 0.0),
        "dsr": 1.0 if (prof.get("dsr") or {}).get("success") else 0.0,
    }


def _attempts_of_recordings(folder: Path) -> list[_Attempt]:
    from bridge.reports.runreport import recording_report

    out = []
    for session in sorted(folder.glob("*/session.json")):
        report = recording_report(session.parent)
        md = dict(report["metadata"])
        entry = report["results"][0] if report["results"] else None
        out.append(_Attempt(str(md.get("task_id")), int(md.get("attempt") or 1), entry, md, session.parent))
    return out


def _attempts_of_run(folder: Path, run_id: str | None) -> tuple[list[_Attempt], dict[str, Any]]:
    from bridge.reports.runreport import load_run_report

    _, report = load_run_report(folder, run_id)
    md = dict(report.get("metadata") or {})
    out = []
    for entry in report["results"]:
        rec = entry.get("recording")
        rec_dir = Path(rec) if isinstance(rec, str) and (Path(rec) / "session.json").is_file() else None
        attempt = entry.get("attempt") if isinstance(entry.get("attempt"), int) else 1
        meta = {k: entry[k] for k in ("outcome", "contaminated", "session_id") if k in entry}
        out.append(_Attempt(str(entry.get("repo_name")), attempt, entry, meta, rec_dir))
    return out, md


def _transcript(rec_dir: Path | None) -> list[Any]:
    from inspect_ai.event import InfoEvent

    if rec_dir is None:
        return []
    from bridge.recording.events import load_events

    events, _ = load_events(rec_dir / "events.jsonl")
    out = []
    for ev in events[:MAX_EVENTS]:
        stamp = _time(ev.get("t"))
        out.append(InfoEvent(source="rgbridge", data=ev, **({"timestamp": stamp} if stamp else {})))
    for name in TRAJECTORY_FILES:
        path = rec_dir / name
        if path.is_file():
            try:
                trajectory = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
            for step in (steps if isinstance(steps, list) else [])[:MAX_EVENTS]:
                out.append(InfoEvent(source="agent", data=step))
            break
    return out


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _sample(att: _Attempt, ids: set[tuple[str, int]]) -> Any:
    from inspect_ai.log import EvalSample
    from inspect_ai.scorer import Score

    profiles = entry_profiles(att.entry) if att.entry is not None else {}
    scores = {}
    for name in PROFILES:
        prof = profiles.get(name)
        if prof is None:
            continue
        explanation = "\n".join(explain_lines({name: prof})) or "all golden tests passed"
        scores[name] = Score(value=_values(prof), answer=str(prof.get("outcome") or ""), explanation=explanation)
    sample_id = att.task_id
    if (sample_id, att.attempt) in ids:  # the same task and attempt twice (two runs in one folder)
        sample_id = f"{att.task_id}@{att.metadata.get('session_id') or len(ids)}"
    ids.add((sample_id, att.attempt))
    metadata = {
        k: (show_raw_bytes(v) if isinstance(v, str) else v)
        for k, v in att.metadata.items()
        if isinstance(v, str | int | float | bool) or v is None
    }
    metadata["contaminated"] = bool(att.metadata.get("contaminated") or (att.entry or {}).get("contaminated"))
    return EvalSample(
        id=sample_id,
        epoch=att.attempt,
        input=f"Build the {att.task_id} service described in its README (RepoGenesis task).",
        target="",
        scores=scores or None,
        metadata=metadata,
        events=_transcript(att.rec_dir),
    )


def export_inspect(
    source: Path | str, out_dir: Path | str, *, run_id: str | None = None, model: str | None = None
) -> InspectExport:
    """Write the `.eval` log of a run/evaluate folder or a folder of recordings into `out_dir`."""
    try:
        from inspect_ai.log import (
            EvalConfig,
            EvalDataset,
            EvalLog,
            EvalMetric,
            EvalResults,
            EvalScore,
            EvalSpec,
            EvalStats,
            write_eval_log,
        )
    except ImportError:
        raise BridgeError("--layout inspect needs inspect-ai: pip install 'repogenesis-bridge[inspect]'") from None
    source, out_dir = Path(source), Path(out_dir)
    md: dict[str, Any] = {}
    if any(source.glob("*/session.json")):
        attempts = _attempts_of_recordings(source)
    elif any(source.glob("report_*.json")):
        attempts, md = _attempts_of_run(source, run_id)
    else:
        raise RecordingError(f"{source}: neither a run/evaluate folder (report_*.json) nor a folder of recordings")
    if not attempts:
        raise RecordingError(f"{source}: nothing to export")
    ids: set[tuple[str, int]] = set()
    samples = [_sample(att, ids) for att in attempts]
    scores = []
    for name in PROFILES:
        scored = [s.scores[name].value for s in samples if s.scores and name in s.scores]
        if scored:
            metrics = {m: EvalMetric(name=m, value=round(sum(v[m] for v in scored) / len(scored), 4)) for m in METRICS}
            scores.append(EvalScore(name=name, scorer=name, scored_samples=len(scored), metrics=metrics))
    label = str(model or md.get("model_name") or md.get("model") or "unknown")
    now = datetime.now(UTC)
    run = str(run_id or md.get("run_id") or now.strftime("%Y-%m-%dT%H-%M-%S"))
    log = EvalLog(
        status="success",
        eval=EvalSpec(
            created=now.isoformat(),
            task="repogenesis",
            run_id=run,
            dataset=EvalDataset(name="repogenesis", samples=len(samples)),
            model=f"rgbridge/{label}",
            config=EvalConfig(),
            metadata={"source": str(source), "agent": str(md.get("agent_name") or md.get("agent") or "")},
        ),
        results=EvalResults(total_samples=len(samples), completed_samples=len(samples), scores=scores),
        stats=EvalStats(started_at=now.isoformat(), completed_at=now.isoformat()),
        samples=samples,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:8]
    path = out_dir / f"{now.strftime('%Y-%m-%dT%H-%M-%S')}+00-00_repogenesis_{digest}.eval"
    write_eval_log(log, str(path), format="eval")
    return InspectExport(logs=[path], samples=len(samples))
