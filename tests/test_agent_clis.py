"""The real agent CLIs against the bridge (issue #20): Claude Code over stdio and over
streamable HTTP, the Codex CLI over stdio, each driven by a scripted model endpoint on loopback
(tests/scripted_model.py). Each solves `kv-ledger` with its own file tools, submits, and exits
its own way; the score must then appear sealed in the recording (Pass@1 1.0 under `strict` and
`compat`) without anyone acting, and no copy of a golden file may be left where the agent's
user can read it. The time from the CLI's exit to the sealed score is printed per CLI.

Binaries: tests/agent_clis.py (`pip install -e '.[agents]'`); skipped when missing unless
RGBRIDGE_REQUIRE_AGENT_CLIS=1 (CI). Everything stays on 127.0.0.1: the CLIs get their own HOME,
TMPDIR (and CODEX_HOME) with telemetry, updates and plugin sync off.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.agent_clis import (
    MCP_SERVER_NAME,
    AgentDirs,
    Sealed,
    assert_no_golden_copies,
    assert_pass_at_1,
    base_env,
    claude_command,
    claude_env,
    cli_version,
    codex_command,
    codex_config,
    codex_env,
    ide_config,
    rgbridge_command,
    score_deadline,
    session_dirs,
    temp_entries,
    wait_for_sealed_score,
)
from tests.scripted_model import (
    Call,
    Calls,
    Reply,
    ScriptedModel,
    Stall,
    iter_sse,
    read_solution,
    solve_task_policy,
)

TASK = "kv-ledger"
PROMPT = (
    f"Solve the benchmark task {TASK} with the {MCP_SERVER_NAME} MCP tools: start_task, write the service "
    "into the session workspace, then submit_task."
)
CLI_TIMEOUT = 300


def solution_files(tasks_dir: Path) -> dict[str, str]:
    """What the scripted model "knows": the reference solution, plus a unique note so that the
    snapshot is new and really scored (no result-cache hit)."""
    files = read_solution(tasks_dir / TASK)
    files["NOTES.md"] = f"run {uuid.uuid4()}\n"
    return files


def run_cli(
    cmd: list[str], env: dict[str, str], cwd: Path, log: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL
    )
    wall = time.monotonic() - start
    log.with_suffix(".stdout").write_text(proc.stdout)
    log.with_suffix(".stderr").write_text(proc.stderr)
    return proc, wall


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def recorded_events(rec: Path) -> list[dict[str, Any]]:
    dirs = session_dirs(rec)
    assert len(dirs) == 1, f"expected one session in {rec}, found {len(dirs)}"
    return [json.loads(x) for x in (dirs[0] / "events.jsonl").read_text().splitlines()]


def check_agent_work(model: ScriptedModel, dirs: AgentDirs, files: dict[str, str], file_tool: str) -> None:
    """What works before scoring: the CLI connected, offered the bridge's tools, the model's
    calls reached the bridge, the files were written by the CLI's own tool, submit succeeded."""
    assert not model.errors, model.errors
    assert not model.outbound, f"the CLI tried to reach other hosts: {model.outbound}"
    calls = [c.tool for c in model.tool_calls()]
    mcp = f"mcp__{MCP_SERVER_NAME}__"
    answers = {
        r.call.tool: r.text for req in model.agent_requests() if req.conversation for r in req.conversation.history
    }
    assert calls.count(mcp + "start_task") == 1, (calls, answers.get(mcp + "start_task"))
    assert calls.count(mcp + "submit_task") == 1, (calls, answers.get(mcp + "submit_task"))
    assert file_tool in calls, calls
    for rel, text in files.items():
        assert (dirs.ws / rel).read_text() == text, rel
    events = recorded_events(dirs.rec)
    assert ("start_task", True) in [(e["tool"], e["ok"]) for e in events if e["type"] == "mcp_call"]
    assert [e["signal"] for e in events if e["type"] == "submit"] == ["mcp"], [e["type"] for e in events]


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def report(record: Any, label: str, version: str, wall: float, sealed: Sealed, extra: str = "") -> None:
    """The timings asked for by issue #20, printed (`-s`) and kept as the test's properties
    (JUnit XML, `--json-report`): the CLI's run, its exit to the sealed score, and from the
    recording the job's wait for a scoring slot (from the submit) and its scoring time."""
    job, submission = sealed.record["job"], sealed.record["submission"]
    queued = _seconds(submission["at"], job["started_at"]) or 0.0
    scoring = _seconds(job["started_at"], job["finished_at"]) or 0.0
    record("cli_version", version)
    record("cli_run_seconds", round(wall, 2))
    record("exit_to_sealed_seconds", round(sealed.waited, 2))
    record("job_wait_seconds", queued)
    record("job_scoring_seconds", scoring)
    print(
        f"\n[{label}] {version}: CLI run {wall:.1f}s, CLI exit -> sealed score {sealed.waited:.1f}s "
        f"(job: {queued:.1f}s from submit to start, {scoring:.1f}s scoring) {extra}".rstrip()
    )


