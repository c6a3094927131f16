"""What happened when in a recording: clock spans and pauses, file activity over time, MCP
calls, notes, checkpoints, recorder incidents, submission and scores (`rgbridge timeline`).

All times are wall-clock seconds since the session started (session.json `created_at`);
working seconds (the running clock) are given where the recording has them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from bridge.recording.agent_trace import agent_trace
from bridge.recording.clock import parse_iso
from bridge.recording.moments import working_seconds_at
from bridge.recording.reader import Recording, open_recording
from bridge.recording.results import list_results
from bridge.recording.timeline_events import Gathered, add_event

NICE_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400)
MAX_BUCKETS = 40
SPARK = "▁▂▃▄▅▆▇█"


def bucket_seconds(duration: float, max_buckets: int = MAX_BUCKETS) -> int:
    for size in NICE_BUCKETS:
        if duration / size <= max_buckets:
            return size
    return int(duration // max_buckets) + 1


def _secs(rec: Recording, t: str | None) -> float | None:
    if not t:
        return None
    try:
        return round((parse_iso(t) - rec.started).total_seconds(), 3)
    except ValueError:
        return None


def _clock_spans(rec: Recording, end_t: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The running spans of the working clock and the pauses between them."""
    spans: list[dict[str, Any]] = []
    pauses: list[dict[str, Any]] = []
    prev_end: datetime | None = None
    for span in rec.meta.clock.spans:
        s = parse_iso(span.start)
        e = parse_iso(span.end) if span.end else end_t
        if prev_end is not None and s > prev_end:
            pauses.append(
                {
                    "start": prev_end.isoformat(),
                    "end": s.isoformat(),
                    "start_s": _secs(rec, prev_end.isoformat()),
                    "end_s": _secs(rec, s.isoformat()),
                    "seconds": round((s - prev_end).total_seconds(), 3),
                }
            )
        spans.append(
            {
                "start": span.start,
                "end": span.end,
                "start_s": _secs(rec, span.start),
                "end_s": _secs(rec, span.end) if span.end else None,
                "open": span.end is None,
                "seconds": round((e - s).total_seconds(), 3),
            }
        )
        prev_end = e
    return spans, pauses


