"""Issue 20, item 3: every tool's schemas keep to the subset every model family accepts
(bridge/sessions/schemas.py states the rules), its annotations say what it does, and argument
validation stays as strict as the old schemas made it, checked through real MCP client sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import Tool

from bridge.sessions.manager import SessionManager
from bridge.sessions.schemas import input_schema, output_schema, violations
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.sessions.verbs import mcp_verbs
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server

MODES = ["auto", "legacy"]


@pytest.fixture
def server(tmp_path: Path):
    manager = SessionManager(
        Catalog.from_options(None, None),
        recordings_dir=tmp_path / "rec",
        scorer=lambda *a, **k: None,
        settings=SessionSettings(practice=True, recorder=RecorderSettings(settle_seconds=0.05)),
    )
    yield build_server(manager, default_workspace=tmp_path / "ws", environ={})
    manager.close()


def listed(server, mode: str) -> dict[str, Tool]:
    async def go() -> dict[str, Tool]:
        async with Client(server, mode=mode) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    return anyio.run(go)


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_schema_keeps_to_the_portable_subset(server, mode: str) -> None:
    tools = listed(server, mode)
    assert len(tools) == 11  # the ten tools and practice mode's check_deployment
    for name, tool in tools.items():
        wire = json.loads(json.dumps(tool.model_dump(mode="json", by_alias=True)))
        assert violations(wire["inputSchema"], output=False) == [], name
        assert violations(wire["outputSchema"], output=True) == [], name
        text = json.dumps(wire)
        for banned in ("$ref", "$defs", "$schema", "additionalProperties"):  # titles: `violations` walks keys
            assert banned not in json.dumps([wire["inputSchema"], wire["outputSchema"]]), (name, banned)
        assert '{"type": "null"}' not in json.dumps(wire["inputSchema"]), name
        assert "ctx" not in text


def test_optional_means_not_required() -> None:
    by_tool = {v.tool: v for v in mcp_verbs(practice=True)}
    start = input_schema(by_tool["start_task"])
    assert start["required"] == ["task_id"]
    assert start["properties"]["workspace"] == {
        "type": "string",
        "description": start["properties"]["workspace"]["description"],
    }
    assert start["properties"]["mode"]["enum"] == ["agent", "human"]
    assert "default 'agent'" in start["properties"]["mode"]["description"]
    status = input_schema(by_tool["task_status"])
    assert status == {"type": "object", "properties": {"session_id": status["properties"]["session_id"]}}
    assert "Optional" in status["properties"]["session_id"]["description"]
    assert input_schema(by_tool["list_tasks"]) == {"type": "object", "properties": {}}  # properties kept (copilot-cli)
    wait = input_schema(by_tool["get_result"])["properties"]["wait_seconds"]
    assert wait["type"] == "number" and "50" in wait["description"]


def test_the_rules_reject_what_the_old_schemas_published() -> None:
    """The shapes the SDK generated before (pydantic's own schemas) break the rules."""
    old_input = {
        "type": "object",
        "title": "task_statusArguments",
        "properties": {
            "session_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Session Id"}
        },
    }
    problems = violations(old_input, output=False)
    assert any("'title'" in p for p in problems) and any("union" in p for p in problems)
    assert any("'default'" in p for p in problems) and any("description" in p for p in problems)
    assert violations({"type": "object", "properties": {}, "additionalProperties": False}, output=False)
    assert violations(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}}, output=False
    )
    assert violations({"type": "object"}, output=False)  # an object without properties
    assert violations(
        {"type": "object", "properties": {"x": {"type": ["string", "null"], "description": "x"}}}, output=False
    )
    old_output = {
        "$defs": {"S": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "type": "object",
        "properties": {"s": {"$ref": "#/$defs/S"}},
    }
    assert any("'$defs'" in p for p in violations(old_output, output=True))
    inlined = output_schema(old_output)
    assert inlined == {
        "type": "object",
        "properties": {"s": {"type": "object", "properties": {"a": {"type": "string"}}}},
    }
    assert violations(inlined, output=True) == []
    # the one union an output may hold is a nullable value; an input none at all
    nullable = {"type": "object", "properties": {"j": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
    assert violations(nullable, output=True) == [] and violations(nullable, output=False)
    either = {"type": "object", "properties": {"j": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}
    assert violations(either, output=True)


@pytest.mark.parametrize("mode", MODES)
def test_annotations_say_what_each_tool_does(server, mode: str) -> None:
    tools = listed(server, mode)
    for name, tool in tools.items():
        a = tool.annotations
        assert a is not None, name
        hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        assert None not in hints, name  # Codex treats a missing hint as unsafe
        assert a.open_world_hint is False, name
        if a.read_only_hint:
            assert a.idempotent_hint and not a.destructive_hint, name
    assert {n for n, t in tools.items() if t.annotations.read_only_hint} == {
        "list_tasks",
        "get_task",
        "task_status",
        "get_result",
    }
    assert {n for n, t in tools.items() if t.annotations.destructive_hint} == {"quit_task"}
    assert {n for n, t in tools.items() if t.annotations.idempotent_hint} == {
        "list_tasks",
        "get_task",
        "task_status",
        "get_result",
        "pause_task",
        "resume_task",
    }


def error_of(result: Any) -> str:
    assert result.is_error, result
    return result.content[0].text


@pytest.mark.parametrize("mode", MODES)
def test_arguments_are_validated_as_strictly_as_before(server, mode: str) -> None:
    """Without `additionalProperties: false` in the schema, unknown arguments are still refused,
    and mistyped, missing and out-of-enum ones as before; an explicit null session_id still means
    "none given"."""

    async def go() -> None:
        async with Client(server, mode=mode) as c:
            unknown = error_of(await c.call_tool("get_task", {"task_id": "kv-ledger", "bogus": 1}))
            assert "bogus" in unknown and "Extra inputs are not permitted" in unknown
            assert "bogus" in error_of(await c.call_tool("list_tasks", {"bogus": True}))
            assert "session" in error_of(await c.call_tool("task_status", {"sessionId": "x"}))
            assert "task_id" in error_of(await c.call_tool("get_task", {"task_id": 5}))
            assert "task_id" in error_of(await c.call_tool("get_task", {}))
            assert "mode" in error_of(await c.call_tool("start_task", {"task_id": "kv-ledger", "mode": "robot"}))
            assert "wait_seconds" in error_of(await c.call_tool("get_result", {"wait_seconds": "soon"}))
            assert "no active session" in error_of(await c.call_tool("task_status", {"session_id": None}))
            ok = await c.call_tool("get_task", {"task_id": "kv-ledger"})
            assert not ok.is_error and ok.structured_content["id"] == "kv-ledger"

    anyio.run(go)
