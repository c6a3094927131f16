"""Reproducible, priced rows (issue 31, items 4 and 5): the run's configuration and its hash
(CLI version, model, prompt template hash, time limit, attempts, sandbox, bridge version) in the
report and `config.json`; two runs that differ in the CLI's version or the time limit print
different hashes; `--agent-version` refuses another version; `--resume` refuses a changed
configuration; `--max-cost` stops starting attempts; tokens and cost summed per task and run."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from bridge.agents.run.config import run_config
from bridge.agents.run.options import RunOptions
from bridge.agents.run.runner import EXIT_AGENT_ERRORS
from bridge.cli import main as rgbridge
from bridge.scoring.run.reporting import cost_metadata
from tests.helpers import SECRET, report_of

PY = sys.executable
CRASH = f"{PY} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'"


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)


def show_config(capsys, *args: str) -> dict:
    capsys.readouterr()
    code = rgbridge(["run", "--tasks", "kv-ledger", "--show-config", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def printed_hash(text: str) -> str:
    found = re.search(r"configuration: ([0-9a-f]{64})", text)
    assert found, text
    return found.group(1)


def fake_claude(tmp_path: Path, version: str, real: Path) -> Path:
    """A wrapper around the real Claude Code that says it is another version."""
    wrapper = tmp_path / f"claude-{version}"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "{version} (Claude Code)"; exit 0; fi\nexec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def test_cli_version_and_time_limit_change_the_hash(tmp_path: Path, keys: None, capsys, agent_cli) -> None:
    claude = agent_cli("claude")
    real = show_config(capsys, "--agent", "claude-code")
    assert re.match(r"\d+\.\d+\.\d+ \(Claude Code\)", real["cli_version"]) and len(real["hash"]) == 64
    assert show_config(capsys, "--agent", "claude-code") == real  # the same options, the same configuration
    other = show_config(capsys, "--agent", "claude-code", "--agent-bin", str(fake_claude(tmp_path, "9.9.9", claude)))
    assert other["cli_version"] == "9.9.9 (Claude Code)" and other["hash"] != real["hash"]
    shorter = show_config(capsys, "--agent", "claude-code", "--time-limit", "60")
    assert shorter["time_limit_seconds"] == 60 and shorter["hash"] != real["hash"]
    for key in ("prompt_hash", "bridge_version", "attempts", "sandbox", "model"):
        assert key in real
    # --agent-version: the CLI's own version or nothing
    number = real["cli_version"].split()[0]
    assert show_config(capsys, "--agent", "claude-code", "--agent-version", number)["hash"] == real["hash"]
    capsys.readouterr()
    out = tmp_path / "refused"
    args = ["run", "--agent", "claude-code", "--tasks", "kv-ledger", "--output-dir", str(out)]
    assert rgbridge([*args, "--agent-version", "9.9.9"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--agent-version 9.9.9: " in err and number in err and not (out / "attempts").exists()
    assert rgbridge([*args, "--agent-version", number.rsplit(".", 1)[0]]) == 2  # a prefix is not the version
    wrapper = str(fake_claude(tmp_path, "9.9.9", claude))
    assert show_config(capsys, "--agent", "claude-code", "--agent-bin", wrapper, "--agent-version", "9.9.9")


def run_crash(out: Path, *args: str) -> int:
    return rgbridge(
        ["run", "--agent", "command", "--agent-cmd", CRASH, "--tasks", "kv-ledger", "--output-dir", str(out)]
        + ["--run-id", "cfg", "--retries", "0", "--allow-errors", *args]
    )


def test_runs_print_their_configuration_and_resume_refuses_a_change(
    docker_client, tmp_path: Path, keys: None, capsys
) -> None:
    capsys.readouterr()
    assert run_crash(tmp_path / "a", "--time-limit", "60") == 0
    first = printed_hash(" ".join(capsys.readouterr().out.split()))
    assert run_crash(tmp_path / "b", "--time-limit", "120") == 0
    second = printed_hash(" ".join(capsys.readouterr().out.split()))
    assert first != second
    for folder, digest, limit in ((tmp_path / "a", first, 60), (tmp_path / "b", second, 120)):
        report = report_of(folder)
        config = report["metadata"]["config"]
        assert config["hash"] == digest and config["time_limit_seconds"] == limit
        assert json.loads((folder / "config.json").read_text())["hash"] == digest
        (row,) = report["results"]
        assert row["run"]["config_hash"] == digest and row["run"]["time_limit_seconds"] == limit
        rec = Path(row["run"]["recording"])
        assert json.loads((rec / "agent" / "run_config.json").read_text())["hash"] == digest
    # a resumed run keeps its configuration: a changed prompt template is refused, saying what changed
    template = tmp_path / "prompt.txt"
    template.write_text("Build {task_id}.\n{readme}")
    out = tmp_path / "c"
    assert run_crash(out, "--prompt", "file", "--prompt-file", str(template)) == 0
    assert rgbridge(["run", "--resume", "--output-dir", str(out)]) == 0  # unchanged: resumes
    template.write_text("Build {task_id} well.\n{readme}")
    capsys.readouterr()
    assert rgbridge(["run", "--resume", "--output-dir", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "configuration changed" in err and "prompt_hash" in err


def test_max_cost_stops_starting_attempts(docker_client, tmp_path: Path, keys: None, capsys) -> None:
    agent = tmp_path / "pricey.py"
    result = {
        "type": "result",
        "is_error": True,
        "api_error_status": 429,
        "result": "API Error: Request rejected (429)",
        "total_cost_usd": 0.6,
        "usage": {
            "input_tokens": 100,
            "output_tokens": 10,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 50,
        },
    }
    agent.write_text(f"import json, sys\nprint(json.dumps({result!r}))\nsys.exit(1)\n")
    out = tmp_path / "out"
    code = rgbridge(
        ["run", "--agent", "command", "--agent-cmd", f"{PY} {agent}", "--tasks", "kv-ledger", "word-duel"]
        + ["--retries", "5", "--retry-backoff", "0", "--max-cost", "1.0", "--output-dir", str(out), "--run-id", "cap"]
    )
    printed = " ".join(capsys.readouterr().out.split())
    assert code == EXIT_AGENT_ERRORS
    report = report_of(out)
    meta = report["metadata"]
    # kv-ledger: 0.60 spent, retried once (1.20 spent), then no retry and no word-duel
    (row,) = report["results"]
    assert row["repo_name"] == "kv-ledger" and row["run"]["retries"] == 1
    assert meta["cut_by_cost_cap"] is True and "word-duel.a1" in meta["not_started"]
    assert meta["cost_usd"] == 1.2 and meta["tokens"] == {
        "input": 200,
        "output": 20,
        "cache_read": 0,
        "cache_write": 100,
    }
    assert "cut by the cost cap" in printed and "cost: $1.2000" in printed
    assert not (out / "attempts" / "word-duel").exists()


def test_costs_summed_per_task_and_run() -> None:
    def row(task: str, cost: float | None, tokens: dict, retried: list | None = None) -> dict:
        return {"repo_name": task, "attempt": 1, "run": {"cost_usd": cost, "tokens": tokens, "retried": retried or []}}

    t = {"input": 10, "output": 1, "cache_read": 3, "cache_write": None}
    rows = [
        row("a", 0.5, t, [{"cost_usd": 0.25, "tokens": t}]),
        row("b", 1.0, t),
        row("c", None, {"input": None, "output": None, "cache_read": None, "cache_write": None}),
    ]
    meta = cost_metadata(rows)
    assert meta["cost_usd"] == 1.75
    assert meta["tokens"] == {"input": 30, "output": 3, "cache_read": 9, "cache_write": None}
    assert meta["by_task"]["a"] == {
        "cost_usd": 0.75,
        "tokens": {"input": 20, "output": 2, "cache_read": 6, "cache_write": None},
    }
    assert meta["by_task"]["c"]["cost_usd"] is None and meta["errored_attempts"] == []


def test_configuration_leaves_out_what_changes_no_row() -> None:
    from dataclasses import dataclass

    from bridge.agents.adapters.base import Adapter
    from bridge.agents.adapters.registry import adapter as find_adapter
    from bridge.agents.confine import Limits
    from bridge.agents.run.prompt import bridge_template

    @dataclass
    class Settings:
        adapter: Adapter = find_adapter("codex")
        agent_version: str = "1.2.3"
        sandbox: str = "bwrap"
        agent_binds: tuple[Path, ...] = ()
        limits: Limits = Limits()

    base = {"agent": "codex", "tasks": ["kv-ledger"], "run_id": "x", "recordings": "/r"}
    one = run_config(RunOptions(**base), Settings(), bridge_template())  # type: ignore[arg-type]
    other = run_config(
        RunOptions(**{**base, "run_id": "y", "recordings": "/elsewhere"}, workers=4, retries=0, max_cost=3),
        Settings(),  # type: ignore[arg-type]
        bridge_template(),
    )
    assert one["hash"] == other["hash"]
    changed = run_config(RunOptions(**base, model="gpt-x"), Settings(), bridge_template())  # type: ignore[arg-type]
    assert changed["hash"] != one["hash"]
