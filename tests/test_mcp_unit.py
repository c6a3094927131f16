"""The MCP adapter in-process: tool surface, errors, confinement, call logging, no leaks.

Runs the real SessionManager (recorder, shadow store, events) with a fake scorer, through the
SDK's in-process Client in both protocol eras (2026-07-28 direct and the legacy handshake).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import Implementation
from pydantic import BaseModel

from bridge.scoring.types import ScoreRequest
from bridge.sessions.manager import SessionManager
from bridge.sessions.rules import INSTRUCTIONS
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server
from mcp_server.workspace import find_root, resolve_workspace

CANARY = "CANARY-7f3e9b1c-golden-do-not-leak"
SOLUTION_CANARY = "CANARY-5d21aa04-solution-do-not-leak"
TOOLS = {
    "list_tasks",
    "get_task",
    "start_task",
    "task_status",
    "pause_task",
    "resume_task",
    "add_note",
    "submit_task",
    "get_result",
    "quit_task",
}
READ_ONLY = {"list_tasks", "get_task", "task_status", "get_result"}
MODES = ["auto", "legacy"]


class FakeResult(BaseModel):
    profiles: dict[str, Any]
    tests: list[dict[str, Any]]


def fake_scorer(task, repo_dir: Path, request: ScoreRequest, progress) -> FakeResult:
    """Stands in for Docker: 'scores' a repo by whether start.sh exists; its full result embeds
    golden-test source (as a real failure trace could) so the test can prove none reaches the agent."""
    progress("building (fake)")
    time.sleep(0.3)
    ok = (repo_dir / "start.sh").is_file()
    golden = "".join(p.read_text() for p in sorted(task.tests_dir.glob("test_*.py")))
    profiles = {
        name: {
            "outcome": "scored" if ok else "deploy_failed",
            "dsr": {"success": ok},
            "pass_at_1": {"passed": 2 if ok else 0, "total": 2, "score": 1.0 if ok else 0.0},
            "api_coverage": {"score": 1.0 if ok else 0.0},
        }
        for name in (["strict", "compat"] if request.profile == "both" else [request.profile])
    }
    result = FakeResult(profiles=profiles, tests=[{"id": "test_canary", "source": golden}])
    (request.output_dir / "result.json").write_text(json.dumps(result.model_dump()), encoding="utf-8")
    return result


@pytest.fixture(scope="module")
def canary_tasks(tmp_path_factory: pytest.TempPathFactory, tasks_dir: Path) -> Path:
    """A copy of kv-ledger with a canary planted in its golden tests and its solution."""
    root = tmp_path_factory.mktemp("tasks")
    task = root / "kv-ledger"
    shutil.copytree(tasks_dir / "kv-ledger", task)
    (task / "tests" / "test_canary.py").write_text(f'MARK = "{CANARY}"\n\ndef test_canary():\n    assert MARK\n')
    with (task / "solution" / "app.py").open("a") as handle:
        handle.write(f"\n# {SOLUTION_CANARY}\n")
    return root


@pytest.fixture
def env(tmp_path: Path, canary_tasks: Path):
    recordings = tmp_path / "rec"
    root = tmp_path / "ws"
    manager = SessionManager(
        Catalog.from_options(canary_tasks, None),
        recordings_dir=recordings,
        scorer=fake_scorer,
        settings=SessionSettings(seal_quiet_seconds=0.2, recorder=RecorderSettings(settle_seconds=0.05)),
    )
    server = build_server(manager, default_workspace=root, environ={})
    yield manager, server, root, recordings
    manager.wait_jobs(timeout=10)
    manager.close()


def run(coro_fn, *args):
    return anyio.run(coro_fn, *args)


def client(server, mode: str) -> Client:
    return Client(server, mode=mode, client_info=Implementation(name="unit-ide", version="3.1"))


def mcp_calls(recording: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in (recording / "events.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in events if e["type"] == "mcp_call"]


def error_text(result) -> str:
    assert result.is_error, result
    return result.content[0].text


# --------------------------------------------------------------------------- surface
@pytest.mark.parametrize("mode", MODES)
def test_tool_surface(env, mode: str) -> None:
    _, server, _, _ = env

    async def go():
        async with client(server, mode) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == TOOLS
            for name, tool in tools.items():
                assert tool.output_schema, f"{name} has no output schema"
                assert "ctx" not in tool.input_schema.get("properties", {})
                assert tool.description
                ro = bool(tool.annotations and tool.annotations.read_only_hint)
                assert ro == (name in READ_ONLY), name
            submit = tools["submit_task"].annotations
            assert submit.read_only_hint is False and submit.idempotent_hint is False
            start = tools["start_task"].input_schema
            assert start["required"] == ["task_id"] and "workspace" in start["properties"]
            assert set(tools["get_result"].input_schema["properties"]) == {"session_id", "wait_seconds"}
            templates = (await c.list_resource_templates()).resource_templates
            assert [(t.uri_template, t.mime_type) for t in templates] == [("task://{task_id}/readme", "text/markdown")]
            prompts = (await c.list_prompts()).prompts
            assert [p.name for p in prompts] == ["solve_task"]
            assert [a.name for a in prompts[0].arguments] == ["task_id"]
            assert c.instructions == INSTRUCTIONS and "get_result" in c.instructions

    run(go)


# --------------------------------------------------------------------------- full flow
@pytest.mark.parametrize("mode", MODES)
def test_flow_logs_every_call_and_records_client(env, mode: str, canary_tasks: Path) -> None:
    manager, server, root, recordings = env
    outputs: list[str] = []
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def go() -> str:
        async with client(server, mode) as c:

            def keep(result) -> Any:
                outputs.append(
                    json.dumps(result.structured_content) + "".join(getattr(x, "text", "") for x in result.content)
                )
                return result

            keep(await c.call_tool("list_tasks", {}))
            spec = keep(await c.call_tool("get_task", {"task_id": "kv-ledger"})).structured_content
            assert spec["port"] == 8090 and "0.0.0.0" in spec["rules"] and spec["readme"].startswith("#")
            started = keep(await c.call_tool("start_task", {"task_id": "kv-ledger"})).structured_content
            assert started["workspace"] == str(root.resolve()) and started["workspace_source"] == "--workspace"
            assert (root / "README.md").is_file() and not (root / "tests").exists()
            sid = started["session_id"]
            (root / "start.sh").write_text("#!/bin/sh\nexec python3 app.py\n")
            (root / "requirements.txt").write_text("")
            keep(await c.call_tool("add_note", {"text": "first note"}))
            assert keep(await c.call_tool("pause_task", {})).structured_content["clock_running"] is False
            assert keep(await c.call_tool("resume_task", {})).structured_content["clock_running"] is True
            status = keep(await c.call_tool("task_status", {"session_id": sid})).structured_content
            assert status["state"] == "active" and status["scoring"] == "not_submitted"
            early = keep(await c.call_tool("get_result", {})).structured_content
            assert early["state"] == "not_submitted" and "submit_task" in early["next_step"]
            receipt = keep(await c.call_tool("submit_task", {})).structured_content
            assert receipt["job_id"] and "get_result" in receipt["next_step"]
            twice = keep(await c.call_tool("submit_task", {}))
            assert "already submitted" in error_text(twice) and receipt["job_id"] in error_text(twice)
            result = keep(await c.call_tool("get_result", {"wait_seconds": 20}, progress_callback=on_progress))
            final = result.structured_content
            assert final["state"] == "done", final
            assert final["summary"]["strict"]["pass_at_1"] == 1.0 and final["summary"]["compat"]["dsr"] is True
            assert "result" not in final  # full results (logs, test detail) stay in the recording
            keep(await c.call_tool("task_status", {"session_id": 12}))  # schema error: still logged
            for uri in ("task://kv-ledger/readme",):
                contents = (await c.read_resource(uri)).contents
                outputs.append(contents[0].text)
            prompt = await c.get_prompt("solve_task", {"task_id": "kv-ledger"})
            text = prompt.messages[0].content.text
            assert all(
                word in text for word in ("submit_task", "get_result", "0.0.0.0", "start.sh", "requirements.txt")
            )
            outputs.append(text)
            return sid

    sid = run(go)
    recording = recordings / sid
    calls = mcp_calls(recording)
    names = [c["tool"] for c in calls]
    assert names == [
        "start_task",
        "add_note",
        "pause_task",
        "resume_task",
        "task_status",
        "get_result",
        "submit_task",
        "submit_task",
        "get_result",
        "task_status",
    ]
    assert [c["ok"] for c in calls] == [True] * 7 + [False, True, False]
    assert "already submitted" in calls[7]["error"]
    record = json.loads((recording / "session.json").read_text())
    assert {k: record["client"][k] for k in ("name", "version")} == {"name": "unit-ide", "version": "3.1"}
    assert record["client"]["protocol"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    server_log = (recordings / "server-calls.jsonl").read_text()
    assert "list_tasks" in server_log and "get_task" in server_log  # before any session: server log
    # The canary planted in the golden tests (and carried by the full result) never leaks.
    blob = "\n".join(outputs)
    assert CANARY not in blob and SOLUTION_CANARY not in blob
    assert CANARY in (recording / "results").rglob("result.json").__next__().read_text()  # it was there to leak


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("mode", MODES)
def test_errors_are_tool_errors(env, mode: str, tmp_path: Path) -> None:
    manager, server, root, recordings = env
    outside = tmp_path / "outside"
    outside.mkdir()
    root.mkdir(parents=True, exist_ok=True)
    (root / "escape").symlink_to(outside, target_is_directory=True)

    async def go():
        async with client(server, mode) as c:
            assert "no active session" in error_text(await c.call_tool("submit_task", {}))
            assert "no active session" in error_text(await c.call_tool("get_result", {}))
            assert "unknown task 'nope'" in error_text(await c.call_tool("start_task", {"task_id": "nope"}))
            for bad in ("../outside", "sub/../../outside", str(outside), "escape", "escape/deeper"):
                text = error_text(await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": bad}))
                assert "outside" in text, (bad, text)
                assert "Traceback" not in text
            text = error_text(
                await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "${workspaceFolder}"})
            )
            assert "unexpanded" in text
            assert "unknown session" in error_text(await c.call_tool("task_status", {"session_id": "zzz"}))
            ok = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "sub/ws"})
            assert not ok.is_error and ok.structured_content["workspace"] == str((root / "sub" / "ws").resolve())
            again = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "sub/ws"})
            assert "already has an open session" in error_text(again)
            quit_ = await c.call_tool("quit_task", {"reason": "testing"})
            assert quit_.structured_content["state"] == "quit"
            assert "cannot submit" in error_text(await c.call_tool("submit_task", {}))
            assert "a note needs some text" in error_text(await c.call_tool("add_note", {"text": "  "}))
            with pytest.raises(MCPError):
                await c.read_resource("task://nope/readme")
            with pytest.raises(MCPError):
                await c.get_prompt("solve_task", {"task_id": "nope"})

    run(go)
    assert not list(outside.iterdir()), "nothing may be written outside the workspace root"
    server_calls = [json.loads(x) for x in (recordings / "server-calls.jsonl").read_text().splitlines()]
    failed = [c for c in server_calls if c["type"] == "mcp_call" and not c["ok"]]
    assert len(failed) >= 9  # every refused call before the session was logged
    (sid,) = [s.session_id for s in manager.active()]
    calls = mcp_calls(recordings / sid)
    # The refused second start created no session: it is in the server log, not this recording.
    assert [c["tool"] for c in calls] == ["start_task", "quit_task", "submit_task", "add_note"]
    assert [c["ok"] for c in calls] == [True, True, False, False]
    assert any(c["tool"] == "start_task" and "already has an open session" in (c["error"] or "") for c in failed)


def test_unexpected_exception_is_short_tool_error(env, caplog: pytest.LogCaptureFixture) -> None:
    manager, server, _, _ = env

    def boom() -> list:
        raise RuntimeError("secret internal detail")

    manager.list_tasks = boom  # type: ignore[method-assign]

    async def go():
        async with client(server, "legacy") as c:
            return error_text(await c.call_tool("list_tasks", {}))

    text = run(go)
    assert "internal error in list_tasks (RuntimeError)" in text and "secret internal detail" not in text
    assert "Traceback" not in text


def test_sessions_outside_root_are_not_reachable(env, tmp_path: Path, canary_tasks: Path) -> None:
    """A session reattached from a shared recordings dir but working elsewhere is not this server's."""
    manager, server, root, _ = env
    elsewhere = tmp_path / "elsewhere"
    other = manager.start("kv-ledger", elsewhere)

    async def go():
        async with client(server, "legacy") as c:
            assert "no active session" in error_text(await c.call_tool("task_status", {}))
            text = error_text(await c.call_tool("task_status", {"session_id": other.session_id}))
            assert "outside this server's workspace" in text

    run(go)


