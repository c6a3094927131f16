"""The session verbs are defined once (bridge/sessions/verbs.py): the MCP tools are generated
from that table and the human panel dispatches through it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bridge.sessions.manager import SessionManager
from bridge.sessions.verbs import BY_TOOL, REQUIRED, VERBS
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server


@pytest.fixture()
def manager(tmp_path: Path):
    mgr = SessionManager(Catalog.from_options(), recordings_dir=tmp_path / "rec")
    yield mgr
    mgr.close()


def test_every_session_tool_comes_from_the_registry(manager: SessionManager, tmp_path: Path) -> None:
    server = build_server(manager, default_workspace=tmp_path)
    tools = {t.name: t for t in asyncio.run(server.list_tools())}
    assert set(BY_TOOL) <= set(tools)
    for name, verb in BY_TOOL.items():
        tool = tools[name]
        assert tool.description == verb.doc
        assert bool(tool.annotations and tool.annotations.read_only_hint) == verb.read_only
        declared = {p.name for p in verb.params}
        assert declared <= set(tool.input_schema["properties"]), name
        required = set(tool.input_schema.get("required", []))
        assert {p.name for p in verb.params if p.default is REQUIRED} <= required, name
    assert tools["add_note"].input_schema["required"] == ["text"]
    assert "session_id" in tools["pause_task"].input_schema["properties"]


def test_logged_arguments_follow_the_declaration() -> None:
    note = VERBS["note"]
    assert note.logged_arguments("s1", {"text": "hi", "extra": "never logged"}) == {"text": "hi", "session_id": "s1"}
    assert VERBS["quit"].logged_arguments(None, {}) == {"reason": "", "session_id": None}


def test_invoke_checks_arguments(manager: SessionManager) -> None:
    with pytest.raises(TypeError, match="missing"):
        VERBS["note"].invoke(manager, "nope")
    with pytest.raises(TypeError, match="unknown"):
        VERBS["pause"].invoke(manager, "nope", text="x")


def test_panel_and_mcp_act_through_the_same_verbs(manager: SessionManager, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    status = manager.start("kv-ledger", workspace)
    sid = status.session_id
    assert VERBS["pause"].invoke(manager, sid).state == "paused"
    assert VERBS["resume"].invoke(manager, sid).state == "active"
    VERBS["note"].invoke(manager, sid, text="from the registry")
    events = (Path(manager.recordings_dir) / sid / "events.jsonl").read_text()
    assert "from the registry" in events
    assert VERBS["quit"].invoke(manager, sid, reason="done").state == "quit"


def _recording(verb, calls: list):
    """The same verb, its calls noted (name, signal, arguments) before it runs."""
    from dataclasses import replace

    def call(m, sid, ctx, **kw):
        calls.append((verb.name, ctx.signal, ctx.allow_nonempty, kw))
        return verb.call(m, sid, ctx, **kw)

    return replace(verb, call=call)


def test_cli_verbs_go_through_the_table(
    tmp_path: Path, tasks_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rgbridge session start` (and its panel) and `rgbridge submit` dispatch through the verb
    table, as the MCP tools do: the verbs' own checks and answers apply to the CLI too."""
    import os
    import sys

    from bridge.cli import main as cli
    from bridge.commands import sessions as cli_sessions
    from bridge.scoring.run import engine
    from bridge.sessions.verbs import START
    from tests.helpers import CountingScorer

    calls: list = []
    monkeypatch.setattr(cli_sessions, "START", _recording(START, calls))
    for name in ("status", "result", "quit", "submit"):
        monkeypatch.setitem(VERBS, name, _recording(VERBS[name], calls))
    read_end, write_end = os.pipe()
    os.write(write_end, b"quit\n")
    os.close(write_end)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end))  # the panel reads commands as lines
    rec, ws = tmp_path / "rec", tmp_path / "ws"
    (ws).mkdir()
    (ws / "notes.txt").write_text("already here\n")
    assert (
        cli(
            [
                "session",
                "start",
                "--task",
                "kv-ledger",
                "--workspace",
                str(ws),
                "--recordings",
                str(rec),
                "--task-dir",
                str(tasks_dir),
                "--allow-nonempty",
            ]
        )
        == 0
    )
    assert calls[0][:3] == ("start", "cli", True) and calls[0][3]["task_id"] == "kv-ledger"
    assert ("quit", "cli", False, {"reason": "quit from the session panel"}) in calls
    assert any(c[0] == "status" for c in calls)

    calls.clear()
    ws2 = tmp_path / "ws2"
    mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=rec, scorer=CountingScorer())
    try:
        mgr.start("kv-ledger", ws2)
    finally:
        mgr.close()
    monkeypatch.setattr(engine, "default_scorer", lambda: CountingScorer())
    capsys.readouterr()
    code = cli(["submit", "--workspace", str(ws2), "--recordings", str(rec), "--task-dir", str(tasks_dir), "--json"])
    assert code == 0, capsys.readouterr().err
    assert [c[:2] for c in calls if c[0] == "submit"] == [("submit", "cli")]
    assert any(c[0] == "result" for c in calls)
