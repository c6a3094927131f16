"""`rgbridge serve --transport http`: bearer token, DNS-rebinding protection, bind rules, and
the full scored flow over streamable HTTP (Docker). Traffic stays on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bridge.cli import main as rgbridge
from bridge.recording.store import ShadowStore

REPO_ROOT = Path(__file__).resolve().parent.parent
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command() -> list[str]:
    script = Path(sys.executable).with_name("rgbridge")
    return [str(script), "serve"] if script.exists() else [sys.executable, "-m", "bridge.cli", "serve"]


class HttpServer:
    def __init__(self, root: Path, token: str | None = None) -> None:
        self.ws, self.rec = root / "ws", root / "rec"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RGBRIDGE_TOKEN", "RGBRIDGE_WORKSPACE", "CLAUDE_PROJECT_DIR")
        }
        if token:
            env["RGBRIDGE_TOKEN"] = token
        self.stderr_path = root / "server.stderr"
        self._stderr = self.stderr_path.open("a")
        self.proc = subprocess.Popen(
            [
                *serve_command(),
                "--transport",
                "http",
                "--port",
                str(self.port),
                "--workspace",
                str(self.ws),
                "--recordings",
                str(self.rec),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
            cwd=REPO_ROOT,
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.stderr_path.read_text()}")
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        break
                except OSError:
                    time.sleep(0.2)
            else:
                raise RuntimeError("server did not start listening")
            self.token = (self.rec / "http-token").read_text().strip()
        except BaseException:
            self.stop()  # a server that failed its start is not left running
            raise

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._stderr.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    srv = HttpServer(tmp_path_factory.mktemp("http"))
    yield srv
    srv.stop()


def post(server: HttpServer, headers: dict[str, str]) -> requests.Response:
    return requests.post(server.url, data=json.dumps(INIT), headers={**MCP_HEADERS, **headers}, timeout=10)


def test_token_file_is_private_and_printed(server: HttpServer) -> None:
    path = server.rec / "http-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(server.token) >= 40
    assert server.token in server.stderr_path.read_text()  # told to the user on stderr


def test_requests_without_the_token_are_rejected(server: HttpServer) -> None:
    assert post(server, {}).status_code == 401
    assert post(server, {"Authorization": "Bearer wrong-token"}).status_code == 401
    assert post(server, {"Authorization": server.token}).status_code == 401  # no "Bearer " scheme
    assert requests.get(server.url, timeout=10).status_code == 401
    ok = post(server, server.auth())
    assert ok.status_code == 200 and "rgbridge" in ok.text


def test_dns_rebinding_is_rejected(server: HttpServer) -> None:
    spoofed = post(server, {**server.auth(), "Host": f"evil.example:{server.port}"})
    assert spoofed.status_code == 421
    origin = post(server, {**server.auth(), "Origin": "http://evil.example"})
    assert origin.status_code == 403
    assert post(server, {**server.auth(), "Origin": f"http://localhost:{server.port}"}).status_code == 200


def test_non_loopback_bind_needs_allow_remote_and_token(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    base = ["serve", "--transport", "http", "--recordings", str(tmp_path), "--host", "0.0.0.0"]
    assert rgbridge(base) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert rgbridge([*base, "--allow-remote"]) == 2
    assert "--token" in capsys.readouterr().err


def http_client(server: HttpServer, mode: str = "legacy") -> Client:
    http = httpx2.AsyncClient(headers=server.auth(), timeout=httpx2.Timeout(30, read=120))
    return Client(streamable_http_client(server.url, http_client=http), mode=mode)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_session_tools_over_http(server: HttpServer, mode: str) -> None:
    async def go() -> None:
        async with http_client(server, mode) as c:
            assert len((await c.list_tools()).tools) == 10
            assert "unknown task" in (await c.call_tool("start_task", {"task_id": "nope"})).content[0].text
            escaped = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "../elsewhere"})
            assert escaped.is_error and "outside" in escaped.content[0].text
            started = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": f"quit-{mode}"})
            assert not started.is_error, started.content
            sid = started.structured_content["session_id"]
            status = await c.call_tool("task_status", {"session_id": sid})
            assert status.structured_content["state"] == "active"
            assert (await c.call_tool("quit_task", {"session_id": sid})).structured_content["state"] == "quit"
            readme = await c.read_resource("task://kv-ledger/readme")
            assert readme.contents[0].text.startswith("#")

    anyio.run(go)


@pytest.mark.docker
def test_full_flow_over_http(docker_client, server: HttpServer, tasks_dir: Path, tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        async with http_client(server) as c:
            started = (
                await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "flow"})
            ).structured_content
            workspace = Path(started["workspace"])
            for path in (tasks_dir / "kv-ledger" / "solution").iterdir():
                if path.is_file():
                    shutil.copy2(path, workspace / path.name)
            expected = {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()}
            receipt = await c.call_tool("submit_task", {"session_id": started["session_id"]})
            assert not receipt.is_error, receipt.content
            status: dict[str, Any] = {}
            for _ in range(40):
                status = (
                    await c.call_tool("get_result", {"session_id": started["session_id"], "wait_seconds": 50})
                ).structured_content
                if status["state"] in ("done", "failed"):
                    break
            return {"status": status, "expected": expected, "rec_dir": Path(started["recording"])}

    out = anyio.run(go)
    status = out["status"]
    assert status["state"] == "done", status
    for profile in ("strict", "compat"):
        assert status["summary"][profile]["pass_at_1"] == 1.0, status["summary"]
    record = json.loads((out["rec_dir"] / "session.json").read_text())
    assert record["client"]["name"] == "mcp"
    replay = tmp_path / "replayed"
    ShadowStore(out["rec_dir"] / "store", Path(record["workspace"])).checkout_to(record["submission"]["commit"], replay)
    assert {p.name: p.read_bytes() for p in replay.rglob("*") if p.is_file()} == out["expected"]
    calls = [json.loads(x) for x in (out["rec_dir"] / "events.jsonl").read_text().splitlines()]
    assert [c["tool"] for c in calls if c["type"] == "mcp_call"][:2] == ["start_task", "submit_task"]


def test_sessions_belong_to_the_client_that_started_them(server: HttpServer) -> None:
    """Issue 8, opening 6: client B (same token, its own MCP session) can neither reach client A's
    session by passing no session id nor by naming it; A's session is untouched."""

    async def go() -> None:
        async with http_client(server) as a, http_client(server) as b, http_client(server, "auto") as m:
            started = await a.call_tool("start_task", {"task_id": "library-api", "workspace": "owned-a"})
            assert not started.is_error, started.content
            sid = started.structured_content["session_id"]
            # B, no session id: not A's session
            for tool, args in (
                ("task_status", {}),
                ("add_note", {"text": "B was here"}),
                ("pause_task", {}),
                ("quit_task", {}),
                ("get_result", {}),
                ("submit_task", {}),
            ):
                res = await b.call_tool(tool, args)
                assert res.is_error and "no active session" in res.content[0].text, (tool, res.content)
            # B (and a 2026-era client without connection identity), naming A's session
            for other in (b, m):
                for tool, args in (
                    ("task_status", {}),
                    ("add_note", {"text": "B was here"}),
                    ("pause_task", {}),
                    ("quit_task", {}),
                    ("get_result", {}),
                    ("submit_task", {}),
                ):
                    res = await other.call_tool(tool, {**args, "session_id": sid})
                    assert res.is_error and "belongs to another MCP client" in res.content[0].text, (tool, res.content)
            no_id = await m.call_tool("task_status", {})
            assert no_id.is_error and "pass the session_id" in no_id.content[0].text
            # A still sees its own session, unchanged, with no id
            mine = (await a.call_tool("task_status", {})).structured_content
            assert mine["session_id"] == sid and mine["state"] == "active" and mine["clock_running"]
            # B's own session is B's current one; A's calls without id still mean A's
            b_started = (
                await b.call_tool("start_task", {"task_id": "link-shortener", "workspace": "owned-b"})
            ).structured_content
            assert (await b.call_tool("task_status", {})).structured_content["session_id"] == b_started["session_id"]
            assert (await a.call_tool("task_status", {})).structured_content["session_id"] == sid
            assert (await a.call_tool("quit_task", {})).structured_content["session_id"] == sid
            assert (await b.call_tool("quit_task", {})).structured_content["session_id"] == b_started["session_id"]
        record = json.loads((server.rec / sid / "session.json").read_text())
        assert record["notes"] == 0 and record["quit_reason"] is None

    anyio.run(go)


