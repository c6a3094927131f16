"""Settling what a killed bridge process left behind.

`session.json` is always written atomically (temp file + rename), so a `kill -9` never leaves a
torn file; but it can leave a clock span open (the process died between stopping the clock in
memory and saving). When a recording's clock is found running and no live process owns it, the
open span is closed at the last recorded event time: time the bridge was down is not work.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bridge.fs.files import write_json_atomic
from bridge.recording.clock import iso, parse_iso
from bridge.recording.events import read_events

if TYPE_CHECKING:
    from bridge.sessions.models import SessionRecord


def last_event_time(rec_dir: Path) -> str | None:
    last: str | None = None
    path = rec_dir / "events.jsonl"
    if not path.is_file():
        return None
    for event in read_events(path):
        stamp = event.get("t")
        if isinstance(stamp, str):
            last = stamp
    return last


def settle_orphaned_clock(rec_dir: Path, record: SessionRecord) -> bool:
    """Close a running clock left by a dead process; saves session.json. True when settled.

    The caller has checked that no live process owns the recording."""
    if not record.clock.running:
        return False
    span = record.clock.spans[-1]
    stamp = last_event_time(rec_dir) or span.start
    try:
        end = max(parse_iso(stamp), parse_iso(span.start))
    except ValueError:
        end = parse_iso(span.start)
    record.clock.stop(end)
    if record.state == "submitted" and record.ended_at is None:
        record.ended_at = iso(end)
    write_json_atomic(rec_dir / "session.json", record.model_dump(mode="json"))
    return True
