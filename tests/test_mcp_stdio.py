"""`rgbridge serve` over stdio, spawned as a subprocess and driven by the SDK's Client (legacy
handshake, as IDEs do): bad inputs, a clean stdout, and the full scored flow (Docker)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, stdio_client

from bridge.recording.store import ShadowStore
from tests.helpers import serve_command, server_env, stdio_params

REPO_ROOT = Path(__file__).resolve().parent.parent


def events_bytes(rec_dir: Path) -> bytes:
    return (rec_dir / "events.jsonl").read_bytes()


def mcp_calls(rec_dir: Path) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, events_bytes(rec_dir).decode().splitlines()) if e["type"] == "mcp_call"]


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def tree_files(root: Path, skip: tuple[str, ...] = (".rgbridge",)) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part in skip for part in p.relative_to(root).parts)
    }


def submitted_tree(rec_dir: Path, out: Path) -> dict[str, bytes]:
    record = json.loads((rec_dir / "session.json").read_text())
    store = ShadowStore(rec_dir / "store", Path(record["workspace"]))
    store.checkout_to(record["submission"]["commit"], out)
    return tree_files(out, skip=())


def test_stdout_carries_only_protocol(tmp_path: Path) -> None:
    """Raw JSON lines as an IDE on 2025-06-18 writes them; every stdout line must be JSON-RPC."""
    cmd = serve_command() + ["--workspace", str(tmp_path / "ws"), "--recordings", str(tmp_path / "rec")]
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-ide", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "start_task", "arguments": {"task_id": "nope"}},
        },
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(),
        cwd=REPO_ROOT,
    )
    killer = threading.Timer(60, proc.kill)  # a hung server fails the test instead of hanging it
    killer.start()
    parsed: list[dict[str, Any]] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        # Keep stdin open until the last answer arrived (EOF would close the connection first).
        while not any(m.get("id") == 3 for m in parsed):
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip():
                parsed.append(json.loads(line))  # raises on any stray banner or print
        proc.stdin.close()
        proc.wait(timeout=30)
        rest = proc.stdout.read()
        parsed += [json.loads(line) for line in rest.splitlines() if line.strip()]
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
    by_id = {m.get("id"): m for m in parsed}
    assert by_id[1]["result"]["serverInfo"]["name"] == "rgbridge"
    assert len(by_id[2]["result"]["tools"]) == 10
    assert by_id[3]["result"]["isError"] is True and "unknown task" in by_id[3]["result"]["content"][0]["text"]
    assert "Traceback" not in stderr


def test_bad_inputs_over_stdio(tmp_path: Path) -> None:
    ws, rec, outside = tmp_path / "ws", tmp_path / "rec", tmp_path / "outside"
    outside.mkdir()
    ws.mkdir()
    (ws / "link").symlink_to(outside, target_is_directory=True)

    async def go() -> str:
        with (tmp_path / "server.stderr").open("w") as errlog:
            async with Client(stdio_client(stdio_params(ws, rec), errlog=errlog), mode="legacy") as c:
                assert "no active session" in error_text(await c.call_tool("submit_task", {}))
                assert "unknown task" in error_text(await c.call_tool("start_task", {"task_id": "no-such-task"}))
                for bad in ("../outside", "link", "link/x", str(outside)):
                    assert "outside" in error_text(
                        await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": bad})
                    )
                started = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "inner"})
                sid = started.structured_content["session_id"]
                rec_dir = Path(started.structured_content["recording"])
                before = events_bytes(rec_dir)
                assert "outside" in error_text(
                    await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "../x"})
                )
                assert "unknown session" in error_text(await c.call_tool("get_result", {"session_id": "bogus"}))
                assert (await c.call_tool("quit_task", {"reason": "bad-input test"})).structured_content[
                    "state"
                ] == "quit"
                assert "already quit" in error_text(await c.call_tool("submit_task", {}))
                after = events_bytes(rec_dir)
                assert after.startswith(before) and len(after) > len(before)  # append-only, nothing lost
                return sid

    sid = anyio.run(go)
    calls = mcp_calls(rec / sid)
    assert [(c["tool"], c["ok"]) for c in calls] == [("start_task", True), ("quit_task", True), ("submit_task", False)]
    refused = [json.loads(x) for x in (rec / "server-calls.jsonl").read_text().splitlines()]
    assert sum(1 for e in refused if e["type"] == "mcp_call" and not e["ok"]) >= 8
    assert not list(outside.iterdir())
    record = json.loads((rec / sid / "session.json").read_text())
    assert record["client"]["name"] == "mcp"  # the SDK client's default client_info


@pytest.mark.docker
def test_full_flow_over_stdio(docker_client, tmp_path: Path, tasks_dir: Path) -> None:
    ws, rec = tmp_path / "ws", tmp_path / "rec"
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def go() -> dict[str, Any]:
        with (tmp_path / "server.stderr").open("w") as errlog:
            async with Client(stdio_client(stdio_params(ws, rec), errlog=errlog), mode="legacy") as c:
                ids = [t["id"] for t in (await c.call_tool("list_tasks", {})).structured_content["tasks"]]
                assert "kv-ledger" in ids
                started = (await c.call_tool("start_task", {"task_id": "kv-ledger"})).structured_content
                workspace = Path(started["workspace"])
                for path in (tasks_dir / "kv-ledger" / "solution").iterdir():
                    if path.is_file():
                        shutil.copy2(path, workspace / path.name)
                # A unique file makes a fresh snapshot, so this run really scores (no cache hit).
                (workspace / "NOTES.md").write_text(f"run {uuid.uuid4()}\n")
                expected = tree_files(workspace)
                receipt = await c.call_tool("submit_task", {})
                assert not receipt.is_error, receipt.content
                rec_dir = Path(started["recording"])
                status: dict[str, Any] = {}
                for _ in range(40):
                    status = (
                        await c.call_tool("get_result", {"wait_seconds": 50}, progress_callback=on_progress)
                    ).structured_content
                    if status["state"] in ("done", "failed"):
                        break
                before = events_bytes(rec_dir)
                again = await c.call_tool("submit_task", {})
                assert "already" in error_text(again)
                assert events_bytes(rec_dir).startswith(before)
                return {"status": status, "expected": expected, "rec_dir": rec_dir}

    out = anyio.run(go)
    status = out["status"]
    assert status["state"] == "done", status
    for profile in ("strict", "compat"):
        row = status["summary"][profile]
        assert row["pass_at_1"] == 1.0 and row["dsr"] is True and row["passed"] == row["total"] > 0, row
    assert progress, "get_result sent no progress while scoring"
    assert submitted_tree(out["rec_dir"], tmp_path / "replayed") == out["expected"]
