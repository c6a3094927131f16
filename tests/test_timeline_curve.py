"""Timeline and score-over-time curve of the committed sample recording."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from bridge.recording.curve import compute_curve, curve_moments, latest_curve, render_curve
from bridge.recording.reader import open_recording
from bridge.recording.timeline import bucket_seconds, build_timeline, render_timeline, sparkline

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


def test_timeline_content() -> None:
    tl = build_timeline(SAMPLE)
    assert tl["session"]["task_id"] == "kv-ledger" and tl["session"]["format_version"] == 1
    assert len(tl["clock"]["spans"]) == 2 and len(tl["clock"]["pauses"]) == 1
    assert 2.5 < tl["clock"]["pauses"][0]["seconds"] < 10
    d = tl["duration"]
    assert (
        d["working_seconds"] < d["wall_seconds"]
        and abs(d["paused_seconds"] - tl["clock"]["pauses"][0]["seconds"]) < 0.01
    )
    f = tl["files"]
    assert (f["created"], f["modified"], f["deleted"], f["moved"]) == (4, 1, 1, 1)
    assert sum(b["total"] for b in tl["histogram"]["buckets"]) == f["events"] == 7
    calls = tl["mcp_calls"]
    assert calls["total"] == 6 and calls["errors"] == 1 and calls["by_tool"]["submit_task"] == {"ok": 1, "error": 1}
    assert [n["text"] for n in tl["notes"]] == ['adding <history> & counters — "done" soon']
    assert tl["submission"]["commit"] == json.loads((SAMPLE / "session.json").read_text())["submission"]["commit"]
    assert tl["scores"] and tl["scores"][0]["kind"] == "submission"
    assert {c["reason"] for c in tl["checkpoints"]} >= {"start", "auto", "seal"}
    kinds = [e["kind"] for e in tl["entries"]]
    assert kinds.index("note") < kinds.index("submit") < kinds.index("score")
    seqs = [e["seq"] for e in tl["entries"]]
    assert seqs == sorted(seqs)


def test_timeline_render_and_cli(capsys: pytest.CaptureFixture[str]) -> None:
    buf = io.StringIO()
    render_timeline(build_timeline(SAMPLE), Console(file=buf, width=120))
    text = buf.getvalue()
    assert "MCP calls: 6 (1 errors)" in text and "adding <history>" in text and "pause" in text
    from bridge.cli import main

    assert main(["timeline", str(SAMPLE), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"]["events"] == 7


def test_helpers() -> None:
    assert bucket_seconds(30) == 1 and bucket_seconds(3600) == 120 and bucket_seconds(86400 * 3) == 7200
    assert sparkline([0, 1, 2, 4]) == " ▃▅█"


def test_curve_moments_spread_to_submission() -> None:
    rec = open_recording(SAMPLE)
    moments = curve_moments(rec, 5)
    assert len(moments) == 5 and moments[-1].spec == "submission" and moments[-1].commit == rec.meta.submission.commit
    walls = [m.wall_seconds for m in moments]
    assert walls == sorted(walls)
    gaps = [b - a for a, b in zip(walls, walls[1:-1], strict=False)]  # the last gap (to submission) left out
    assert max(gaps) - min(gaps) < 0.05  # evenly spread in wall-clock time
    assert [m.seq for m in moments] == sorted(m.seq for m in moments)


def test_stored_curve_renders() -> None:
    curve = latest_curve(SAMPLE)
    assert curve is not None and curve["points"][-1]["pass_at_1"] == 1.0
    buf = io.StringIO()
    render_curve(curve, Console(file=buf, width=120))
    assert "Pass@1 over time" in buf.getvalue() and "35/35" in buf.getvalue()


@pytest.mark.docker
def test_curve_scores_moments(docker_client, tmp_path: Path) -> None:
    rec = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, rec)
    curve = compute_curve(rec, points=3, workers=2, profile="strict")
    pts = curve["points"]
    assert len(pts) == 3 and pts[-1]["moment"]["spec"] == "submission"
    stored = json.loads(next((rec / "results").glob("submission-*/result.json")).read_text())["profiles"]["strict"]
    assert pts[-1]["pass_at_1"] == stored["pass_at_1"]["score"] and pts[-1]["dsr"] is True
    assert pts[0]["pass_at_1"] < pts[-1]["pass_at_1"]  # the partial app passes fewer tests
    assert all(p["snapshot_hash"] == p["tree_hash"] for p in pts)
    assert curve["distinct_snapshots"] == len({p["tree_hash"] for p in pts})
    saved = rec / curve["path"]
    assert saved.is_file() and json.loads(saved.read_text())["points"] == pts
    from bridge.recording.verify import verify_recording

    assert verify_recording(rec).ok


def test_timeline_strips_terminal_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 8: notes and file names are the agent's text; `rgbridge timeline` must not print escapes raw."""
    rec = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, rec)
    evil = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil"
    lines = (rec / "events.jsonl").read_text().splitlines()
    out_lines = []
    for line in lines:
        ev = json.loads(line)
        if ev.get("type") == "note":
            ev["text"] = "note " + evil
        if isinstance(ev.get("path"), str):
            ev["path"] = ev["path"] + evil
        out_lines.append(json.dumps(ev))
    (rec / "events.jsonl").write_text("\n".join(out_lines) + "\n")
    from bridge.cli import main

    assert main(["timeline", str(rec)]) == 0
    out = capsys.readouterr().out
    assert "note" in out and "\\x1b]0;owned" in out
    assert not any(ch in out for ch in ("\x1b", "\x07", "\x9b", "\u202e"))
