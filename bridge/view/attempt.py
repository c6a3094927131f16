"""One attempt as the view shows it: the agent's trajectory step by step (messages, tool calls with
their arguments and results, tokens) beside the workspace timeline (each file event with its diff
against the file's previous content in the recording's store), the per-test outcome at submit, the
curve where moments were rescored, and the recording's files the page links to.

The trajectory, the events and the store are the agent's and hostile: read size-capped through
bridge/view/catalog.py and bridge/recording/, passed on as data, escaped by the pages.
"""

from __future__ import annotations

import difflib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError, RecordingError
from bridge.view.catalog import Catalog, Item, attempt_dir, read_bytes, read_json

MAX_STEPS = 2000
MAX_TEXT = 20000
MAX_FILE_EVENTS = 400
MAX_DIFFS = 150
MAX_DIFF_LINES = 400
MAX_BLOB = 256 * 1024
#: the recording files the attempt page links to (any other name is refused)
RECORDING_FILES = (
    "session.json",
    "events.jsonl",
    "agent/trajectory.json",
    "agent/stream.jsonl",
    "agent/prompt.txt",
    "agent/stderr.log",
    "agent/confinement.json",
)
_RESULT_FILE = re.compile(r"results/[A-Za-z0-9][A-Za-z0-9._-]{0,120}/(result|label)\.json")


def allowed_file(name: str) -> bool:
    return name in RECORDING_FILES or bool(_RESULT_FILE.fullmatch(name))


def _clip(value: Any, limit: int = MAX_TEXT) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, indent=1)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _t_s(stamp: object, started: datetime | None) -> float | None:
    if not isinstance(stamp, str) or started is None:
        return None
    try:
        return round((datetime.fromisoformat(stamp) - started).total_seconds(), 3)
    except (TypeError, ValueError):
        return None