# --------------------------------------------------------------------------- workspace resolution
def test_workspace_root_order(tmp_path: Path) -> None:
    explicit = tmp_path / "a"
    assert find_root(explicit, {"CLAUDE_PROJECT_DIR": str(tmp_path / "c")}).source == "--workspace"
    assert (
        find_root(None, {"RGBRIDGE_WORKSPACE": str(tmp_path / "b"), "CLAUDE_PROJECT_DIR": "x"}).source
        == "RGBRIDGE_WORKSPACE"
    )
    assert find_root(None, {"CLAUDE_PROJECT_DIR": str(tmp_path / "c")}).path == tmp_path / "c"
    # An unexpanded IDE variable is ignored, not used as a folder named "${workspaceFolder}".
    fallback = find_root("${workspaceFolder}", {"CLAUDE_PROJECT_DIR": str(tmp_path / "c")})
    assert fallback.source == "CLAUDE_PROJECT_DIR"
    assert find_root("${workspaceFolder}", {}) is None


def test_workspace_without_root_needs_absolute_path(tmp_path: Path) -> None:
    from bridge.errors import PathError

    with pytest.raises(PathError, match="no workspace configured"):
        resolve_workspace(None, None)
    with pytest.raises(PathError, match="absolute"):
        resolve_workspace(None, "relative/dir")
    with pytest.raises(PathError, match=r"\.\."):
        resolve_workspace(None, str(tmp_path / "a" / ".." / "b"))
    assert resolve_workspace(None, str(tmp_path / "w")).source == "tool argument"