# --------------------------------------------------------------------------------------------
# The endpoint itself (no CLI, no Docker)


def test_scripted_model_speaks_both_protocols() -> None:
    def policy(conv: Any) -> Any:
        if conv.history:
            return Reply(f"got {conv.history[-1].text}")
        if "stall" in conv.prompt:
            return Stall(30)
        return Calls((Call("mcp__rgbridge__start_task", {"task_id": "kv-ledger"}),))

    tools_a = [{"name": "mcp__rgbridge__start_task", "input_schema": {"type": "object"}}]
    with ScriptedModel(policy) as model:
        url = model.base_url
        body = {"model": "m", "stream": True, "tools": tools_a, "messages": [{"role": "user", "content": "go"}]}
        sse = list(iter_sse(requests.post(url + "/v1/messages?beta=true", json=body, timeout=10).text))
        kinds = [e for e, _ in sse]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
        start = next(d for e, d in sse if e == "content_block_start")
        assert (
            start["content_block"]["type"] == "tool_use"
            and start["content_block"]["name"] == "mcp__rgbridge__start_task"
        )
        partial = "".join(d["delta"]["partial_json"] for e, d in sse if e == "content_block_delta")
        assert json.loads(partial) == {"task_id": "kv-ledger"}
        delta = next(d for e, d in sse if e == "message_delta")
        assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] > 0
        tool_id = start["content_block"]["id"]
        body["stream"] = False
        body["messages"] += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tool_id, "name": "mcp__rgbridge__start_task", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": '{"ok": 1}'}]},
        ]
        plain = requests.post(url + "/v1/messages", json=body, timeout=10).json()
        assert plain["stop_reason"] == "end_turn" and plain["content"][0]["text"] == 'got {"ok": 1}'
        assert requests.post(url + "/v1/messages/count_tokens", json=body, timeout=10).json()["input_tokens"] > 0

        ns = [
            {
                "type": "namespace",
                "name": "mcp__rgbridge",
                "tools": [{"type": "function", "name": "start_task", "parameters": {}}],
            }
        ]
        body_o = {
            "model": "m",
            "stream": True,
            "tools": ns,
            "input": [{"type": "message", "role": "user", "content": "go"}],
        }
        sse = list(iter_sse(requests.post(url + "/v1/responses", json=body_o, timeout=10).text))
        assert [e for e, _ in sse] == [
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed",
        ]
        item = sse[2][1]["item"]
        assert (item["type"], item["namespace"], item["name"]) == ("function_call", "mcp__rgbridge", "start_task")
        assert sse[-1][1]["response"]["usage"]["total_tokens"] > 0
        body_o["input"] += [
            item,
            {
                "type": "function_call_output",
                "call_id": item["call_id"],
                "output": "Wall time: 0.1 seconds\nOutput:\n{}",
            },
        ]
        sse = list(iter_sse(requests.post(url + "/v1/responses", json=body_o, timeout=10).text))
        done = next(d for e, d in sse if e == "response.output_item.done")
        assert done["item"]["content"][0]["text"] == "got Wall time: 0.1 seconds\nOutput:\n{}"

        # As a proxy it refuses and logs every other host (nothing is forwarded).
        proxies = {"http": url, "https": url}
        assert requests.get("http://example.invalid/x", proxies=proxies, timeout=10).status_code == 403
        with pytest.raises(requests.exceptions.ProxyError):
            requests.get("https://example.invalid/y", proxies=proxies, timeout=10)
        assert model.outbound == ["GET http://example.invalid/x", "CONNECT example.invalid:443"]

        # A stalled answer holds the connection until the server stops.
        stalled = {"model": "m", "stream": True, "tools": tools_a, "messages": [{"role": "user", "content": "stall"}]}
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(url + "/v1/messages", json=stalled, timeout=1.5)
    conv = model.agent_requests()[1].conversation
    assert conv is not None and conv.history[0].data == {"ok": 1}