def _with_agent_steps(rec: Recording, acc: Gathered) -> dict[str, Any] | None:
    """The agent's steps (an agent run's recording) beside the file events, placed by their time."""
    agent = agent_trace(rec.dir, rec.started)
    if agent is not None:
        timed = [s for s in agent["steps"] if s["t_s"] is not None]
        steps = [{"seq": f"a{s['step']}", "t_s": s["t_s"], "kind": "agent", "text": s["text"]} for s in timed]
        acc.entries = sorted(acc.entries + steps, key=lambda e: e["t_s"] if e["t_s"] is not None else 0.0)
        for step in timed:  # agent steps per bucket, beside the file events of the same bucket
            acc.buckets[min(len(acc.buckets) - 1, max(0, int(step["t_s"] // acc.size)))]["agent"] += 1
    return agent


def build_timeline(rec_dir: Path | str | Recording) -> dict[str, Any]:
    """The timeline of a recording as plain data (what `--json` prints and the HTML report draws)."""
    rec = rec_dir if isinstance(rec_dir, Recording) else open_recording(rec_dir)
    meta = rec.meta
    last_t = parse_iso(rec.events[-1].t) if rec.events else rec.started
    end_t = parse_iso(meta.ended_at) if meta.ended_at else last_t
    end_t = max(end_t, last_t)
    wall = round((end_t - rec.started).total_seconds(), 3)
    spans, pauses = _clock_spans(rec, end_t)

    size = bucket_seconds(max(wall, 1.0))
    n_buckets = max(1, int(wall // size) + 1)
    buckets = [
        {"start_s": i * size, "created": 0, "modified": 0, "deleted": 0, "moved": 0, "total": 0, "agent": 0}
        for i in range(n_buckets)
    ]
    acc = Gathered(size, buckets)
    for ev in rec.events:
        add_event(ev, acc, _secs(rec, ev.t))
    acc.entries.sort(key=lambda e: e["seq"])
    agent = _with_agent_steps(rec, acc)

    sub = meta.submission
    submission = None
    if sub is not None:
        submission = {
            **sub.model_dump(),
            "t_s": _secs(rec, sub.at),
            "working_seconds": working_seconds_at(meta, parse_iso(sub.at)),
        }
    try:
        scores = list_results(rec.dir)
    except Exception:  # a broken result folder must not hide the timeline
        scores = []
    return {
        "session": {
            "session_id": meta.session_id,
            "task_id": meta.task_id,
            "task_hash": meta.task_hash,
            "mode": meta.mode,
            "client": meta.client.model_dump(),
            "state": meta.state,
            "created_at": meta.created_at,
            "ended_at": meta.ended_at,
            "format_version": meta.format_version,
            "bridge_version": meta.bridge_version,
            "practice": meta.practice,
            "quit_reason": meta.quit_reason,
        },
        "duration": {
            "wall_seconds": wall,
            "working_seconds": working_seconds_at(meta, end_t),
            "paused_seconds": round(sum(float(p["seconds"] or 0) for p in pauses), 3),
        },
        "clock": {"spans": spans, "pauses": pauses},
        "files": {
            "events": sum(acc.kinds.values()),
            **{k: acc.kinds.get(k, 0) for k in ("created", "modified", "deleted", "moved")},
            "synthetic": acc.synthetic,
            "paths": len(acc.per_path),
            "top": [{"path": p, "changes": n} for p, n in acc.per_path.most_common(10)],
        },
        "histogram": {"bucket_seconds": size, "buckets": buckets},
        "checkpoints": acc.checkpoints,
        "mcp_calls": {
            "total": len(acc.calls),
            "errors": sum(1 for c in acc.calls if not c["ok"]),
            "by_tool": acc.by_tool,
            "calls": acc.calls,
        },
        "notes": acc.notes,
        "incidents": acc.incidents,
        "contaminated": any(i["type"] == "golden_access" for i in acc.incidents),
        "submission": submission,
        "scores": scores,
        "entries": acc.entries,
        "agent": agent,
        "events": len(rec.events),
    }


def fmt_secs(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def sparkline(values: list[float]) -> str:
    top = max(values) if values else 0
    if top <= 0:
        return " " * len(values)
    return "".join(
        " " if v <= 0 else SPARK[min(len(SPARK) - 1, int((v / top) * (len(SPARK) - 1) + 0.5))] for v in values
    )


def render_timeline(data: dict[str, Any], console: Any) -> None:
    """Print a timeline built by `build_timeline` on a rich console."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    from bridge.textsafe import sanitize_data

    data = sanitize_data(data)  # notes and file names come from the agent: no raw escapes
    s, d = data["session"], data["duration"]
    head = (
        f"[bold]{escape(s['session_id'])}[/]  task [bold]{escape(s['task_id'])}[/]  mode {escape(s['mode'])}  "
        f"client {escape(str(s['client'].get('name')))} {escape(str(s['client'].get('version')))}\n"
        f"state {escape(s['state'])}  started {escape(s['created_at'])}  wall {fmt_secs(d['wall_seconds'])}  "
        f"working {fmt_secs(d['working_seconds'])}  paused {fmt_secs(d['paused_seconds'])}  "
        f"events {data['events']}  format v{s['format_version']}"
    )
    console.print(Panel(head, title="session", highlight=False))
    agent = data.get("agent")
    if agent:
        console.print(
            f"[bold]agent[/] {escape(agent['name'])} {escape(agent['version'])} model {escape(agent['model'])}: "
            f"{len(agent['steps'])} steps, {agent['tool_calls']} tool calls (kind 'agent' below)",
            highlight=False,
        )

    clock = Table(title="clock", title_justify="left")
    for col in ("span", "from", "to", "seconds"):
        clock.add_column(col)
    items = [("run", x) for x in data["clock"]["spans"]] + [("pause", x) for x in data["clock"]["pauses"]]
    items.sort(key=lambda kv: kv[1]["start_s"] or 0)
    for kind, x in items:
        clock.add_row(
            kind,
            fmt_secs(x["start_s"]),
            "open" if x.get("open") else fmt_secs(x["end_s"]),
            f"{x['seconds']:.1f}",
            style="dim" if kind == "pause" else None,
        )
    console.print(clock)

    f, h = data["files"], data["histogram"]
    totals = [b["total"] for b in h["buckets"]]
    console.print(
        f"[bold]file activity[/] {f['events']} events on {f['paths']} paths (created {f['created']}, modified "
        f"{f['modified']}, deleted {f['deleted']}, moved {f['moved']}; {f['synthetic']} found by reconciliation)",
        highlight=False,
    )
    console.print(
        f"  per {fmt_secs(h['bucket_seconds'])}: │{sparkline([float(t) for t in totals])}│ max "
        f"{max(totals) if totals else 0}/bucket",
        highlight=False,
    )
    if data.get("agent"):
        steps = [float(b.get("agent", 0)) for b in h["buckets"]]
        console.print(
            f"  agent steps: {' ' * max(0, len(fmt_secs(h['bucket_seconds'])) - 5)}│{sparkline(steps)}│ max "
            f"{int(max(steps)) if steps else 0}/bucket",
            highlight=False,
        )
    end_label = fmt_secs(d["wall_seconds"])
    axis = "0".ljust(max(1, len(totals) + 2 - len(end_label))) + end_label
    console.print(f"  {' ' * len('per ' + fmt_secs(h['bucket_seconds']) + ': ')}{axis}", highlight=False)
    if f["top"]:
        console.print(
            "  most changed: " + ", ".join(f"{escape(t['path'])} ({t['changes']})" for t in f["top"][:5]),
            highlight=False,
        )

    calls = data["mcp_calls"]
    if calls["total"]:
        t = Table(title=f"MCP calls: {calls['total']} ({calls['errors']} errors)", title_justify="left")
        t.add_column("tool")
        t.add_column("ok", justify="right")
        t.add_column("error", justify="right")
        for tool, c in sorted(calls["by_tool"].items()):
            t.add_row(escape(tool), str(c["ok"]), str(c["error"]))
        console.print(t)

    ev = Table(title="what happened", title_justify="left")
    for col in ("seq", "wall", "kind", "detail"):
        ev.add_column(col, overflow="fold")
    entries = data["entries"]
    shown = entries if len(entries) <= 200 else entries[:100] + entries[-100:]
    for e in shown:
        ev.add_row(str(e["seq"]), fmt_secs(e["t_s"]), e["kind"], escape(e["text"][:300]))
    console.print(ev)
    if len(entries) > len(shown):
        console.print(f"[dim]({len(entries) - len(shown)} entries elided; --json has them all)[/]")

    sub = data["submission"]
    if sub:
        console.print(
            f"[bold]submission[/] at {fmt_secs(sub['t_s'])} (working {fmt_secs(sub['working_seconds'])}) via "
            f"{escape(str(sub.get('signal')))}: {sub.get('files')} files, commit {str(sub.get('commit'))[:12]}, "
            f"tree {str(sub.get('tree_hash'))[:12]}, {'stable' if sub.get('stable') else 'UNSTABLE'}",
            highlight=False,
        )
    if data["scores"]:
        t = Table(title="scores", title_justify="left")
        for col in ("result", "grader", "moment", "profile", "outcome", "DSR", "Pass@1", "AC"):
            t.add_column(col)
        for r in data["scores"]:
            for prof, sm in r["summary"].items():
                t.add_row(
                    escape(r["name"]),
                    escape(str(r.get("grader_version"))),
                    escape(str((r.get("moment") or {}).get("spec", ""))),
                    prof,
                    escape(str(sm.get("outcome"))),
                    "PASS" if sm.get("dsr") else "FAIL",
                    f"{sm.get('passed')}/{sm.get('total')} ({sm.get('pass_at_1')})",
                    str(sm.get("api_coverage")),
                )
        console.print(t)