def test_claude_project_dir_is_a_root(tmp_path: Path, canary_tasks: Path) -> None:
    project = tmp_path / "project"
    manager = SessionManager(
        Catalog.from_options(canary_tasks, None),
        recordings_dir=tmp_path / "rec",
        scorer=fake_scorer,
        settings=SessionSettings(seal_quiet_seconds=0.2, recorder=RecorderSettings(settle_seconds=0.05)),
    )
    server = build_server(manager, default_workspace=None, environ={"CLAUDE_PROJECT_DIR": str(project)})

    async def go():
        async with client(server, "auto") as c:
            escaped = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": str(tmp_path)})
            assert "outside" in error_text(escaped)
            ok = await c.call_tool("start_task", {"task_id": "kv-ledger"})
            assert ok.structured_content["workspace_source"] == "CLAUDE_PROJECT_DIR"
            assert ok.structured_content["workspace"] == str(project.resolve())

    try:
        run(go)
    finally:
        manager.close()


def test_no_stdout_from_building_the_server(
    env, capfd: pytest.CaptureFixture[str], canary_tasks: Path, tmp_path: Path
) -> None:
    manager = SessionManager(
        Catalog.from_options(canary_tasks, None), recordings_dir=tmp_path / "rec2", scorer=fake_scorer
    )
    try:
        capfd.readouterr()
        build_server(manager, default_workspace=tmp_path / "w")
        out, _ = capfd.readouterr()
        assert out == ""
    finally:
        manager.close()


def test_logged_tool_arguments_are_capped_keys_included(tmp_path: Path, canary_tasks: Path) -> None:
    """Issue 8: a 3 MB argument key went into the call log uncapped."""
    recordings = tmp_path / "rec"
    manager = SessionManager(Catalog.from_options(canary_tasks, None), recordings_dir=recordings, scorer=fake_scorer)
    try:
        huge = "k" * 3_000_000
        args = {huge: "v" * 3_000_000, **{f"a{i}": i for i in range(500)}}
        manager.log_call(None, "get_task", args, ok=False, error="e" * 3_000_000)
    finally:
        manager.close()
    log_file = recordings / "server-calls.jsonl"
    assert log_file.stat().st_size < 64_000
    event = json.loads(log_file.read_text().splitlines()[-1])
    assert len(event["arguments"]) <= 51 and all(len(k) <= 201 for k in event["arguments"])