def test_reconnecting_client_adopts_its_released_session(server: HttpServer) -> None:
    """When A's connection closes (IDE restart, expired MCP session), the next client naming A's
    session adopts it; from then on it is that client's, and others are refused again."""

    async def go() -> None:
        async with http_client(server) as a:
            started = await a.call_tool("start_task", {"task_id": "word-duel", "workspace": "adopt-a"})
            assert not started.is_error, started.content
            sid = started.structured_content["session_id"]
        async with http_client(server) as a2, http_client(server) as b:
            for _ in range(40):
                res = await a2.call_tool("task_status", {"session_id": sid})
                if not res.is_error:
                    break
                assert "belongs to another MCP client" in res.content[0].text
                await anyio.sleep(0.25)
            assert not res.is_error, res.content
            assert (await a2.call_tool("task_status", {})).structured_content["session_id"] == sid
            refused = await b.call_tool("quit_task", {"session_id": sid})
            assert refused.is_error and "belongs to another MCP client" in refused.content[0].text
            assert (await a2.call_tool("quit_task", {})).structured_content["state"] == "quit"

    anyio.run(go)


# --------------------------------------------------------------------------- issue 20, item 5
def credential_client(server: HttpServer, token: str, mode: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120))
    return Client(streamable_http_client(server.url, http_client=http), mode=mode)