def test_solve_policy_steps_and_an_already_open_session() -> None:
    """The ready policy, as a pure function: tool discovery, start (or going on with the session
    the bridge says is open for the workspace), writes with the CLI's own tool, submit, final."""
    from tests.scripted_model import Conversation, ToolResult

    mcp = "mcp__rgbridge__"
    tools = (
        "ToolSearch",
        "Write",
        "Read",
        *(mcp + t for t in ("start_task", "task_status", "submit_task", "get_result")),
    )
    policy = solve_task_policy("kv-ledger", {"app.py": "print(1)\n"})

    def step(history: list[ToolResult], offered: tuple[str, ...] = tools) -> Any:
        return policy(Conversation("anthropic", "m", offered, {}, "go", tuple(history)))

    def done(tool: str, args: dict[str, Any], text: str, error: bool = False) -> ToolResult:
        return ToolResult(Call(tool, args), text, json.loads(text) if text.startswith("{") else None, error)

    assert step([], ("ToolSearch", "Write")).calls[0].tool == "ToolSearch"
    assert step([]).calls == (Call(mcp + "start_task", {"task_id": "kv-ledger"}),)
    refused = done(mcp + "start_task", {}, "workspace /w already has an open session S1; quit or submit it first", True)
    assert step([refused]).calls == (Call(mcp + "task_status", {}),)
    status = done(mcp + "task_status", {}, json.dumps({"session_id": "S1", "workspace": "/w"}))
    write = step([refused, status]).calls[0]
    assert write == Call("Write", {"file_path": "/w/app.py", "content": "print(1)\n"})
    wrote = done("Write", write.arguments, "File created successfully at: /w/app.py")
    assert step([refused, status, wrote]).calls == (Call(mcp + "submit_task", {}),)
    submitted = done(mcp + "submit_task", {}, json.dumps({"job_id": "j"}))
    assert isinstance(step([refused, status, wrote, submitted]), Reply)
    assert isinstance(
        policy(Conversation("anthropic", "m", (), {}, "a title for this chat?", ())), Reply
    )  # side request


# --------------------------------------------------------------------------------------------
# Claude Code over stdio


@pytest.mark.docker
@pytest.mark.agent_cli
def test_claude_code_over_stdio(
    docker_client, agent_cli: Callable[[str], Path], tmp_path: Path, tasks_dir: Path, record_property: Any
) -> None:
    claude = agent_cli("claude")
    temp_before = temp_entries()
    dirs = AgentDirs(tmp_path / "run")
    config = dirs.root / "mcp.json"
    # The project's own writer; --recordings is passed through to the server it launches.
    document = ide_config("claude", dirs.ws, "--recordings", str(dirs.rec))
    config.write_text(json.dumps(document))
    files = solution_files(tasks_dir)
    with ScriptedModel(solve_task_policy(TASK, files)) as model:
        env = {**claude_env(dirs, model.base_url), **model.proxy_env()}
        proc, wall = run_cli(
            claude_command(claude, PROMPT, config, debug_file=dirs.root / "claude-debug.log"),
            env,
            dirs.ws,
            dirs.root / "claude",
        )
        exited = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = json_lines(proc.stdout)
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert {"name": MCP_SERVER_NAME, "status": "connected"} in [
        {k: s.get(k) for k in ("name", "status")} for s in init["mcp_servers"]
    ]
    result = events[-1]
    assert result["type"] == "result" and not result["is_error"] and result["usage"]["input_tokens"] > 0, result
    check_agent_work(model, dirs, files, "Write")

    sealed = wait_for_sealed_score(dirs.rec, deadline=score_deadline(), since=exited)
    report(
        record_property,
        "claude-code stdio",
        cli_version(claude, env),
        wall,
        sealed,
        f"(cost reported ${result.get('total_cost_usd')})",
    )
    assert_pass_at_1(sealed.summary)
    assert_no_golden_copies(tasks_dir / TASK, dirs, temp_before)


# --------------------------------------------------------------------------------------------
# Codex CLI over stdio