def trajectory(data: Any, started: datetime | None) -> list[dict[str, Any]]:
    """ATIF steps (bridge/agents/attempt/trajectory.py writes them) as rows: source, time, message, calls
    with their arguments, results, tokens. Fields of the wrong shape read as absent."""
    steps = data.get("steps") if isinstance(data, dict) else None
    out: list[dict[str, Any]] = []
    for raw in steps[:MAX_STEPS] if isinstance(steps, list) else []:
        if not isinstance(raw, dict):
            continue
        calls = [
            {"name": _clip(c.get("function_name"), 200), "arguments": _clip(c.get("arguments"))}
            for c in raw.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        obs = _dict(raw.get("observation"))
        results = [_clip(r.get("content")) for r in obs.get("results") or [] if isinstance(r, dict)]
        metrics = _dict(raw.get("metrics"))
        out.append(
            {
                "step": raw.get("step_id") if isinstance(raw.get("step_id"), int) else len(out),
                "source": _clip(raw.get("source"), 40),
                "t_s": _t_s(raw.get("timestamp"), started),
                "message": _clip(raw.get("message") or ""),
                "calls": calls,
                "results": results[:50],
                "prompt_tokens": metrics.get("prompt_tokens")
                if isinstance(metrics.get("prompt_tokens"), int)
                else None,
                "completion_tokens": metrics.get("completion_tokens")
                if isinstance(metrics.get("completion_tokens"), int)
                else None,
            }
        )
    return out


def _text_of(data: bytes | None) -> list[str] | None:
    if data is None:
        return None
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def workspace(rec_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The recording's file events (time, kind, path, size, diff against the path's previous
    content) and its timeline (bridge/recording/timeline.py) for the chart."""
    from bridge.recording.event_model import FileDeleted, FileEvent, FileMoved
    from bridge.recording.reader import file_events, open_recording
    from bridge.recording.timeline import build_timeline

    rec = open_recording(rec_dir)
    timeline = build_timeline(rec)
    last: dict[str, str | None] = {}
    out: list[dict[str, Any]] = []

    def blob(sha: str | None) -> bytes | None:
        if not sha:
            return None
        try:
            oid = rec.store.oid_for_sha256(sha)
            return rec.store.read_blob(oid)[:MAX_BLOB] if oid else None
        except (OSError, BridgeError, ValueError, KeyError):
            return None

    for ev in file_events(rec):
        if len(out) >= MAX_FILE_EVENTS:
            break
        row: dict[str, Any] = {
            "seq": ev.seq,
            "t_s": round((datetime.fromisoformat(ev.t) - rec.started).total_seconds(), 3) if ev.t else None,
            "type": ev.type,
            "path": ev.path,
            "size": getattr(ev, "size", None),
            "diff": None,
        }
        if isinstance(ev, FileMoved):
            row["dest"] = ev.dest
            last[ev.dest], last[ev.path] = last.get(ev.path), None
        elif isinstance(ev, FileDeleted):
            last[ev.path] = None
        elif isinstance(ev, FileEvent):
            if sum(1 for r in out if r["diff"] is not None) < MAX_DIFFS:
                before, after = _text_of(blob(last.get(ev.path)) or b""), _text_of(blob(ev.sha256))
                if before is not None and after is not None:
                    lines = list(difflib.unified_diff(before, after, f"a/{ev.path}", f"b/{ev.path}"))
                    row["diff"] = "".join(lines[:MAX_DIFF_LINES]) + (
                        f"… ({len(lines) - MAX_DIFF_LINES} more lines)\n" if len(lines) > MAX_DIFF_LINES else ""
                    )
                else:
                    row["diff"] = "(binary or not in the store)"
            last[ev.path] = ev.sha256
        out.append(row)
    return out, timeline


def stream_trajectory(run: Path, folder: Path) -> tuple[dict[str, Any] | None, datetime | None]:
    """The trajectory of an attempt still running: its agent's event stream so far, read by the
    run's adapter as the run reads it at the end (bridge/agents/attempt/lifecycle.py)."""
    from bridge.agents.adapters.events import read_stream
    from bridge.agents.adapters.registry import adapter
    from bridge.agents.attempt.trajectory import to_atif
    from bridge.view.catalog import run_options
    from bridge.view.live import load_state

    name = run_options(run).get("agent")
    stream = folder / "agent" / "stream.jsonl"
    if not isinstance(name, str) or read_bytes(run, str(stream.relative_to(run)), limit=1) is None:
        return None, None  # no stream yet, or not a regular file (a symlink leads nowhere)
    try:
        parsed = adapter(name).parse(read_stream(stream), "")
    except (BridgeError, ValueError, TypeError, KeyError):
        return None, None
    state = load_state(run, folder)
    started = datetime.fromtimestamp(state.started_at, UTC) if state and state.started_at else None
    return to_atif(parsed, session_id="", agent=name, version="", extra={}), started


def attempt_detail(catalog: Catalog, item: Item, key: str) -> dict[str, Any]:
    """Everything the attempt page shows; RecordingError when the run has no such attempt."""
    from bridge.recording.curve import latest_curve
    from bridge.view.data import attempt_row, find_entry, recording_for, report_of

    report = report_of(item)
    entry = find_entry(item, report, key) if item.kind != "recording" else (report.get("results") or [None])[0]
    task, _, number = key.rpartition(".a")
    folder = attempt_dir(item.path, task, int(number)) if number.isdigit() and item.kind in ("run", "live") else None
    if entry is None and (folder is None or not folder.is_dir()) and item.kind != "recording":
        raise RecordingError(f"{item.id}: no attempt {key[:120]!r}")
    rec = recording_for(catalog, item, entry)
    started: datetime | None = None
    steps_src = None
    files: list[dict[str, Any]] = []
    timeline: dict[str, Any] | None = None
    curve = None
    if rec is not None:
        try:
            files, timeline = workspace(rec)
            started = datetime.fromisoformat(timeline["session"]["created_at"])
        except (BridgeError, ValueError, TypeError):
            files, timeline = [], None
        steps_src = read_json(rec, "agent/trajectory.json")
        curve = latest_curve(rec)
    if steps_src is None and folder is not None:
        steps_src = read_json(item.path, str(folder.relative_to(item.path) / "agent" / "trajectory.json"))
    if steps_src is None and folder is not None and item.kind == "live":
        steps_src, started = stream_trajectory(item.path, folder)
    present = [n for n in RECORDING_FILES if rec is not None and read_bytes(rec, n, limit=1) is not None]
    if rec is not None and (rec / "results").is_dir():
        present += sorted(
            f"results/{p.name}/result.json"
            for p in (rec / "results").iterdir()
            if allowed_file(f"results/{p.name}/result.json") and read_bytes(rec, f"results/{p.name}/result.json", 1)
        )[:50]
    return {
        "run": item.id,
        "key": key,
        "row": attempt_row(entry) if entry is not None else None,
        "entry": entry,
        "recording": item.id if rec is not None else None,
        "session_id": (timeline or {}).get("session", {}).get("session_id"),
        "steps": trajectory(steps_src, started),
        "files": files,
        "timeline": timeline,
        "curve": curve,
        "recording_files": present,
    }


def recording_file(catalog: Catalog, item: Item, key: str, name: str) -> bytes:
    """One of the attempt's recording files (RECORDING_FILES or a result), as bytes."""
    from bridge.view.data import find_entry, recording_for, report_of

    if not allowed_file(name):
        raise RecordingError(f"not a recording file the view serves: {name[:120]!r}")
    report = report_of(item)
    entry = find_entry(item, report, key) if item.kind != "recording" else None
    rec = recording_for(catalog, item, entry)
    data = read_bytes(rec, name) if rec is not None else None
    if data is None:
        raise RecordingError(f"{key[:120]}: no {name}")
    return data