SESSION_CALLS = (
    ("task_status", {}),
    ("add_note", {"text": "mine"}),
    ("pause_task", {}),
    ("resume_task", {}),
    ("get_result", {}),
)


def test_a_client_credential_owns_its_sessions_in_both_protocol_eras(server: HttpServer) -> None:
    """Claude Code over HTTP speaks 2026-07-28: each request stands alone. With the credential
    `ide-config` mints, a call without session_id means that client's own session, in that era and
    in the handshake era alike, and another credential's session stays out of reach."""
    from bridge.credentials import mint_client_credential

    cred_a = mint_client_credential(server.token, "client-a").token
    cred_b = mint_client_credential(server.token).token

    async def go() -> None:
        async with credential_client(server, cred_a, "auto") as a:
            started = await a.call_tool("start_task", {"task_id": "library-api", "workspace": "cred-a"})
            assert not started.is_error, started.content
            assert a.protocol_version == "2026-07-28"
            sid = started.structured_content["session_id"]
            for tool, args in SESSION_CALLS:
                res = await a.call_tool(tool, args)
                assert not res.is_error, (tool, res.content)
                assert res.structured_content["session_id"] == sid, tool
        # the same credential on a handshake-era connection, after the first one closed: still its own
        async with credential_client(server, cred_a, "legacy") as a2:
            assert a2.protocol_version != "2026-07-28"
            assert (await a2.call_tool("task_status", {})).structured_content["session_id"] == sid
        # another credential, either era: neither without an id nor by naming it
        for mode in ("auto", "legacy"):
            async with credential_client(server, cred_b, mode) as b:
                for tool, args in (*SESSION_CALLS, ("submit_task", {}), ("quit_task", {})):
                    res = await b.call_tool(tool, args)
                    assert res.is_error and "no active session" in res.content[0].text, (mode, tool, res.content)
                    res = await b.call_tool(tool, {**args, "session_id": sid})
                    assert res.is_error and "belongs to another MCP client" in res.content[0].text, (mode, tool)
        # nor a client holding only the shared server token
        async with http_client(server, "legacy") as shared:
            res = await shared.call_tool("quit_task", {"session_id": sid})
            assert res.is_error and "belongs to another MCP client" in res.content[0].text
        async with credential_client(server, cred_a, "auto") as a3:
            quit_ = await a3.call_tool("quit_task", {})
            assert quit_.structured_content["session_id"] == sid and quit_.structured_content["state"] == "quit"
        record = json.loads((server.rec / sid / "session.json").read_text())
        assert record["notes"] == 1 and record["client"]["protocol"] == "2026-07-28"

    anyio.run(go)


