"""`rgbridge run` confines its agents (issue 30), end to end: an agent that, before it ever
connects to the bridge (or without connecting at all), tries every reach of
tests/agents/reach_probe.sh — the task's golden test and solution, the tasks folder, the
recordings, the host's temp folder, the Docker socket, the bridge's processes, a process left
behind — reaches none of them under bubblewrap or Docker, and still solves the task through MCP
and scores Pass@1 1.0 in both profiles. `--sandbox none` is the control: the same agent reaches
them, and its row says `unconfined`. The real Claude Code, its Bash tool trying the same reaches,
is in the last test.

Issue 38: the network is closed by default. The probe also tries a service the test opens on the
host's 127.0.0.1 (reached only under `--sandbox none`, which shares the host's network) and lists
the ports listening where it runs: under bubblewrap and Docker only the attempt's doors (its MCP
server, the model endpoint), through which the honest part still solves the task. The real
Claude Code and Codex shells try the same, with `rgbridge run`'s defaults."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.confine.network import stop_listening
from bridge.agents.run.planned import EXIT_UNSCORED
from bridge.cli import main as rgbridge
from tests.helpers import AGENT, REPO_ROOT, payload, recordings_of, report_of
from tests.scripted_model import (
    CLI_BINARY,
    Call,
    Calls,
    Conversation,
    Reply,
    ScriptedModel,
    _shell_call,
    _shell_tool,
    read_solution,
    solve_task_policy,
)

PROBE = REPO_ROOT / "tests" / "agents" / "reach_probe.sh"
HOSTILE = REPO_ROOT / "tests" / "agents" / "hostile_then_solve.sh"
TASK = "kv-ledger"
TASK_DIR = REPO_ROOT / "tasks" / TASK
REACHES = (
    "golden_read",
    "solution_read",
    "tasks_listed",
    "recordings_write",
    "docker_socket",
    "host_pid_signal",
    "bridge_process_seen",
    "loopback_service",
)


def golden_and_solution() -> tuple[Path, Path]:
    golden = sorted((TASK_DIR / "tests").glob("test_*.py"))[0]
    solution = sorted(p for p in (TASK_DIR / "solution").rglob("*") if p.is_file())[0]
    return golden, solution


def with_marker(marker: str) -> list[int]:
    """Host processes whose command line carries `marker` (what an attempt left behind)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def findings(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([a-z_]+)=(yes|no|started)$", text, re.M))


def listening(text: str) -> set[int]:
    """The ports the probe saw listening where it ran (its `listening=` line)."""
    found = re.search(r"^listening=([0-9,]*)$", text, re.M)
    assert found, text[:2000]
    return {int(p) for p in found.group(1).split(",") if p}


def door_ports(rec: Path) -> set[int]:
    return {d["port"] for d in json.loads((rec / "agent" / "confinement.json").read_text())["network"]["doors"]}


@pytest.fixture()
def service() -> Iterator[int]:
    """A service of the test's own on the host's 127.0.0.1: it answers every connection with a line."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                listener.close()
                return
            with conn:
                conn.sendall(b"host-service\n")

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    stop_listening(listener)


def probe_args(tmp_path: Path, out: Path, marker: str, port: int) -> list[str]:
    golden, solution = golden_and_solution()
    return [str(golden), str(solution), str(out / "recordings"), str(tmp_path), str(os.getpid()), marker, str(port)]


@pytest.fixture()
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("sandbox", "mode"), [("bwrap", "solve"), ("docker", "solve"), ("bwrap", "never"), ("none", "never")]
)
def test_a_hostile_agent_reaches_nothing_it_should_not(
    sandbox: str,
    mode: str,
    docker_client,
    tmp_path: Path,
    no_token: None,
    monkeypatch: pytest.MonkeyPatch,
    service: int,
) -> None:
    out, marker = tmp_path / "out", "rgbridge-left-" + secrets.token_hex(6)
    # the run's provider keys: the model gateway holds them on the host (issue 38)
    key = "sk-hostile-test-" + secrets.token_hex(8)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    pay = payload(tmp_path, TASK)
    # the paths the probe tries travel in a file of the test's own (bound read-only as the
    # template names it); named in the template themselves they would be refused as binds
    args = tmp_path / "probe-args"
    args.write_text(" ".join([*probe_args(tmp_path, out, marker, service), key[:10], key[10:]]))
    agent = f"{sys.executable} {AGENT} solve {pay} {{mcp_config}} {{workspace}}"
    cmd = f"sh {HOSTILE} {PROBE} {args} {mode} {agent}"
    try:
        code = rgbridge(
            ["run", "--agent", "command", "--agent-cmd", cmd, "--tasks", TASK, "--time-limit", "180",
             "--sandbox", sandbox, "--output-dir", str(out), "--run-id", "hostile", "--retries", "0"]
        )  # fmt: skip
        left = with_marker(marker)
    finally:
        for pid in with_marker(marker):
            os.kill(pid, signal.SIGKILL)
    assert code == 0
    (row,) = report_of(out)["results"]
    stream = (out / "attempts" / TASK / "a1" / "agent" / "stream.jsonl").read_text()
    found = findings(stream)
    assert set(REACHES) <= set(found) and found["left_behind"] == "started", stream[:2000]
    # confined or not, the agent holds the gateway's placeholder, never the key
    assert found["key_in_env"] == "no" and found["key_in_files"] == "no", found
    golden, solution = golden_and_solution()
    planted = [p for p in (tmp_path / f"planted-{marker}", out / "recordings" / f"planted-{marker}") if p.exists()]
    if sandbox == "none":  # the control: unconfined, every reach works and the row says so
        assert all(found[r] == "yes" for r in REACHES), found
        assert row["run"]["sandbox"]["kind"] == "none" and row["run"]["sandbox"]["confined"] is False
        assert report_of(out)["metadata"]["unconfined"] is True
        assert row["contaminated"] is True  # the golden read was seen, at least
        assert left, "an unconfined agent's setsid grandchild outlives it"
        assert row["run"]["sandbox"]["network"]["mode"] == "host" and service in listening(stream)
        return
    assert {r: found[r] for r in REACHES} == dict.fromkeys(REACHES, "no"), found
    assert planted == [], "a write outside the workspace reached the host"
    assert left == [], "a process of the attempt outlived it"
    assert golden.read_text() not in stream and solution.read_text() not in stream
    assert row["run"]["sandbox"]["kind"] == sandbox and row["run"]["sandbox"]["confined"] is True
    assert report_of(out)["metadata"]["unconfined"] is False
    assert row["contaminated"] is False
    (rec,) = recordings_of(out)
    confinement = json.loads((rec / "agent" / "confinement.json").read_text())
    assert confinement["kind"] == sandbox and confinement["limits"]["pids"] > 0
    # issue 38: its own network; nothing listens there but its two doors (the MCP server, the model gateway)
    assert confinement["network"]["mode"] == "closed" and row["run"]["sandbox"]["network"]["mode"] == "closed"
    assert sorted(d["name"] for d in confinement["network"]["doors"]) == ["mcp", "model"]  # the MCP server, the gateway
    assert listening(stream) == door_ports(rec), stream[:2000]
    assert str(out / "attempts" / TASK / "a1" / "workspace") in confinement["binds"]["rw"]
    for profile in ("compat", "strict"):
        p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
        if mode == "solve":  # the honest part of its work still scores
            assert p1["total"] > 0 and p1["passed"] == p1["total"], (profile, p1)
        else:
            assert p1["passed"] == 0
    if mode == "never":
        assert row["run"]["submitted_by"] == "agent_exit"


def test_a_bind_inside_a_protected_folder_is_refused_before_the_session_opens(
    tmp_path: Path, no_token: None, capsys
) -> None:
    """Naming a golden file in the agent's command would bind it: refused, no session opened."""
    golden, _ = golden_and_solution()
    out = tmp_path / "out"
    code = rgbridge(
        ["run", "--agent", "command", "--agent-cmd", f"cat {golden}", "--tasks", TASK, "--sandbox", "bwrap",
         "--output-dir", str(out), "--run-id", "refused", "--no-preflight"]
    )  # fmt: skip
    err = capsys.readouterr().err
    report = report_of(out)
    assert "which the bridge keeps from agents" in str(report["metadata"]["failed_attempts"]), (code, err)
    (row,) = report["results"]  # issue 38: a row saying why, no score, exit non-zero
    assert row["outcome"] == "infra_error" and "which the bridge keeps from agents" in row["unscored"]
    assert code == EXIT_UNSCORED
    assert not list((out / "recordings").rglob("session.json"))


def hostile_shell_policy(marker: str, args: list[str]) -> Any:
    """The CLI's shell tool (Claude Code's Bash, Codex's exec_command) runs the probe first
    (before any MCP call), then the task is solved through the bridge as an honest agent would."""
    script = PROBE.read_text()
    solve = solve_task_policy(TASK, read_solution(TASK_DIR))
    command = "sh -c " + _quote(script) + " probe " + " ".join(_quote(a) for a in args)

    def policy(conv: Conversation) -> Calls | Reply:
        if not conv.tools:
            return Reply("OK")
        shell = "Bash" if conv.offers("Bash") else _shell_tool(conv)
        if shell is None:
            return Reply("no shell tool")
        if not any("left_behind" in r.text for r in conv.calls_to(shell)):
            if shell == "Bash":
                return Calls((Call("Bash", {"command": command, "description": "look around"}),))
            return Calls((_shell_call(conv, shell, command, None),))
        return solve(conv)

    return policy


def probe_output(model: ScriptedModel) -> str:
    """The probe's findings as the model received them (its shell call's result)."""
    for request in reversed(model.agent_requests()):
        conv = request.conversation
        if conv is None:
            continue
        for shell in ("Bash", "exec_command", "shell", "shell_command"):
            for result in conv.calls_to(shell):
                if "left_behind" in result.text:
                    return result.text
    return ""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.mark.docker
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_real_cli_shell_reaches_nothing_and_it_still_scores(
    agent: str, docker_client, tmp_path: Path, no_token: None, monkeypatch: pytest.MonkeyPatch, agent_cli, service: int
) -> None:
    """`rgbridge run`'s defaults (sandbox auto, network closed): the CLI's own shell tool runs the
    probe, reaches none of it (no service of the host's loopback either, and nothing listens
    where it runs but the doors), and the task is still solved through the doors."""
    agent_cli(CLI_BINARY[agent])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scripted-test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted-test-key")
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)
    out, marker = tmp_path / "out", "rgbridge-left-" + secrets.token_hex(6)
    try:
        with ScriptedModel(hostile_shell_policy(marker, probe_args(tmp_path, out, marker, service))) as model:
            base = model.base_url if agent == "claude-code" else model.openai_base_url
            code = rgbridge(
                ["run", "--agent", agent, "--tasks", TASK, "--time-limit", "300", "--model",
                 "scripted-model", "--model-base-url", base, "--output-dir", str(out), "--run-id",
                 f"{agent}-hostile", "--retries", "0"]
            )  # fmt: skip
            output = probe_output(model)
        left = with_marker(marker)
    finally:
        for pid in with_marker(marker):
            os.kill(pid, signal.SIGKILL)
    assert code == 0
    assert output, "the scripted model never saw its shell call's result"
    found = findings(output)
    assert {r: found.get(r) for r in REACHES} == dict.fromkeys(REACHES, "no"), output
    assert left == []
    assert not (tmp_path / f"planted-{marker}").exists() and not (out / "recordings" / f"planted-{marker}").exists()
    golden, _ = golden_and_solution()
    assert golden.read_text() not in output
    (row,) = report_of(out)["results"]
    assert row["run"]["sandbox"]["confined"] is True and row["contaminated"] is False
    (rec,) = recordings_of(out)
    doors = json.loads((rec / "agent" / "confinement.json").read_text())["network"]["doors"]
    assert row["run"]["sandbox"]["network"]["mode"] == "closed"
    assert sorted(d["name"] for d in doors) == ["mcp", "model"]  # the MCP server, the model gateway
    assert listening(output) == door_ports(rec), output
    for profile in ("compat", "strict"):
        p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
        assert p1["total"] > 0 and p1["passed"] == p1["total"], (profile, p1)


@pytest.mark.docker
def test_an_attempt_over_its_disk_limit_ends_as_resource_limit_and_is_scored(
    docker_client, tmp_path: Path, no_token: None
) -> None:
    out = tmp_path / "out"
    fill = "head -c 8000000 /dev/zero > {workspace}/filler.bin; sleep 120"
    code = rgbridge(
        ["run", "--agent", "command", "--agent-cmd", f"sh -c '{fill}'", "--tasks", TASK, "--time-limit", "120",
         "--sandbox", "bwrap", "--agent-disk", "4M", "--output-dir", str(out), "--run-id", "filler"]
    )  # fmt: skip
    assert code == 0
    report = report_of(out)
    (row,) = report["results"]
    assert row["run"]["ended"] == "resource_limit" and row["run"]["sandbox"]["limit_hit"] == "workspace_bytes"
    assert row["run"]["submitted_by"] == "resource_limit" and row["outcome"] != "agent_error"
    assert row["run"]["sandbox"]["limits"]["workspace_bytes"] == 4 * 1024**2
    assert report["metadata"]["config"]["limits"]["workspace_bytes"] == 4 * 1024**2
    assert row["run"]["agent_seconds"] < 100  # ended by the limit, not the clock
