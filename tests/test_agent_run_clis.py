"""`rgbridge run` with the real Claude Code and Codex binaries (from their wheels) against the
scripted model endpoint on loopback (tests/scripted_model.py): two shipped tasks × 2 attempts,
each row Pass@1 1.0 in both profiles, trajectories valid ATIF with the model the CLI reported,
keys only in the environment; a Claude Code that stalls is cut at the time limit and scored.

The adapters' argv, environment and config files are the project's own (bridge/agents/); nothing
here builds a command line."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.cli import main as rgbridge
from tests.helpers import (
    SECRET,
    agent_window,
    assert_atif,
    assert_held_through_the_agent,
    events,
    no_secret_on_disk,
    recordings_of,
    report_of,
)
from tests.scripted_model import CLI_BINARY, ScriptedModel, by_task_policy

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS = ("kv-ledger", "word-duel")
#: the MCP config each adapter writes into the attempt's HOME
MCP_CONFIG = {"claude-code": ".rgbridge-mcp.json", "codex": ".codex/config.toml"}
TIMINGS: dict[str, list[dict[str, Any]]] = {}


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.docker
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_real_cli_two_tasks_two_attempts(
    agent: str, docker_client, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None, capsys
) -> None:
    agent_cli(CLI_BINARY[agent])  # skips (or fails under RGBRIDGE_REQUIRE_AGENT_CLIS=1) without the binary
    out = tmp_path / "out"
    with ScriptedModel(by_task_policy()) as model:
        base = model.base_url if agent == "claude-code" else model.openai_base_url
        started = time.monotonic()
        code = rgbridge(
            [
                "run",
                "--agent",
                agent,
                "--tasks",
                *TASKS,
                "--attempts",
                "2",
                "--workers",
                "2",
                "--time-limit",
                "300",
                "--model",
                "scripted-model",
                "--model-base-url",
                base,
                "--output-dir",
                str(out),
                "--run-id",
                f"{agent}-run",
            ]
        )
        elapsed = time.monotonic() - started
        assert not model.errors, model.errors
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = report_of(out)
    rows = report["results"]
    assert sorted((r["repo_name"], r["attempt"]) for r in rows) == [(t, k) for t in TASKS for k in (1, 2)], report[
        "metadata"
    ]["failed_attempts"]
    for row in rows:
        assert row["agent"]["name"] == agent and row["agent"]["version"] not in ("", "unknown")
        assert row["agent"]["model"] == "scripted-model"  # as the CLI reported it (or asked for, Codex)
        for profile in ("compat", "strict"):
            p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
            assert p1["total"] > 0 and p1["passed"] == p1["total"], (row["repo_name"], profile, p1)
        assert row["contaminated"] is False
        # the default sandbox (`--sandbox auto`: bubblewrap, installed by scripts/setup.sh) confined it
        assert row["run"]["sandbox"]["kind"] == "bwrap" and row["run"]["sandbox"]["confined"] is True
        assert row["run"]["submitted_by"] == "agent" and row["run"]["tool_calls"] >= 4
        trajectory = assert_atif(Path(row["run"]["trajectory"]))
        names = [c.function_name for s in trajectory.steps for c in s.tool_calls or []]
        assert "mcp__rgbridge__submit_task" in names, names
        assert trajectory.final_metrics.total_prompt_tokens, "tokens as the CLI reported them"
        # the CLI reached the attempt's server (started by the run, outside the agent) over HTTP
        # with its own credential; that server held the session from its start to the agent's end
        home = out / "attempts" / row["repo_name"] / f"a{row['attempt']}" / "home"
        config = (home / MCP_CONFIG[agent]).read_text()
        assert re.search(r"http://127\.0\.0\.1:[0-9]+/mcp", config) and "Bearer rgbc1." in config, config
        assert '"command"' not in config and "command =" not in config
        assert_held_through_the_agent(
            Path(row["run"]["recording"]), agent_window(out, row["repo_name"], row["attempt"])
        )
    assert report["summary"]["avg_pass_at_1"] == 1.0 and report["strict_summary"]["avg_pass_at_1"] == 1.0
    assert f"{agent} " in printed and "compat Pass@2 1.0000" in printed
    for rec in recordings_of(out):
        assert sum(1 for e in events(rec) if e["type"] == "score") == 1
        record = json.loads((rec / "session.json").read_text())
        assert record["submission"]["signal"] == "mcp" and record["bridge_version"].startswith("0.4.0")
    no_secret_on_disk(out)
    TIMINGS[agent] = [{"elapsed_run": round(elapsed, 1), **r["run"]} for r in rows]
    print(
        json.dumps(
            {
                agent: [
                    {k: t[k] for k in ("wall_seconds", "agent_seconds", "scoring_seconds", "overhead_seconds")}
                    for t in TIMINGS[agent]
                ]
            }
        )
    )


@pytest.mark.docker
def test_real_claude_code_stalling_is_cut_at_the_time_limit(
    docker_client, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    agent_cli("claude")
    out = tmp_path / "out"
    with ScriptedModel(by_task_policy(then="hang")) as model:
        assert (
            rgbridge(
                [
                    "run",
                    "--agent",
                    "claude-code",
                    "--tasks",
                    "kv-ledger",
                    "--time-limit",
                    "60",
                    "--model",
                    "scripted-model",
                    "--model-base-url",
                    model.base_url,
                    "--output-dir",
                    str(out),
                    "--run-id",
                    "stall",
                ]
            )
            == 0
        )
    (row,) = report_of(out)["results"]
    assert row["run"]["ended"] == "time_limit" and row["run"]["submitted_by"] == "time_limit"
    assert row["rgbridge"]["profiles"]["strict"]["pass_at_1"]["score"] == 1.0  # the files it wrote, scored
    (rec,) = recordings_of(out)
    assert json.loads((rec / "session.json").read_text())["submission"]["signal"] == "time_limit"
    assert_atif(rec / "agent" / "trajectory.json")