def test_raw_stateless_posts_with_a_credential(server: HttpServer) -> None:
    """Plain JSON-RPC POSTs, one per request and no Mcp-Session-Id (what a stateless client
    sends): the credential is the only thing tying them together."""
    from bridge.credentials import mint_client_credential

    cred = mint_client_credential(server.token).token
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {cred}", "MCP-Protocol-Version": "2026-07-28"}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-stateless", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }

    def call(rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta},
        }
        res = requests.post(
            server.url,
            data=json.dumps(body),
            headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": name},
            timeout=30,
        )
        assert res.status_code == 200, res.text
        assert "mcp-session-id" not in {k.lower() for k in res.headers}
        text = res.text
        if res.headers.get("content-type", "").startswith("text/event-stream"):
            text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
        return json.loads(text)["result"]

    started = call(1, "start_task", {"task_id": "link-shortener", "workspace": "raw-stateless"})
    assert not started.get("isError"), started
    sid = started["structuredContent"]["session_id"]
    assert call(2, "task_status", {})["structuredContent"]["session_id"] == sid
    assert call(3, "quit_task", {})["structuredContent"]["state"] == "quit"


def test_forged_or_foreign_credentials_are_rejected(server: HttpServer) -> None:
    from bridge.credentials import mint_client_credential

    good = mint_client_credential(server.token, "victim").token
    other_server = mint_client_credential("another-servers-token-0123456789", "victim").token
    forged = good.rsplit(".", 1)[0] + "." + "0" * 32
    renamed = "rgbc1.attacker." + good.rsplit(".", 1)[1]
    for token in (other_server, forged, renamed, "rgbc1..", "rgbc1.victim"):
        assert post(server, {"Authorization": f"Bearer {token}"}).status_code == 401, token
    assert post(server, {"Authorization": f"Bearer {good}"}).status_code == 200


def test_the_config_ide_config_prints_works_for_a_stateless_client(
    server: HttpServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's path end to end: `rgbridge ide-config claude --transport http` against this
    server's recordings folder, its headers used as they are by a 2026-07-28 client."""
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        rgbridge(
            [
                "ide-config",
                "claude",
                "--workspace",
                str(server.ws / "from-config"),
                "--transport",
                "http",
                "--url",
                server.url,
                "--recordings",
                str(server.rec),
            ]
        )
        == 0
    )
    entry = json.loads(capsys.readouterr().out)["mcpServers"]["rgbridge"]
    assert entry["type"] == "http" and entry["url"] == server.url

    async def go() -> None:
        http = httpx2.AsyncClient(headers=entry["headers"], timeout=httpx2.Timeout(30, read=120))
        async with Client(streamable_http_client(entry["url"], http_client=http), mode="auto") as c:
            assert c.protocol_version == "2026-07-28"
            started = await c.call_tool("start_task", {"task_id": "word-duel", "workspace": "from-config"})
            assert not started.is_error, started.content
            sid = started.structured_content["session_id"]
            for tool in ("task_status", "get_result", "quit_task"):
                res = await c.call_tool(tool, {})
                assert not res.is_error and res.structured_content["session_id"] == sid, (tool, res.content)

    anyio.run(go)


def test_a_credential_keeps_its_session_across_a_server_restart(tmp_path: Path) -> None:
    """The server restarts (the manager re-attaches the open session); the credential that started
    the session still reaches it without an id, and another still cannot."""
    from bridge.credentials import mint_client_credential

    first = HttpServer(tmp_path)
    cred_a = mint_client_credential(first.token, "keeps").token
    cred_b = mint_client_credential(first.token, "other").token

    async def start() -> str:
        async with credential_client(first, cred_a, "auto") as a:
            started = await a.call_tool("start_task", {"task_id": "kv-ledger", "workspace": "restart"})
            assert not started.is_error, started.content
            return started.structured_content["session_id"]

    try:
        sid = anyio.run(start)
    finally:
        first.stop()
    owners = json.loads((tmp_path / "rec" / "http-owners.json").read_text())
    assert owners == {sid: "credential:keeps"}
    second = HttpServer(tmp_path, token=first.token)

    async def after() -> None:
        async with credential_client(second, cred_b, "auto") as b:
            res = await b.call_tool("task_status", {"session_id": sid})
            assert res.is_error and "belongs to another MCP client" in res.content[0].text
        async with credential_client(second, cred_a, "auto") as a:
            status = (await a.call_tool("task_status", {})).structured_content
            assert status["session_id"] == sid and status["state"] == "active"
            assert (await a.call_tool("quit_task", {})).structured_content["state"] == "quit"

    try:
        anyio.run(after)
    finally:
        second.stop()
