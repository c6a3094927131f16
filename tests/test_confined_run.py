"""`rgbridge run` confines its agents (issue 30), end to end: an agent that, before it ever
connects to the bridge (or without connecting at all), tries every reach of
tests/agents/reach_probe.sh — the task's golden test and solution, the tasks folder, the
recordings, the host's temp folder, the Docker socket, the bridge's processes, a process left
behind — reaches none of them under bubblewrap or Docker, and still solves the task through MCP
and scores Pass@1 1.0 in both profiles. `--sandbox none` is the control: the same agent reaches
them, and its row says `unconfined`. The real Claude Code, its Bash tool trying the same reaches,
is in the last test."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.cli import main as rgbridge
from tests.helpers import AGENT, REPO_ROOT, payload, recordings_of, report_of
from tests.scripted_model import Call, Calls, Conversation, Reply, ScriptedModel, read_solution, solve_task_policy

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


def probe_args(tmp_path: Path, out: Path, marker: str) -> list[str]:
    golden, solution = golden_and_solution()
    return [str(golden), str(solution), str(out / "recordings"), str(tmp_path), str(os.getpid()), marker]


@pytest.fixture()
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("sandbox", "mode"), [("bwrap", "solve"), ("docker", "solve"), ("bwrap", "never"), ("none", "never")]
)
def test_a_hostile_agent_reaches_nothing_it_should_not(
    sandbox: str, mode: str, docker_client, tmp_path: Path, no_token: None, monkeypatch: pytest.MonkeyPatch
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
    args.write_text(" ".join([*probe_args(tmp_path, out, marker), key[:10], key[10:]]))
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
    assert report["results"] == [] and "which the bridge keeps from agents" in str(
        report["metadata"]["failed_attempts"]
    ), (code, err)
    assert not list((out / "recordings").rglob("session.json"))


def hostile_claude_policy(marker: str, args: list[str]) -> Any:
    """Claude Code's Bash tool runs the probe first (before any MCP call), then the task is solved
    through the bridge as an honest agent would."""
    script = PROBE.read_text()
    solve = solve_task_policy(TASK, read_solution(TASK_DIR))
    command = "sh -c " + _quote(script) + " probe " + " ".join(_quote(a) for a in args)

    def policy(conv: Conversation) -> Calls | Reply:
        if not conv.tools:
            return Reply("OK")
        if not conv.calls_to("Bash"):
            return Calls((Call("Bash", {"command": command, "description": "look around"}),))
        return solve(conv)

    return policy


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.mark.docker
def test_real_claude_code_bash_reaches_nothing_and_it_still_scores(
    docker_client, tmp_path: Path, no_token: None, monkeypatch: pytest.MonkeyPatch, agent_cli
) -> None:
    agent_cli("claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scripted-test-key")
    for var in ("ANTHROPIC_BASE_URL", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)
    out, marker = tmp_path / "out", "rgbridge-left-" + secrets.token_hex(6)
    try:
        with ScriptedModel(hostile_claude_policy(marker, probe_args(tmp_path, out, marker))) as model:
            code = rgbridge(
                ["run", "--agent", "claude-code", "--tasks", TASK, "--time-limit", "300", "--model",
                 "scripted-model", "--model-base-url", model.base_url, "--output-dir", str(out), "--run-id",
                 "claude-hostile", "--retries", "0"]
            )  # fmt: skip
            results = [r for r in model.agent_requests() if r.conversation and r.conversation.calls_to("Bash")]
        left = with_marker(marker)
    finally:
        for pid in with_marker(marker):
            os.kill(pid, signal.SIGKILL)
    assert code == 0
    assert results, "the scripted model never saw its Bash call's result"
    output = results[-1].conversation.calls_to("Bash")[0].text  # type: ignore[union-attr]
    found = findings(output)
    assert {r: found.get(r) for r in REACHES} == dict.fromkeys(REACHES, "no"), output
    assert left == []
    assert not (tmp_path / f"planted-{marker}").exists() and not (out / "recordings" / f"planted-{marker}").exists()
    golden, _ = golden_and_solution()
    assert golden.read_text() not in output
    (row,) = report_of(out)["results"]
    assert row["run"]["sandbox"]["confined"] is True and row["contaminated"] is False
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
