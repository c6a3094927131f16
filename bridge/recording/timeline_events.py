"""What each kind of recording event adds to a timeline (bridge/recording/timeline.py): one
handler per event class, chosen by `functools.singledispatch` on the typed event
(bridge/recording/event_model.py); kinds without a handler add nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import singledispatch
from typing import Any

from bridge.recording.event_model import (
    Attach,
    Checkpoint,
    ClockEvent,
    ErrorEvent,
    Event,
    FileDeleted,
    FileEvent,
    FileMoved,
    GoldenAccess,
    GoldenWatchWarning,
    McpCall,
    Note,
    Quit,
    RecorderDegraded,
    RecorderStarted,
    Score,
    ScoreResume,
    Sentinel,
    SessionStart,
    Submit,
)


@dataclass
class Gathered:
    """What the events of a recording add up to, filled by one handler per event kind (`add_event`)."""

    size: int  # seconds per histogram bucket
    buckets: list[dict[str, Any]]
    kinds: Counter[str] = field(default_factory=Counter)
    per_path: Counter[str] = field(default_factory=Counter)
    synthetic: int = 0
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    by_tool: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)
    incidents: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)

    def entry(self, ev: Event, ts: float | None, kind: str, text: str) -> None:
        self.entries.append({"seq": ev.seq, "t_s": ts, "kind": kind, "text": text})

    def incident(self, ev: Event, ts: float | None, detail: str) -> None:
        """A recorder or session incident (`detail` says what happened), listed and shown."""
        self.incidents.append({"seq": ev.seq, "t_s": ts, "type": ev.type, "detail": detail})
        self.entry(ev, ts, "incident", f"{ev.type} {detail}".strip())


@singledispatch
def add_event(ev: Event, acc: Gathered, ts: float | None) -> None:
    """Add one event to the timeline; kinds without a handler below (seed, reconcile, …) add nothing."""


@add_event.register
def _file(ev: FileEvent | FileDeleted | FileMoved, acc: Gathered, ts: float | None) -> None:
    kind = ev.type[5:]
    acc.kinds[kind] += 1
    acc.per_path[ev.path] += 1
    if isinstance(ev, FileMoved):
        if ev.dest:
            acc.per_path[ev.dest] += 1
    elif ev.synthetic:
        acc.synthetic += 1
    if ts is not None:
        bucket = acc.buckets[min(len(acc.buckets) - 1, max(0, int(ts // acc.size)))]
        bucket[kind] += 1
        bucket["total"] += 1


@add_event.register
def _checkpoint(ev: Checkpoint, acc: Gathered, ts: float | None) -> None:
    acc.checkpoints.append(
        {
            "seq": ev.seq,
            "t_s": ts,
            "reason": ev.reason,
            "commit": ev.commit,
            "tree_hash": ev.tree_hash,
            "files": ev.files,
            "changes": ev.changes,
            "reconciled": ev.reconciled,
        }
    )
    if ev.reconciled:
        acc.incidents.append(
            {
                "seq": ev.seq,
                "t_s": ts,
                "type": "reconciled",
                "detail": f"{ev.reconciled} change(s) found only by reconciliation",
            }
        )


@add_event.register
def _mcp_call(ev: McpCall, acc: Gathered, ts: float | None) -> None:
    acc.calls.append({"seq": ev.seq, "t_s": ts, "tool": ev.tool, "ok": ev.ok, "error": ev.error})
    slot = acc.by_tool.setdefault(ev.tool, {"ok": 0, "error": 0})
    slot["ok" if ev.ok else "error"] += 1
    acc.entry(ev, ts, "mcp", f"{ev.tool} → {'ok' if ev.ok else 'error: ' + (ev.error or '')}")


@add_event.register
def _note(ev: Note, acc: Gathered, ts: float | None) -> None:
    acc.notes.append({"seq": ev.seq, "t_s": ts, "working_seconds": ev.working_seconds, "text": ev.text})
    acc.entry(ev, ts, "note", ev.text)


@add_event.register
def _clock(ev: ClockEvent, acc: Gathered, ts: float | None) -> None:
    state = "clock running" if ev.type == "clock_start" else "clock paused"
    acc.entry(ev, ts, "clock", f"{state} (working {float(ev.working_seconds or 0):.1f}s)")


@add_event.register
def _submit(ev: Submit, acc: Gathered, ts: float | None) -> None:
    text = f"submitted via {ev.signal}: {ev.files} files, commit {ev.commit[:12]}"
    acc.entry(ev, ts, "submit", text + ("" if ev.stable else " (unstable)"))


@add_event.register
def _score(ev: Score, acc: Gathered, ts: float | None) -> None:
    parts = [
        f"{p}: Pass@1 {s.get('pass_at_1')} DSR {s.get('dsr')} AC {s.get('api_coverage')}" for p, s in ev.summary.items()
    ]
    acc.entry(ev, ts, "score", "scored — " + "; ".join(parts))


@add_event.register
def _session(ev: SessionStart | RecorderStarted, acc: Gathered, ts: float | None) -> None:
    acc.entry(ev, ts, "session", ev.type.replace("_", " ") + (f" ({ev.mode})" if ev.mode else ""))


@add_event.register
def _recorder_degraded(ev: RecorderDegraded, acc: Gathered, ts: float | None) -> None:
    acc.incident(ev, ts, ev.reason or "")


@add_event.register
def _error(ev: ErrorEvent, acc: Gathered, ts: float | None) -> None:
    if ev.type in ("recorder_error", "score_failed"):  # a start or submit that failed shows in the session state
        acc.incident(ev, ts, ev.error)


@add_event.register
def _attach(ev: Attach, acc: Gathered, ts: float | None) -> None:
    acc.incident(ev, ts, ev.state or "")


@add_event.register
def _resume_or_sentinel(ev: ScoreResume | Sentinel, acc: Gathered, ts: float | None) -> None:
    acc.incident(ev, ts, "")


@add_event.register
def _quit(ev: Quit, acc: Gathered, ts: float | None) -> None:
    acc.incident(ev, ts, ev.reason)


@add_event.register
def _golden(ev: GoldenAccess | GoldenWatchWarning, acc: Gathered, ts: float | None) -> None:
    # a golden test/solution file opened while the session was open (bridge/sessions/contamination.py)
    acc.incident(ev, ts, f"{ev.kind} {ev.path}" if isinstance(ev, GoldenAccess) else ev.message)
