"""Issue 20, item 6: a long poll honours `notifications/cancelled` (it stops waiting at once, the
call is recorded as cancelled, and no answer is ever sent for it: Claude Code drops the
connection when one arrives) and stays under the common 60-second tool-call timeout."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from bridge.scoring.types import ScoreRequest
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.sessions.verbs import BY_TOOL, MAX_WAIT_SECONDS
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server
from mcp_server.tools import CANCELLED

REPO_ROOT = Path(__file__).resolve().parent.parent


class GatedScorer:
    """Scoring that lasts until the test opens the gate (then fails: the result does not matter)."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def __call__(self, task, repo_dir: Path, request: ScoreRequest, progress):
        progress("scoring (fake, waiting for the test)")
        self.gate.wait(60)
        raise RuntimeError("fake scorer released")


def recorded_calls(recording: Path, tool: str) -> list[dict[str, Any]]:
    path = recording / "events.jsonl"
    events = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return [e for e in events if e["type"] == "mcp_call" and e["tool"] == tool]


def test_the_wait_stays_under_the_common_tool_timeout() -> None:
    assert MAX_WAIT_SECONDS <= 50
    assert f"{MAX_WAIT_SECONDS:g} seconds" in BY_TOOL["get_result"].doc and "60" in BY_TOOL["get_result"].doc


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_cancelled_long_poll_stops_at_once_and_is_recorded(tmp_path: Path, mode: str) -> None:
    scorer = GatedScorer()
    manager = SessionManager(
        Catalog.from_options(None, None),
        recordings_dir=tmp_path / "rec",
        scorer=scorer,
        settings=SessionSettings(seal_quiet_seconds=0.2, recorder=RecorderSettings(settle_seconds=0.05)),
    )
    server = build_server(manager, default_workspace=tmp_path / "ws", environ={})

    async def go() -> None:
        async with Client(server, mode=mode) as c:
            started = (await c.call_tool("start_task", {"task_id": "kv-ledger"})).structured_content
            (Path(started["workspace"]) / "start.sh").write_text("python3 app.py\n")
            assert not (await c.call_tool("submit_task", {})).is_error
            recording = Path(started["recording"])
            t0 = time.monotonic()
            with pytest.raises(MCPError) as timed_out:  # the client gives up and sends notifications/cancelled
                await c.call_tool("get_result", {"wait_seconds": 50}, read_timeout_seconds=1.0)
            assert "timed out" in str(timed_out.value).lower()
            while not recorded_calls(recording, "get_result") and time.monotonic() - t0 < 10:
                await anyio.sleep(0.05)
            stopped = time.monotonic() - t0
            (call,) = recorded_calls(recording, "get_result")
            assert call["ok"] is False and call["error"] == CANCELLED
            assert stopped < 3.0, f"the cancelled wait went on for {stopped:.1f} s"
            # the connection is fine and the job untouched
            status = (await c.call_tool("task_status", {})).structured_content
            assert status["scoring"] in ("queued", "running")
            scorer.gate.set()
            result = (await c.call_tool("get_result", {"wait_seconds": 20})).structured_content
            assert result["state"] == "failed"

    try:
        anyio.run(go)
    finally:
        scorer.gate.set()
        manager.wait_jobs(timeout=10)
        manager.close()


SERVER = """
import sys, time
from pathlib import Path
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server
from mcp_server.transport import configure_logging, run_stdio

configure_logging("WARNING")
gate = Path(sys.argv[3])

def scorer(task, repo_dir, request, progress):
    progress("scoring (fake, waiting for the test)")
    while not gate.exists():
        time.sleep(0.05)
    raise RuntimeError("fake scorer released")

settings = SessionSettings(seal_quiet_seconds=0.2, recorder=RecorderSettings(settle_seconds=0.05))
manager = SessionManager(Catalog.from_options(None, None), recordings_dir=Path(sys.argv[2]), scorer=scorer,
                         settings=settings)
run_stdio(build_server(manager, default_workspace=Path(sys.argv[1]), environ={}, owns_manager=True))
"""


class RawStdio:
    """A stdio MCP client at the JSON-RPC level: every line the server writes is kept."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.lines.put(json.loads(line))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        self.proc.stdin.flush()

    def until(self, rid: int, seen: list[dict[str, Any]], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            message = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            seen.append(message)
            if message.get("id") == rid and "method" not in message:
                return message

    def call(self, rid: int, tool: str, arguments: dict[str, Any], seen: list[dict[str, Any]]) -> dict[str, Any]:
        self.send({"id": rid, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        return self.until(rid, seen)["result"]


def test_no_answer_ever_follows_a_cancelled_long_poll_over_stdio(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    client = RawStdio([sys.executable, "-c", SERVER, str(tmp_path / "ws"), str(tmp_path / "rec"), str(gate)])
    seen: list[dict[str, Any]] = []
    try:
        client.send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-cancel", "version": "1"},
                },
            }
        )
        client.until(1, seen)
        client.send({"method": "notifications/initialized"})
        started = client.call(2, "start_task", {"task_id": "kv-ledger"}, seen)["structuredContent"]
        (Path(started["workspace"]) / "start.sh").write_text("python3 app.py\n")
        assert not client.call(3, "submit_task", {}, seen).get("isError")
        client.send(
            {
                "id": 4,
                "method": "tools/call",
                "params": {"name": "get_result", "arguments": {"wait_seconds": 50}, "_meta": {"progressToken": "poll"}},
            }
        )
        time.sleep(1.0)
        client.send({"method": "notifications/cancelled", "params": {"requestId": 4, "reason": "timed out"}})
        cancelled_at = time.monotonic()
        client.send({"id": 5, "method": "ping"})
        client.until(5, seen)
        after_ping = len(seen)
        # the old code never recorded the cancelled call; a late answer to id 4 is what makes
        # Claude Code drop the connection
        recording = Path(started["recording"])
        while not recorded_calls(recording, "get_result") and time.monotonic() - cancelled_at < 10:
            time.sleep(0.05)
        assert time.monotonic() - cancelled_at < 1.9  # the old wait ran on in 2-second slices
        (call,) = recorded_calls(recording, "get_result")
        assert call["error"] == CANCELLED
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                seen.append(client.lines.get(timeout=0.2))
            except queue.Empty:
                pass
        assert [m for m in seen if m.get("id") == 4 and "method" not in m] == []
        late_progress = [m for m in seen[after_ping:] if m.get("params", {}).get("progressToken") == "poll"]
        assert late_progress == []
        # still a working connection: the job carries on and can be polled again
        assert client.call(6, "task_status", {}, seen)["structuredContent"]["scoring"] in ("queued", "running")
    finally:
        gate.touch()
        if client.proc.stdin is not None:
            client.proc.stdin.close()
        try:
            client.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            client.proc.kill()
            client.proc.wait()
