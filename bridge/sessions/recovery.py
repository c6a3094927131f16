"""Settling what a killed bridge process left behind.

`session.json` is always written atomically (temp file + rename), so a `kill -9` never leaves a
torn file; but it can leave a clock span open (the process died between stopping the clock in
memory and saving). When a recording's clock is found running and no live process owns it, the
open span is closed at the last recorded event time: time the bridge was down is not work.
Session.json and the events are made to agree (`settle_orphaned_clock`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.fs.files import write_json_atomic
from bridge.recording.clock import iso, parse_iso
from bridge.recording.events import EventLog, read_events

if TYPE_CHECKING:
    from bridge.sessions.models import SessionRecord


def _last_times(rec_dir: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The time of the last event and the last clock event (`clock_start`/`clock_stop`)."""
    last: str | None = None
    clock: dict[str, Any] | None = None
    path = rec_dir / "events.jsonl"
    if not path.is_file():
        return None, None
    for event in read_events(path):
        stamp = event.get("t")
        if isinstance(stamp, str):
            last = stamp
            if event.get("type") in ("clock_start", "clock_stop"):
                clock = event
    return last, clock


def settle_orphaned_clock(rec_dir: Path, record: SessionRecord) -> bool:
    """Close a running clock left by a dead process; saves session.json. True when settled.

    The events are the record of what happened: when their last clock event is a `clock_stop`
    (the process died after logging a pause or a submit's stop but before saving session.json),
    the clock stops at that event and an active session becomes paused, so the two agree and
    the clock does not run on after the restart. Otherwise the open span is closed at the last
    recorded event and a `clock_stop` is appended for it (the caller logs a `clock_start` if
    it starts the clock again). The caller has checked that no live process owns the recording."""
    if not record.clock.running:
        return False
    span = record.clock.spans[-1]
    last, clock_event = _last_times(rec_dir)
    logged_stop = clock_event is not None and clock_event.get("type") == "clock_stop"
    stamp = str(clock_event["t"]) if logged_stop and clock_event else (last or span.start)
    try:
        end = max(parse_iso(stamp), parse_iso(span.start))
    except ValueError:
        end = parse_iso(span.start)
    record.clock.stop(end)
    if record.state == "submitted" and record.ended_at is None:
        record.ended_at = iso(end)
    if logged_stop and record.state == "active":
        record.state = "paused"
    if not logged_stop:
        log = EventLog(rec_dir / "events.jsonl", mark_open=False, work=record.clock.elapsed)
        try:
            log.append("clock_stop", working_seconds=record.clock.elapsed(), recovered=True)
        finally:
            log.close()
    write_json_atomic(rec_dir / "session.json", record.model_dump(mode="json"))
    return True
