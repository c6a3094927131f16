"""The one reader of the wire transcript (bridge/recording/wire_transcript.py): the file sits in a
recording that may be hostile, so it is read only as a regular file reached without a link, within
a size and a record count, every line that is no JSON object skipped and counted; and the steps
read back from it attach a tool result once when a request is sent again."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.gateway.wire_trajectory import parsed_run
from bridge.recording import wire_transcript
from bridge.recording.wire_transcript import WireStats, refused, wire_records


def _read(path: Path, **limits: int) -> tuple[list[dict[str, Any]], WireStats]:
    stats = WireStats()
    limits = {"max_records": 100, "max_bytes": 1 << 20, **limits}
    return list(wire_records(path, stats=stats, **limits)), stats


def test_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    path.write_bytes(b'{"a": 1}\nnot json\n[1, 2]\n\n"text"\n{"b": \xff}\n{"c": 3}')  # no final newline
    records, stats = _read(path)
    assert records == [{"a": 1}, {"c": 3}]
    assert (stats.opened, stats.records, stats.bad_lines, stats.cut) == (True, 2, 4, False)


def test_the_size_cap_and_the_record_count_cut_the_read(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    line = json.dumps({"x": "y" * 80}) + "\n"
    path.write_text(line * 10)
    records, stats = _read(path, max_bytes=len(line) * 3 + 5)  # the 4th line does not end within
    assert len(records) == 3 and stats.cut
    records, stats = _read(path, max_records=4)
    assert len(records) == 4 and stats.cut
    records, stats = _read(path, max_bytes=len(line) * 10)  # exactly the file: not cut
    assert len(records) == 10 and not stats.cut


def test_an_overlong_line_is_skipped_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_transcript, "MAX_LINE_BYTES", 64)
    monkeypatch.setattr(wire_transcript, "_CHUNK", 16)
    path = tmp_path / "wire.jsonl"
    path.write_text('{"a": 1}\n' + json.dumps({"big": "z" * 500}) + '\n{"b": 2}\n')
    records, stats = _read(path)
    assert records == [{"a": 1}, {"b": 2}] and stats.bad_lines == 1 and not stats.cut


def test_a_link_a_fifo_or_a_folder_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text('{"secret": "outside the recording"}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for path in (link, fifo, tmp_path, tmp_path / "missing.jsonl"):
        done: list[tuple[list[dict[str, Any]], WireStats]] = []
        reader = threading.Thread(target=lambda p=path, out=done: out.append(_read(p)), daemon=True)
        reader.start()
        reader.join(timeout=5)
        assert done, f"{path.name}: the read blocked"
        records, stats = done[0]
        assert records == [] and not stats.opened, path.name


def test_refused_names_the_gateways_reason_only() -> None:
    assert refused({"call": {"refused": "cost_limit"}}) == "cost_limit"
    for record in ({"call": {"status": 200}}, {"call": "x"}, {"call": {"refused": 1}}, [], None):
        assert refused(record) is None


def _anthropic(status: int | None, results: list[tuple[str, str]], answer: str = "", **call: Any) -> dict[str, Any]:
    """A transcript record whose request carries `results` back and whose answer (if 200) says `answer`."""
    content = [{"type": "tool_result", "tool_use_id": i, "content": c} for i, c in results]
    body = {"messages": [{"role": "user", "content": content or "hi"}]}
    whole = {"type": "message", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}
    if answer:
        whole["content"] = [{"type": "text", "text": answer}]
    return {
        "request": {"method": "POST", "path": "/v1/messages", "body": json.dumps(body)},
        "response": {"status": status, "body": json.dumps(whole)} if status else None,
        "call": {"api": "anthropic", "billed": True, "status": status, **call},
    }


def test_a_tool_result_sent_again_is_attached_once() -> None:
    """A request sent again after a failed call (or refused ones, before the agent is stopped)
    carries the same tool results: the step's observation is one, not one per send."""
    records = [
        _anthropic(200, []),  # asks for tool t1
        _anthropic(529, [("t1", "a.txt")], failure="provider_unavailable"),
        _anthropic(None, [("t1", "a.txt")], refused="cost_limit"),
        _anthropic(200, [("t1", "a.txt")], answer="done"),
    ]
    run = parsed_run(iter(records), "the prompt")
    steps = [s for s in run.steps if s.source == "agent"]
    assert len(steps) == 2 and steps[0].results == [("t1", "a.txt")] and run.final_message == "done"