@pytest.mark.docker
@pytest.mark.agent_cli
def test_codex_over_stdio(
    docker_client, agent_cli: Callable[[str], Path], tmp_path: Path, tasks_dir: Path, record_property: Any
) -> None:
    codex = agent_cli("codex")
    temp_before = temp_entries()
    dirs = AgentDirs(tmp_path / "run")
    # The server's command line from the project's writer (the same for every client format).
    entry = ide_config("claude", dirs.ws, "--recordings", str(dirs.rec))["mcpServers"][MCP_SERVER_NAME]
    # Codex hands a stdio server a filtered environment (no keys): what the bridge needs from
    # the test's environment goes in the server's `env`.
    env = codex_env(dirs)
    server = {
        "command": entry["command"],
        "args": entry["args"],
        "env": {k: env[k] for k in ("PYTHONPATH", "RGBRIDGE_CACHE", "DOCKER_HOST") if k in env},
    }
    files = solution_files(tasks_dir)
    with ScriptedModel(solve_task_policy(TASK, files)) as model:
        (dirs.codex_home / "config.toml").write_text(codex_config(model.openai_base_url, server))
        proc, wall = run_cli(
            codex_command(codex, PROMPT, dirs.ws, last_message=dirs.root / "codex-last.txt"),
            {**env, **model.proxy_env()},
            dirs.ws,
            dirs.root / "codex",
        )
        exited = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = json_lines(proc.stdout)
    mcp_items = [
        e["item"] for e in events if e.get("type") == "item.completed" and e["item"].get("type") == "mcp_tool_call"
    ]
    assert [(i["server"], i["tool"]) for i in mcp_items if i["tool"] == "submit_task"] == [
        (MCP_SERVER_NAME, "submit_task")
    ]
    usage = next(e for e in events if e.get("type") == "turn.completed")["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, usage
    check_agent_work(model, dirs, files, "exec_command")

    sealed = wait_for_sealed_score(dirs.rec, deadline=score_deadline(), since=exited)
    report(record_property, "codex stdio", cli_version(codex, env), wall, sealed)
    assert_pass_at_1(sealed.summary)
    assert_no_golden_copies(tasks_dir / TASK, dirs, temp_before)


# --------------------------------------------------------------------------------------------
# Claude Code over streamable HTTP


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpBridge:
    """`rgbridge serve --transport http` started as a user would, before the IDE."""

    def __init__(self, dirs: AgentDirs) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.tmp = dirs.root / "server-tmp"
        self.tmp.mkdir()
        env = {**base_env(dirs), "HOME": os.environ.get("HOME", str(dirs.home)), "TMPDIR": str(self.tmp)}
        self.stderr = (dirs.root / "server.stderr").open("w")
        self.proc = subprocess.Popen(
            [*rgbridge_command(), "serve", "--transport", "http", "--port", str(self.port),
             "--workspace", str(dirs.ws), "--recordings", str(dirs.rec)],
            stdout=subprocess.DEVNULL, stderr=self.stderr, env=env, cwd=dirs.root,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (dirs.root / "server.stderr").read_text()
            if (dirs.rec / "http-token").is_file():
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError("the HTTP bridge did not start listening")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


@pytest.mark.docker
@pytest.mark.agent_cli
def test_claude_code_over_http(
    docker_client, agent_cli: Callable[[str], Path], tmp_path: Path, tasks_dir: Path, record_property: Any
) -> None:
    claude = agent_cli("claude")
    temp_before = temp_entries()
    dirs = AgentDirs(tmp_path / "run")
    bridge = HttpBridge(dirs)
    try:
        config = dirs.root / "mcp.json"  # outside the workspace: it holds the bearer token
        document = ide_config(
            "claude", dirs.ws, "--transport", "http", "--url", bridge.url, "--recordings", str(dirs.rec)
        )
        assert document["mcpServers"][MCP_SERVER_NAME]["type"] == "http"
        config.write_text(json.dumps(document))
        config.chmod(0o600)
        files = solution_files(tasks_dir)
        with ScriptedModel(solve_task_policy(TASK, files)) as model:
            env = {**claude_env(dirs, model.base_url), **model.proxy_env()}
            proc, wall = run_cli(
                claude_command(claude, PROMPT, config, debug_file=dirs.root / "claude-debug.log"),
                env,
                dirs.ws,
                dirs.root / "claude",
            )
            exited = time.monotonic()
        assert proc.returncode == 0, proc.stderr[-2000:]
        events = json_lines(proc.stdout)
        init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
        assert {"name": MCP_SERVER_NAME, "status": "connected"} in [
            {k: s.get(k) for k in ("name", "status")} for s in init["mcp_servers"]
        ]
        check_agent_work(model, dirs, files, "Write")

        sealed = wait_for_sealed_score(dirs.rec, deadline=score_deadline(), since=exited)
        report(record_property, "claude-code http", cli_version(claude, env), wall, sealed)
        assert_pass_at_1(sealed.summary)
    finally:
        bridge.stop()
    assert_no_golden_copies(tasks_dir / TASK, dirs, temp_before, also=[bridge.tmp])


# --------------------------------------------------------------------------------------------
# The agent variants `rgbridge run` must cope with (issue #21), with the real CLIs (no scoring)


def _cli_run(name: str, binary: Path, dirs: AgentDirs, model: ScriptedModel) -> tuple[list[str], dict[str, str]]:
    """The command and environment of one run of the CLI `binary` against `model`, over stdio."""
    entry = ide_config("claude", dirs.ws, "--recordings", str(dirs.rec))["mcpServers"][MCP_SERVER_NAME]
    if name == "claude":
        config = dirs.root / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {MCP_SERVER_NAME: entry}}))
        return claude_command(binary, PROMPT, config), {**claude_env(dirs, model.base_url), **model.proxy_env()}
    env = codex_env(dirs)
    server = {"command": entry["command"], "args": entry["args"],
              "env": {k: env[k] for k in ("PYTHONPATH", "RGBRIDGE_CACHE", "DOCKER_HOST") if k in env}}  # fmt: skip
    (dirs.codex_home / "config.toml").write_text(codex_config(model.openai_base_url, server))
    return codex_command(binary, PROMPT, dirs.ws), {**env, **model.proxy_env()}


