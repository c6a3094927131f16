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
