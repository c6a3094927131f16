from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from bridge.recording.events import EventLog, ReadStats, load_events, read_events


def test_records_have_seq_time_mono_type(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", mark_open=False)
    a = log.append("note", text="hello", n=1)
    b = log.append("mcp_call", tool="list_tasks")
    log.close()
    assert (a["seq"], b["seq"]) == (1, 2)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", a["t"])
    assert 0 <= a["mono"] <= b["mono"]
    recs, bad = load_events(tmp_path / "events.jsonl")
    assert bad == 0
    assert [r["type"] for r in recs] == ["note", "mcp_call"]
    assert recs[0]["text"] == "hello"


def test_seq_continues_after_reopen_and_open_is_marked(tmp_path: Path) -> None:
    p = tmp_path / "events.jsonl"
    with EventLog(p) as log:
        log.append("a")
        log.append("b")
    with EventLog(p) as log:
        assert log.seq == 4  # log_opened, a, b, then this open's own log_opened
        rec = log.append("c")
    recs, _ = load_events(p)
    assert [r["seq"] for r in recs] == [1, 2, 3, 4, 5]
    assert [r["type"] for r in recs] == ["log_opened", "a", "b", "log_opened", "c"]
    assert rec["seq"] == 5


def test_truncated_last_line_is_skipped_counted_and_repaired(tmp_path: Path) -> None:
    p = tmp_path / "events.jsonl"
    with EventLog(p, mark_open=False) as log:
        for i in range(5):
            log.append("x", i=i)
    data = p.read_bytes()
    p.write_bytes(data[:-7])  # crash mid-write: last line cut
    stats = ReadStats()
    recs = list(read_events(p, stats=stats))
    assert [r["i"] for r in recs] == [0, 1, 2, 3]
    assert stats.bad_lines == 1 and stats.events == 4
    with EventLog(p, mark_open=False) as log:
        assert log.bad_lines == 1
        rec = log.append("after_crash")
    assert rec["seq"] == 5  # continues after the last readable record
    recs, bad = load_events(p)
    assert bad == 1
    assert recs[-1]["type"] == "after_crash"
    # the partial line was terminated, so the new record is on a line of its own
    assert json.loads(p.read_bytes().splitlines()[-1])["type"] == "after_crash"


def test_thread_safe_appends(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl", mark_open=False, fsync_every=50)

    def work(k: int) -> None:
        for i in range(200):
            log.append("w", k=k, i=i, payload="x" * 100)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    recs, bad = load_events(tmp_path / "e.jsonl")
    assert bad == 0
    assert [r["seq"] for r in recs] == list(range(1, 1601))
    assert {(r["k"], r["i"]) for r in recs} == {(k, i) for k in range(8) for i in range(200)}


def test_reserved_keys_rejected(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "e.jsonl")
    with pytest.raises(ValueError):
        log.append("x", seq=3)
    log.close()
    with pytest.raises(ValueError):
        log.append("y")