@pytest.mark.agent_cli
@pytest.mark.parametrize("name", ["claude", "codex"])
def test_agent_that_exits_without_submitting(
    name: str, agent_cli: Callable[[str], Path], tmp_path: Path, tasks_dir: Path
) -> None:
    """`then="exit"`: the CLI writes the files and ends its turn; it exits 0 and the session stays
    open, unsubmitted (what `rgbridge run` submits as `agent_exit`)."""
    dirs = AgentDirs(tmp_path / "run")
    files = read_solution(tasks_dir / TASK)
    with ScriptedModel(solve_task_policy(TASK, files, then="exit")) as model:
        cmd, env = _cli_run(name, agent_cli(name), dirs, model)
        proc, _ = run_cli(cmd, env, dirs.ws, dirs.root / name)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not model.errors and not model.outbound, (model.errors, model.outbound)
    assert "mcp__rgbridge__submit_task" not in [c.tool for c in model.tool_calls()]
    for rel, text in files.items():
        assert (dirs.ws / rel).read_text() == text
    record = json.loads((session_dirs(dirs.rec)[0] / "session.json").read_text())
    assert record["state"] == "active" and record["submission"] is None, record


@pytest.mark.agent_cli
@pytest.mark.parametrize("name", ["claude", "codex"])
def test_agent_whose_model_hangs_waits_until_killed(
    name: str, agent_cli: Callable[[str], Path], tmp_path: Path, tasks_dir: Path
) -> None:
    """`then="hang"`: after writing, the model's next answer never comes; the CLI keeps waiting
    (it neither exits nor submits) until it is stopped: what a time limit has to cut."""
    dirs = AgentDirs(tmp_path / "run")
    with ScriptedModel(solve_task_policy(TASK, read_solution(tasks_dir / TASK), then="hang")) as model:
        cmd, env = _cli_run(name, agent_cli(name), dirs, model)
        with (dirs.root / f"{name}.stdout").open("w") as out, (dirs.root / f"{name}.stderr").open("w") as err:
            proc = subprocess.Popen(cmd, env=env, cwd=dirs.ws, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)  # fmt: skip
            try:
                deadline = time.monotonic() + 120
                while not any(isinstance(r.action, Stall) for r in model.agent_requests()):
                    assert proc.poll() is None, f"{name} exited before the stall"
                    assert time.monotonic() < deadline, "the model was never asked past the writes"
                    time.sleep(0.2)
                time.sleep(10)
                assert proc.poll() is None, f"{name} gave up on a hanging model within 10 s"
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    assert "mcp__rgbridge__submit_task" not in [c.tool for c in model.tool_calls()]
    assert not model.outbound, model.outbound
