"""The typed event model (bridge/recording/event_model.py): one model per event type, checked
when a record is written and when a recording is read; working seconds on every event."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from bridge.errors import RecordingError
from bridge.recording.event_model import (
    KNOWN_TYPES,
    EventShapeError,
    FileEvent,
    OtherEvent,
    parse_event,
)
from bridge.recording.events import EventLog, read_events
from bridge.recording.reader import open_recording
from bridge.recording.replay import replay
from bridge.recording.verify import verify_recording
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = REPO_ROOT / "recordings" / "samples" / "kv-ledger-sample"
FORMAT_DOC = REPO_ROOT / "docs" / "recording-format.md"


def test_the_committed_sample_fits_the_model() -> None:
    records = list(read_events(SAMPLE / "events.jsonl"))
    assert records
    for record in records:
        event = parse_event(record)
        assert event.seq == record["seq"]
        assert type(event) is not OtherEvent, record["type"]  # every type the bridge writes is modelled


def test_every_modelled_type_is_documented() -> None:
    doc = FORMAT_DOC.read_text()
    missing = [t for t in sorted(KNOWN_TYPES) if f"`{t}`" not in doc]
    assert not missing, missing


def test_unknown_types_and_extra_fields_are_kept() -> None:
    event = parse_event({"seq": 1, "t": "2026-01-01T00:00:00Z", "mono": 0.1, "type": "from_the_future", "x": [1]})
    assert isinstance(event, OtherEvent) and event.model_extra == {"x": [1]}
    known = parse_event(
        {
            "seq": 2,
            "t": "2026-01-01T00:00:00Z",
            "mono": 0.1,
            "type": "file_created",
            "path": "a.py",
            "sha256": "0" * 64,
            "size": 1,
            "mode": "100644",
            "later": True,
        }
    )
    assert isinstance(known, FileEvent) and known.model_extra == {"later": True}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"type": "file_created", "path": 7}, "file_created: path"),
        ({"type": "file_moved", "path": "a"}, "file_moved: dest"),
        ({"type": "checkpoint", "reason": "auto", "commit": ["x"], "tree_hash": "h"}, "checkpoint: commit"),
        ({"type": "mcp_call", "tool": "x", "arguments": "not a dict"}, "mcp_call: arguments"),
        ({"type": "clock_stop"}, "clock_stop: working_seconds"),
    ],
)
def test_a_record_that_does_not_fit_its_type_is_named(fields: dict, message: str) -> None:
    with pytest.raises(EventShapeError, match=message):
        parse_event({"seq": 1, "t": "2026-01-01T00:00:00Z", "mono": 0.0, **fields})


def test_the_writer_refuses_a_malformed_record_and_keeps_its_seq(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", mark_open=False, work=lambda: 12.3456)
    log.append("note", text="first")
    with pytest.raises(EventShapeError, match="note: text"):
        log.append("note", text={"not": "text"})
    log.append("note", text="second")
    log.close()
    records = list(read_events(tmp_path / "events.jsonl"))
    assert [r["seq"] for r in records] == [1, 2] and [r["text"] for r in records] == ["first", "second"]
    assert all(r["work"] == 12.346 for r in records)


def _tamper(rec_dir: Path, seq: int, **changes: object) -> None:
    path = rec_dir / "events.jsonl"
    lines = path.read_text().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        if record["seq"] == seq:
            record.update(changes)
        out.append(json.dumps(record))
    path.write_text("\n".join(out) + "\n")


def test_a_recording_with_a_malformed_event_is_a_clear_error(tmp_path: Path) -> None:
    rec_dir = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, rec_dir)
    file_event = next(r for r in read_events(rec_dir / "events.jsonl") if r["type"] == "file_created")
    _tamper(rec_dir, file_event["seq"], path={"../../etc": "passwd"})
    with pytest.raises(RecordingError, match=rf"event {file_event['seq']} is malformed \(file_created: path"):
        open_recording(rec_dir)
    with pytest.raises(RecordingError, match="malformed"):
        replay(rec_dir, "submission", tmp_path / "out")
    report = verify_recording(rec_dir)
    assert not report.ok and any("malformed" in p for p in report.problems)


PAUSE = 0.6


def test_session_events_carry_working_seconds_that_stop_while_paused(tmp_path: Path, tasks_dir: Path) -> None:
    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    try:
        sid = mgr.start("word-duel", tmp_path / "ws").session_id
        time.sleep(0.3)
        mgr.pause(sid)
        time.sleep(PAUSE)  # not work
        mgr.resume(sid)
        mgr.note(sid, "after the pause")
        mgr.quit(sid)
    finally:
        mgr.close()
    records = list(read_events(tmp_path / "rec" / sid / "events.jsonl"))
    works = [r["work"] for r in records]
    assert all(isinstance(w, float) for w in works)
    assert works == sorted(works)  # working time never goes back
    stop = next(r for r in records if r["type"] == "clock_stop")
    note = next(r for r in records if r["type"] == "note")
    assert stop["work"] >= 0.3
    # counted, the pause alone would put the note PAUSE after the stop; the work between the resume
    # and the note is what is left (a few ms, more on a loaded machine: no tighter bound)
    assert note["work"] - stop["work"] < PAUSE
    assert abs(note["work"] - note["working_seconds"]) < 0.05
    open_recording(tmp_path / "rec" / sid)  # what the bridge writes, it reads
