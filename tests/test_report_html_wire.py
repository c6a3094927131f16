"""The wire transcript on an attempt's recording page (issue 38, item 7): every call the model
gateway forwarded, collapsible, with its status, latency, tokens and cost; every recorded text
escaped; cut at a size with a note."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bridge.reports import wire_sections
from bridge.reports.html import render_html
from tests.helpers import SAMPLE, assert_no_active_content

EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def _record(i: int, *, answer: str = "ok", status: int | None = 200, **call: Any) -> dict[str, Any]:
    sse = "event: content_block_delta\ndata: " + json.dumps({"delta": {"type": "text_delta", "text": answer}})
    return {
        "at": 1.0 + i,
        "request": {
            "method": "POST",
            "path": "/v1/messages",
            "query": "beta=true",
            "headers": {"x-api-key": "[redacted]", "user-agent": EVIL},
            "body": json.dumps({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": EVIL}]}),
        },
        "response": {"status": status, "headers": {"content-type": "text/event-stream"}, "body": sse},
        "call": {
            "api": "anthropic",
            "kind": "messages",
            "model": "claude-sonnet-4-5",
            "status": status,
            "seconds": 1.234,
            "tries": 1,
            "tokens": {"input": 120, "output": 7, "cache_read": 0, "cache_write": 0},
            "cost_usd": 0.000465,
            **call,
        },
    }


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    shutil.copytree(SAMPLE, rec)
    return rec


def _write(rec: Path, records: list[Any], tail: str = "") -> None:
    (rec / "agent").mkdir(exist_ok=True)
    lines = [json.dumps(r) if not isinstance(r, str) else r for r in records]
    (rec / "agent" / "wire.jsonl").write_text("\n".join(lines) + "\n" + tail)


def test_the_attempt_page_shows_each_call_escaped(recording: Path) -> None:
    refused = {"at": 9.0, "call": {"api": "anthropic", "kind": "messages", "model": "x", "refused": "cost_limit"}}
    _write(
        recording,
        [
            _record(1, answer=EVIL),
            _record(2, status=529, failure="provider_unavailable", tries=3, cost_usd=None, tokens=None),
            "not json {",
            ["a list, not a record"],
            refused,
        ],
    )
    page = render_html(recording)
    assert_no_active_content(page)
    section = page[page.index("Model calls (wire transcript)") :]
    assert "3 calls through the model gateway, 1 answered" in section
    assert section.count("<details class='wire'>") == 3
    # status, latency, tokens and cost in each call's line; the failure and the refusal named
    assert "anthropic messages · <code>claude-sonnet-4-5</code> · <span class='pass'>200</span> · 1.23 s" in section
    assert "input 120, output 7 · $0.000465" in section
    assert "<span class='fail'>529</span>" in section and "3 tries" in section and "unpriced" in section
    assert "<span class='fail'>cost_limit</span>" in section and "never forwarded" in section
    assert "1 refused by the gateway" in section and "2 lines that are no call record were skipped" in section
    # the model's answer and the agent's request: shown as text, never as markup
    assert "<script>" not in page and "&lt;script&gt;alert(2)&lt;/script&gt;" in section
    assert "x-api-key: [redacted]" in section and "/v1/messages?beta=true" in section


def test_a_long_transcript_is_cut_with_a_note(recording: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_sections, "MAX_CALLS", 2)
    monkeypatch.setattr(wire_sections, "MAX_BODY_CHARS", 500)
    _write(recording, [_record(i, answer="z" * 2000) for i in range(5)])
    section = render_html(recording).split("Model calls (wire transcript)")[1]
    assert section.count("<details class='wire'>") == 2 and "… 3 more calls" in section
    assert "more characters (see agent/wire.jsonl)" in section and "z" * 2000 not in section
    # a transcript larger than the page reads: its beginning, and a note
    monkeypatch.setattr(wire_sections, "MAX_READ_BYTES", 3000)
    section = render_html(recording).split("Model calls (wire transcript)")[1]
    assert "the page shows its beginning" in section and section.count("<details class='wire'>") == 1


def test_no_transcript_no_section() -> None:
    assert "wire transcript" not in render_html(SAMPLE)


def test_a_transcript_behind_a_link_is_not_read(recording: Path, tmp_path: Path) -> None:
    """A hostile recording's `agent/wire.jsonl` that links elsewhere shows nothing of its target."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(_record(1, answer="THE-LINKED-FILE")) + "\n")
    (recording / "agent").mkdir(exist_ok=True)
    (recording / "agent" / "wire.jsonl").symlink_to(outside)
    page = render_html(recording)
    assert "THE-LINKED-FILE" not in page and "wire transcript" not in page
