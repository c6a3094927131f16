"""Every output of the tool as one report: a `score --output-dir` folder, an `evaluate` or `run`
folder, or a recording, each read into the run-report shape (`report_<run_id>.json`'s) by one
dispatch (`open_target`); plus the session lines a recording's text report starts with.

A kind is a name, a test on the folder and a loader in `KINDS`; a new kind of folder is one
more entry there, and `rgbridge report` (text, `--html`, `--json`, leaderboard rows) takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError, ScoringError
from bridge.reports.runreport import load_run_report, recording_report, report_from_entries
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import build_entry


@dataclass(frozen=True)
class Target:
    """A folder read as a run report."""

    kind: str  # "recording" | "score" | "run" (evaluate and `rgbridge run` folders share the schema)
    path: Path
    source: Path  # the file the report was read from
    report: dict[str, Any]


def _is_recording(path: Path) -> bool:
    return (path / "session.json").is_file()


def _load_recording(path: Path, run_id: str | None) -> Target:
    return Target("recording", path, path / "session.json", recording_report(path))


def _is_run(path: Path) -> bool:
    return any(path.glob("report_*.json"))


def _load_run(path: Path, run_id: str | None) -> Target:
    source, report = load_run_report(path, run_id)
    return Target("run", path, source, report)


def _is_score(path: Path) -> bool:
    return (path / "result.json").is_file()


def _load_score(path: Path, run_id: str | None) -> Target:
    """A `rgbridge score --output-dir` folder: its result.json as a one-repo run report."""
    source = path / "result.json"
    try:
        result = ScoreResult.model_validate_json(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScoringError(f"{source}: unreadable result: {str(exc).splitlines()[0]}") from None
    meta = {
        "task_id": result.task_id,
        "timestamp": result.created_at.isoformat(),
        "grader_version": result.grader_version,
        "snapshot_hash": result.snapshot_hash,
    }
    return Target("score", path, source, report_from_entries([build_entry(result)], meta))


#: (kind, test, loader), tried in order: a recording also holds result.json files, so it comes first.
KINDS: tuple[tuple[str, Callable[[Path], bool], Callable[[Path, str | None], Target]], ...] = (
    ("recording", _is_recording, _load_recording),
    ("run", _is_run, _load_run),
    ("score", _is_score, _load_score),
)


def open_target(path: Path | str, run_id: str | None = None) -> Target:
    """Read any output folder of the tool as a run report; a clear error names what was expected."""
    path = Path(path)
    if not path.is_dir():
        raise RecordingError(f"{path}: no such folder")
    for _, test, load in KINDS:
        if test(path):
            return load(path, run_id)
    raise RecordingError(
        f"{path}: nothing to report: expected report_<run_id>.json (an evaluate or run folder), "
        "result.json (a score --output-dir folder) or session.json (a recording)"
    )


def _clock(seconds: Any) -> str:
    s = int(float(seconds or 0))
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"


def session_lines(rec_dir: Path | str) -> list[str]:
    """What a recording's text report says about the session: who, working time and pauses,
    notes, completion signals. Plain text; notes are the agent's or the person's words, so the
    caller prints them as text, never markup (bridge/textsafe.py makes them terminal-safe)."""
    from bridge.recording.timeline import build_timeline
    from bridge.textsafe import sanitize_data

    data = sanitize_data(build_timeline(rec_dir))
    s, d = data["session"], data["duration"]
    client = " ".join(str(x) for x in (s["client"].get("name"), s["client"].get("version")) if x)
    pauses = data["clock"]["pauses"]
    lines = [
        f"session {s['session_id']}  task {s['task_id']}  mode {s['mode']}  client {client or '-'}  state {s['state']}",
        f"working time {_clock(d['working_seconds'])}  wall {_clock(d['wall_seconds'])}  "
        f"paused {_clock(d['paused_seconds'])} in {len(pauses)} pause(s)",
    ]
    for p in pauses:
        lines.append(f"  pause at +{float(p['start_s'] or 0):.0f}s for {float(p['seconds'] or 0):.0f}s")
    notes = data.get("notes") or []
    lines.append(f"notes ({len(notes)})" + (":" if notes else ""))
    for n in notes:
        lines.append(f"  +{float(n.get('t_s') or 0):.0f}s (working {_clock(n.get('working_seconds'))}): {n['text']}")
    sub = data.get("submission")
    if sub:
        lines.append(
            f"signal: submitted via {sub.get('signal')} at +{float(sub.get('t_s') or 0):.0f}s "
            f"(working {_clock(sub.get('working_seconds'))}), {sub.get('files')} file(s)"
        )
    elif s.get("quit_reason") or s["state"] == "quit":
        lines.append(f"signal: quit ({s.get('quit_reason') or 'no reason given'})")
    else:
        lines.append("signal: none yet (not submitted)")
    if data.get("contaminated"):
        lines.append("CONTAMINATED: golden files opened while the session was open (tests or solution)")
    return lines
