"""The agent adapters against the formats their CLIs document (no binary needed): argv, the
isolated environment, where the MCP config goes and what it holds (the `ide-config` writers),
keys only from the environment; event-stream parsers on documented event shapes, with hostile
input; the Codex, Gemini CLI and Copilot CLI formats through `rgbridge ide-config`."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tomllib
from pathlib import Path

import pytest
from atif import Trajectory

from bridge.agents.adapters import mcp_configs
from bridge.agents.adapters.base import AgentError, AttemptSetup, McpServer
from bridge.agents.adapters.events import MAX_TEXT, read_stream
from bridge.agents.adapters.registry import ADAPTERS, adapter
from bridge.agents.attempt.trajectory import to_atif
from bridge.cli import main as rgbridge

SECRET = "sk-adapter-test-secret"


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AttemptSetup:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CURSOR_API_KEY", "GEMINI_API_KEY", "GH_TOKEN"):
        monkeypatch.setenv(var, SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-agents")
    for sub in ("ws", "home", "tmp"):
        (tmp_path / sub).mkdir()
    server = McpServer(
        "/usr/bin/python3", ["-m", "mcp_server", "--workspace", str(tmp_path / "ws")], {"PYTHONPATH": "/x"}
    )
    return AttemptSetup(
        binary="/opt/bin/agent",
        prompt="solve 'kv-ledger'",
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        tmp=tmp_path / "tmp",
        server=server,
        model="some-model",
        model_base_url="http://127.0.0.1:9/v1",
        agent_cmd="/bin/agent --prompt {prompt} --cwd={workspace} --mcp {mcp_config}",
    )


def the_server(entry: dict) -> None:
    assert entry["command"] == "/usr/bin/python3" and entry["args"][:2] == ["-m", "mcp_server"]
    assert entry["env"] == {"PYTHONPATH": "/x"}


def common(launch, setup: AttemptSetup, key_var: str) -> None:
    env = launch.env
    assert env["HOME"] == str(setup.home) and env["TMPDIR"] == str(setup.tmp)
    assert env[key_var] == SECRET  # passed through from the environment...
    assert "AWS_SECRET_ACCESS_KEY" not in env  # ...and nothing outside the allow-list
    for path, text in launch.files.items():
        assert SECRET not in text, f"key written into {path}"
        assert path.is_relative_to(setup.home), f"{path} is not under the attempt's HOME"


def test_claude_code(setup: AttemptSetup) -> None:
    launch = adapter("claude-code").build(setup)
    argv = launch.argv
    assert argv[:3] == ["/opt/bin/agent", "-p", setup.prompt]
    assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    assert "--strict-mcp-config" in argv and "--no-session-persistence" in argv
    assert argv[argv.index("--model") + 1] == "some-model"
    (path,) = launch.files
    assert argv[argv.index("--mcp-config") + 1] == str(path)
    doc = json.loads(launch.files[path])
    assert doc["mcpServers"]["rgbridge"]["type"] == "stdio"
    the_server(doc["mcpServers"]["rgbridge"])
    assert launch.env["ANTHROPIC_BASE_URL"] == setup.model_base_url
    assert launch.env["DISABLE_TELEMETRY"] == "1" and launch.env["DISABLE_AUTOUPDATER"] == "1"
    assert launch.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    common(launch, setup, "ANTHROPIC_API_KEY")


def test_codex(setup: AttemptSetup) -> None:
    launch = adapter("codex").build(setup)
    argv = launch.argv
    assert argv[:3] == ["/opt/bin/agent", "exec", "--json"] and argv[-1] == setup.prompt
    assert argv[argv.index("-C") + 1] == str(setup.workspace) and "--skip-git-repo-check" in argv
    (path,) = launch.files
    assert path == setup.home / ".codex" / "config.toml" and launch.env["CODEX_HOME"] == str(path.parent)
    config = tomllib.loads(launch.files[path])
    assert config["check_for_update_on_startup"] is False and config["analytics"] == {"enabled": False}
    assert config["features"] == {"plugins": False, "remote_plugin": False, "apps": False, "shell_snapshot": False}
    assert config["otel"] == {"exporter": "none"} and config["feedback"] == {"enabled": False}
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == setup.model_base_url and provider["wire_api"] == "responses"
    assert provider["env_key"] == "OPENAI_API_KEY"  # the key is named, never written
    server = config["mcp_servers"]["rgbridge"]
    the_server(server)
    assert server["default_tools_approval_mode"] == "approve" and server["tool_timeout_sec"] >= 60
    common(launch, setup, "OPENAI_API_KEY")


def test_cursor_agent(setup: AttemptSetup) -> None:
    launch = adapter("cursor-agent").build(setup)
    argv = launch.argv
    assert argv[:2] == ["/opt/bin/agent", "--print"] and argv[-1] == setup.prompt
    assert {"--trust", "--force", "--approve-mcps"} <= set(argv)
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    (path,) = launch.files
    assert path == setup.home / ".cursor" / "mcp.json"
    entry = json.loads(launch.files[path])["mcpServers"]["rgbridge"]
    assert "type" not in entry
    the_server(entry)
    common(launch, setup, "CURSOR_API_KEY")


def test_gemini(setup: AttemptSetup) -> None:
    launch = adapter("gemini").build(setup)
    argv = launch.argv
    assert argv[:3] == ["/opt/bin/agent", "-p", setup.prompt] and "--yolo" in argv
    assert argv[argv.index("--output-format") + 1] == "stream-json" and argv[argv.index("-m") + 1] == "some-model"
    (path,) = launch.files
    assert path == setup.home / ".gemini" / "settings.json"
    settings = json.loads(launch.files[path])
    entry = settings["mcpServers"]["rgbridge"]
    the_server(entry)
    assert entry["trust"] is True and entry["timeout"] >= 60_000
    assert settings["telemetry"] == {"enabled": False} and settings["privacy"]["usageStatisticsEnabled"] is False
    assert launch.env["GOOGLE_GEMINI_BASE_URL"] == setup.model_base_url
    common(launch, setup, "GEMINI_API_KEY")


def test_copilot(setup: AttemptSetup) -> None:
    launch = adapter("copilot").build(setup)
    assert launch.argv[:3] == ["/opt/bin/agent", "-p", setup.prompt] and "--allow-all-tools" in launch.argv
    (path,) = launch.files
    assert path == setup.home / ".copilot" / "mcp-config.json"
    entry = json.loads(launch.files[path])["mcpServers"]["rgbridge"]
    assert entry["type"] == "local" and entry["tools"] == ["*"]
    the_server(entry)
    common(launch, setup, "GH_TOKEN")


def test_antigravity(setup: AttemptSetup) -> None:
    """`agy` print mode as Antigravity's CLI documents it: `-p PROMPT`, `--output-format
    stream-json`, `--dangerously-skip-permissions`, `--model`; the global MCP file
    `~/.gemini/config/mcp_config.json` (`mcpServers`, an stdio entry without a `type`); the
    settings file `~/.gemini/antigravity-cli/settings.json` with its documented keys."""
    launch = adapter("antigravity").build(setup)
    argv = launch.argv
    assert argv[:3] == ["/opt/bin/agent", "-p", setup.prompt] and "--dangerously-skip-permissions" in argv
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert argv[argv.index("--model") + 1] == "some-model"
    assert launch.cwd == setup.workspace
    mcp = setup.home / ".gemini" / "config" / "mcp_config.json"
    settings_path = setup.home / ".gemini" / "antigravity-cli" / "settings.json"
    assert set(launch.files) == {mcp, settings_path}
    doc = json.loads(launch.files[mcp])
    assert list(doc) == ["mcpServers"]
    entry = doc["mcpServers"]["rgbridge"]
    assert "type" not in entry and "serverUrl" not in entry
    the_server(entry)
    settings = json.loads(launch.files[settings_path])
    documented = {  # the CLI reference's settings.json keys and their allowed values
        "toolPermission": {"request-review", "proceed-in-sandbox", "always-proceed", "strict"},
        "artifactReviewPolicy": {"asks-for-review", "agent-decides", "always-proceed"},
        "allowNonWorkspaceAccess": {False, True},
        "enableTelemetry": {False, True},
        "showFeedbackSurvey": {False, True},
        "showTips": {False, True},
        "notifications": {False, True},
    }
    assert set(settings) <= set(documented) and all(settings[k] in documented[k] for k in settings)
    assert settings["toolPermission"] == "always-proceed" and settings["artifactReviewPolicy"] == "always-proceed"
    assert settings["enableTelemetry"] is False and settings["allowNonWorkspaceAccess"] is False
    assert launch.env["GEMINI_API_KEY"] == SECRET and "CURSOR_API_KEY" not in launch.env
    assert "GOOGLE_GEMINI_BASE_URL" not in launch.env  # agy documents no base-URL override
    common(launch, setup, "GEMINI_API_KEY")
    # without --model the CLI's own default stands
    assert "--model" not in adapter("antigravity").build(dataclasses.replace(setup, model=None)).argv


def test_antigravity_http_server(setup: AttemptSetup) -> None:
    """The attempt's server over streamable HTTP on loopback: a remote entry in Antigravity's
    documented form (`serverUrl`, not `url` or `httpUrl`; `headers`), the attempt's credential as
    a bearer header (Antigravity expands no variables in the file), nothing launched."""

    @dataclasses.dataclass(frozen=True)
    class HttpServer(McpServer):
        url: str = ""
        token: str = ""

    server = HttpServer("", [], {}, url="http://127.0.0.1:41234/mcp", token="attempt-credential")
    launch = adapter("antigravity").build(dataclasses.replace(setup, server=server))
    mcp = setup.home / ".gemini" / "config" / "mcp_config.json"
    entry = json.loads(launch.files[mcp])["mcpServers"]["rgbridge"]
    assert entry["serverUrl"] == "http://127.0.0.1:41234/mcp"
    assert entry["headers"] == {"Authorization": "Bearer attempt-credential"}
    assert not {"url", "httpUrl", "type", "command", "args"} & set(entry)
    # the same entry `rgbridge ide-config antigravity --transport http` writes
    assert entry == mcp_configs.http_entry("antigravity", server.url, token=server.token)
    common(launch, setup, "GEMINI_API_KEY")


def test_antigravity_stream(tmp_path: Path) -> None:
    """Print mode's stream-json events as the 1.1.8 release notes describe them: `init`,
    `step_update` (a `step_type`; `tool_info` with name, parameters and output for a tool call),
    a terminal `result` (status, response, usage with `cache_read_tokens`)."""
    stream = write_stream(tmp_path / "a.jsonl", [
        {"event": "init", "conversation_id": "c1", "init": {"model": "gemini-3-pro", "cwd": "/ws"}},
        {"event": "step_update", "step_update": {"conversation_id": "c1", "step_index": 0, "state": "DONE",
                                                 "step_type": "user_input", "text_delta": "the prompt"}},
        {"event": "step_update", "step_update": {"step_index": 1, "state": "ACTIVE", "step_type": "agent_response",
                                                 "text_delta": "I will "}},
        {"event": "step_update", "step_update": {"step_index": 1, "state": "ACTIVE", "step_type": "agent_response",
                                                 "text_delta": "start."}},
        {"event": "step_update", "step_update": {"step_index": 1, "state": "DONE", "text_delta": "start."}},
        {"event": "step_update", "step_update": {"step_index": 2, "state": "ACTIVE", "step_type": "tool",
                                                 "tool_info": {"name": "rgbridge/start_task",
                                                               "parameters": {"task_id": "kv-ledger"}}}},
        {"event": "step_update", "step_update": {"step_index": 2, "state": "DONE", "step_type": "tool",
                                                 "tool_info": {"name": "rgbridge/start_task",
                                                               "parameters": {"task_id": "kv-ledger"},
                                                               "output": "session open"}}},
        "not json",
        {"event": "step_update", "step_update": {"step_index": 3, "state": "DONE", "step_type": "tool",
                                                 "tool_info": {"name": "write_file", "parameters": '{"path": "app.py"}',
                                                               "output": "ok"}}},
        {"event": "result", "result": {"conversation_id": "c1", "status": "SUCCESS", "response": "Done: submitted.",
                                       "usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 64,
                                                 "total_tokens": 150}}},
    ])  # fmt: skip
    run = adapter("antigravity").parse(read_stream(stream), "p")
    assert run.model == "gemini-3-pro" and run.final_message == "Done: submitted."
    assert run.steps[1].message == "I will start." and run.tool_calls == 2
    calls = [c for s in run.steps for c in s.calls]
    assert [c.name for c in calls] == ["rgbridge/start_task", "write_file"]
    assert calls[0].arguments == {"task_id": "kv-ledger"} and calls[1].arguments == {"path": "app.py"}
    assert run.steps[2].results == [("step-2", "session open")] and run.steps[3].results == [("step-3", "ok")]
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (120, 30, 64)
    assert run.errors == []
    valid(run, "antigravity")
    failed = write_stream(tmp_path / "f.jsonl", [
        {"event": "init", "init": {}},
        {"event": "result", "result": {"status": "ERROR", "error": "authentication required"}},
    ])  # fmt: skip
    run = adapter("antigravity").parse(read_stream(failed), "p")
    assert run.errors == ["ERROR: authentication required"] and run.final_message is None


def test_command_template(setup: AttemptSetup) -> None:
    launch = adapter("command").build(setup)
    (path,) = launch.files
    # each word replaced, never a shell: the prompt stays one argument whatever it holds
    assert launch.argv == ["/bin/agent", "--prompt", setup.prompt, f"--cwd={setup.workspace}", "--mcp", str(path)]
    the_server(json.loads(launch.files[path])["mcpServers"]["rgbridge"])
    with pytest.raises(AgentError, match="agent-cmd"):
        adapter("command").build(AttemptSetup(**{**setup.__dict__, "agent_cmd": "'unclosed"}))
    with pytest.raises(AgentError, match="unknown agent"):
        adapter("aider")


def test_binary_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AgentError, match="no binary found.*--agent-bin"):
        adapter("gemini").find_binary()
    fake = tmp_path / "gemini"
    fake.write_text("#!/bin/sh\necho 0.9.0\n")
    fake.chmod(0o755)
    assert adapter("gemini").find_binary() == str(fake)
    assert adapter("gemini").version(str(fake), {"PATH": str(tmp_path)}) == "0.9.0"
    with pytest.raises(AgentError, match="not an executable"):
        adapter("gemini").find_binary(str(tmp_path / "missing"))


# ----------------------------------------------------------------------------- event streams


def write_stream(path: Path, events: list) -> Path:
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events))
    return path


def valid(run, agent: str) -> Trajectory:
    return Trajectory.model_validate(to_atif(run, session_id="s", agent=agent, version="1", extra={}))


def test_claude_stream(tmp_path: Path) -> None:
    stream = write_stream(tmp_path / "s.jsonl", [
        {"type": "system", "subtype": "init", "model": "claude-x", "tools": ["Write"]},
        "not json at all", "[1, 2]",
        {"type": "assistant", "message": {"model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 2},
         "content": [{"type": "text", "text": "hi"},
                     {"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": "a", "content": "x" * 50_000}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "nobody", "content": "?"}]}},
        {"type": "result", "total_cost_usd": 0.25, "usage": {"input_tokens": 40, "output_tokens": 9,
                                                             "cache_read_input_tokens": 3}, "result": "done"},
    ])  # fmt: skip
    run = adapter("claude-code").parse(read_stream(stream), "the prompt")
    assert run.model == "claude-x" and run.tool_calls == 1 and run.cost_usd == 0.25
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (40, 9, 3)
    t = valid(run, "claude-code")
    assert [s.source for s in t.steps] == ["user", "agent"]
    assert t.steps[1].observation.results[0].source_call_id == "t1"
    assert len(json.dumps(t.steps[1].tool_calls[0].arguments)) < MAX_TEXT * 2  # capped


def test_codex_stream(tmp_path: Path) -> None:
    stream = write_stream(tmp_path / "s.jsonl", [
        {"type": "thread.started", "thread_id": "x"},
        {"type": "item.completed", "item": {"id": "i0", "type": "reasoning", "text": "think"}},
        {"type": "item.completed", "item": {"id": "i1", "type": "mcp_tool_call", "server": "rgbridge",
                                            "tool": "start_task", "arguments": {"task_id": "k"}, "result": {"a": 1}}},
        {"type": "item.completed", "item": {"id": "i2", "type": "command_execution", "command": "ls",
                                            "aggregated_output": "README.md", "exit_code": 0}},
        {"type": "item.completed", "item": {"id": "i3", "type": "file_change", "changes": [{"path": "a.py"}]}},
        {"type": "item.completed", "item": {"id": "i4", "type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 50, "output_tokens": 7}},
        {"type": "turn.completed", "usage": {"input_tokens": -5, "output_tokens": "many"}},
    ])  # fmt: skip
    run = adapter("codex").parse(read_stream(stream), "p")
    assert run.tool_calls == 3 and run.final_message == "done"
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (100, 7, 50)
    names = [c.function_name for s in valid(run, "codex").steps for c in s.tool_calls or []]
    assert names == ["mcp__rgbridge__start_task", "exec_command", "apply_patch"]


def test_gemini_and_cursor_streams(tmp_path: Path) -> None:
    gem = write_stream(tmp_path / "g.jsonl", [
        {"type": "init", "model": "gemini-x"},
        {"type": "message", "role": "assistant", "content": "Hel", "delta": True},
        {"type": "message", "role": "assistant", "content": "lo", "delta": True},
        {"type": "tool_use", "tool_name": "write_file", "tool_id": "w1", "parameters": {"file_path": "a"}},
        {"type": "tool_result", "tool_id": "w1", "status": "success", "output": "ok"},
        {"type": "result", "stats": {"input_tokens": 3, "output_tokens": 4}},
    ])  # fmt: skip
    run = adapter("gemini").parse(read_stream(gem), "p")
    assert run.model == "gemini-x" and run.steps[1].message == "Hello" and run.tool_calls == 1
    valid(run, "gemini")
    cur = write_stream(tmp_path / "c.jsonl", [
        {"type": "system", "subtype": "init", "model": "cursor-x"},
        {"type": "tool_call", "subtype": "started", "call_id": "c1", "tool_call": {"mcpToolCall": {"args": {"a": 1}}}},
        {"type": "tool_call", "subtype": "completed", "call_id": "c1", "tool_call": {"mcpToolCall": {"result": "r"}}},
        {"type": "result", "result": "fin"},
    ])  # fmt: skip
    run = adapter("cursor-agent").parse(read_stream(cur), "p")
    assert run.model == "cursor-x" and run.tool_calls == 1 and run.final_message == "fin"
    valid(run, "cursor-agent")


def test_oversized_lines_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with open(path, "w") as fh:
        fh.write('{"type": "result", "result": "' + "x" * (5 * 1024 * 1024) + '"}\n')
        fh.write('{"type": "system", "subtype": "init", "model": "ok"}\n')
    assert read_stream(path) == [{"type": "system", "subtype": "init", "model": "ok"}]


# ----------------------------------------------------------------------------- ide-config formats


@pytest.mark.parametrize(
    "client,rel",
    [("codex", ".codex/config.toml"), ("gemini", ".gemini/settings.json"), ("copilot", ".copilot/mcp-config.json")],
)
def test_ide_config_new_clients(client: str, rel: str, tmp_path: Path, monkeypatch, capsys) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    target = home / rel
    target.parent.mkdir(parents=True)
    keep = (
        'model = "mine"\n[mcp_servers.other]\ncommand = "x"\n'
        if client == "codex"
        else json.dumps({"theme": "dark", "mcpServers": {"other": {"command": "x"}}})
    )
    target.write_text(keep)
    assert rgbridge(["ide-config", client, "--workspace", str(ws)]) == 0
    printed = capsys.readouterr().out
    doc = tomllib.loads(printed) if client == "codex" else json.loads(printed)
    assert doc == mcp_configs.document(client, doc[mcp_configs.client_format(client).top_key]["rgbridge"])
    assert rgbridge(["ide-config", client, "--workspace", str(ws), "--write"]) == 0
    text = target.read_text()
    merged = tomllib.loads(text) if client == "codex" else json.loads(text)
    top = mcp_configs.client_format(client).top_key
    assert merged[top]["other"] == {"command": "x"} and ("model" in merged or "theme" in merged)
    assert str(ws) in merged[top]["rgbridge"]["args"]
    assert (target.parent / (target.name + ".bak")).read_text() == keep


def test_every_adapter_is_documented() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert {"claude-code", "codex", "command"} <= set(ADAPTERS), sorted(ADAPTERS)
    for name in ADAPTERS:
        assert f"--agent {name}" in readme, name


# ----------------------------------------------------------------------------- the leaderboard line


def _row(task: str, lang: str, attempt: int, passed: int, total: int, *, contaminated: bool = False) -> dict:
    prof = {
        "outcome": "scored",
        "dsr": {"success": True},
        "api_coverage": {"score": 1.0, "total_apis": 2},
        "pass_at_1": {"passed": passed, "total": total, "score": passed / total},
    }
    return {
        "repo_name": task,
        "lang": lang,
        "attempt": attempt,
        "contaminated": contaminated,
        "pass_at_1": prof["pass_at_1"],
        "dsr": prof["dsr"],
        "api_coverage": prof["api_coverage"],
        "agent": {"name": "codex", "version": "codex-cli 0.163.0", "model": "m1"},
        "rgbridge": {"profiles": {"compat": prof, "strict": prof}},
    }


def test_leaderboard_line_pass_at_k_and_contamination() -> None:
    from bridge.reports.leaderboard import leaderboard_lines

    rows = [
        _row("a", "python", 1, 2, 2),
        _row("a", "python", 2, 0, 2, contaminated=True),
        _row("b", "python", 1, 1, 2),
        _row("b", "python", 2, 1, 2),
        _row("j", "java", 1, 3, 3),
        _row("j", "java", 2, 3, 3),
    ]
    report = {
        "metadata": {
            "agent": {"name": "codex", "version": "codex-cli 0.163.0"},
            "attempts": 2,
            "bridge_version": "0.4.0+gabc",
        },
        "results": rows,
    }
    head, python, java, *statistics, flagged = leaderboard_lines(report)
    assert any("solved (all tests pass) Pass@1" in ln for ln in statistics)
    assert head.startswith("codex codex-cli 0.163.0 + m1") and "6 attempts, 2 per task" in head
    # Pass@1 is the mean over attempts: a (1, 0), b (0.5, 0.5) -> 0.5; Pass@2: a solved once -> 1, b never -> 0
    assert "python: compat Pass@1 0.5000" in python and "compat Pass@2 0.5000" in python
    assert "java: compat Pass@1 1.0000" in java and "strict Pass@2 1.0000" in java
    assert flagged == "  CONTAMINATED attempts (1; golden files opened): a.a2"


# ----------------------------------------------------------------------------- hooks (issue 37)


def test_the_command_adapter_declares_its_program_and_probe(tmp_path: Path) -> None:
    """The run asks every adapter the same questions; only the command adapter answers with
    its template (it used to be `name == "command"` branches in the run)."""
    command, codex = adapter("command"), adapter("codex")
    template = "python3 -m agent --ws {workspace} '{prompt}'"
    assert command.takes_command and not codex.takes_command
    assert command.program("/usr/bin/python3", template) == [
        "python3",
        "-m",
        "agent",
        "--ws",
        "{workspace}",
        "{prompt}",
    ]
    assert command.program("/bin/agent", None) == ["/bin/agent"]
    assert codex.program("/opt/codex", template) == ["/opt/codex"]
    assert command.locate(None, template, tmp_path) == ("python3", "unknown")
    assert command.locate("/bin/true", template, tmp_path) == ("/bin/true", "unknown")
    with pytest.raises(AgentError, match="--agent-cmd TEMPLATE"):
        command.locate(None, None, tmp_path)
    command.check_runnable("/bin/true", "unknown")  # no version to print: runnable is enough
    with pytest.raises(AgentError, match="not an executable"):
        command.check_runnable(str(tmp_path / "missing"), "unknown")
    with pytest.raises(AgentError, match="printed no version"):
        codex.check_runnable("/opt/codex", "unknown")
    codex.check_runnable("/opt/codex", "codex-cli 0.1.0")
    assert command.resolve("true") == shutil.which("true")
    with pytest.raises(AgentError, match="not found"):
        command.resolve("rgbridge-no-such-program")


@pytest.mark.parametrize(
    ("wanted", "line", "matches"),
    [
        ("2.1.332", "2.1.332 (Claude Code)", True),
        ("2.1.332", "codex-cli 2.1.332", True),
        ("0.163.0", "codex-cli 0.163.0-alpha.1", False),
        ("0.163.0-alpha.1", "codex-cli 0.163.0-alpha.1", True),
        ("2.1", "2.1.332 (Claude Code)", False),  # never a prefix
        ("2.1.33", "2.1.332", False),
        ("1.0.0", "unknown", False),
        ("", "1.0.0", False),
        (" 1.0.0 ", "1.0.0", True),
        ("my build", "my build", True),  # a line without a version number: equal as given
    ],
)
def test_version_matching(wanted: str, line: str, matches: bool) -> None:
    from bridge.agents.adapters.probe import version_matches

    assert version_matches(wanted, line) is matches
