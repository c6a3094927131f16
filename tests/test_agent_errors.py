"""Agent failures are classified, never scored as the agent's work (issue 31, item 1).

The real Claude Code and Codex CLIs against the scripted endpoint answering 401, 429, 529 or a
truncated stream (tests/scripted_model.py `Fail`, `Truncate`), a `command` agent that kills itself
with a signal, one whose binary is missing and one that reports a rate limit in Claude Code's
result shape: each attempt is `agent_error` of the right class, recorded (its session quit, its
recording sealed), retried after the backoff with the failed try kept aside, in no mean, listed in
`errored_attempts`, and the run exits `EXIT_AGENT_ERRORS` once the retries are spent
(`--allow-errors`: 0). A missing key or a CLI without a version is refused before any agent starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.adapters import claude_code, codex
from bridge.agents.adapters.failures import classify_attempt, crash_or_missing, from_status
from bridge.agents.run.runner import EXIT_AGENT_ERRORS
from bridge.cli import main as rgbridge
from bridge.reports.leaderboard import leaderboard_lines
from bridge.scoring.run.reporting import RunWriter, build_entry
from tests.helpers import SECRET, make_score, no_secret_on_disk, report_of
from tests.scripted_model import Fail, ScriptedModel, Truncate

CLI_BINARY = {"claude-code": "claude", "codex": "codex"}
PY = sys.executable


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "CODEX_HOME", "ANTHROPIC_AUTH_TOKEN", "CODEX_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def run(out: Path, *args: str) -> int:
    return rgbridge(["run", "--tasks", "kv-ledger", "--output-dir", str(out), "--run-id", "errs", *args])


def recordings(out: Path, aside: bool = False) -> list[Path]:
    found = sorted(p.parent for p in (out / "recordings").rglob("session.json"))
    return [p for p in found if (".agent-error-" in str(p)) == aside]


def assert_recorded_not_scored(rec: Path, cls: str) -> None:
    record = json.loads((rec / "session.json").read_text())
    assert record["state"] == "quit" and record["quit_reason"].startswith(f"agent_error ({cls})")
    kinds = [json.loads(line)["type"] for line in (rec / "events.jsonl").read_text().splitlines()]
    assert "agent_run" in kinds and "submit" not in kinds and "score" not in kinds
    assert (rec / "integrity.json").is_file() and (rec / "agent" / "prompt.txt").is_file()
    assert rgbridge(["recordings", "verify", str(rec)]) == 0


def assert_errored_row(out: Path, cls: str, retries: int) -> dict[str, Any]:
    report = report_of(out)
    (row,) = report["results"]
    assert row["outcome"] == "agent_error", row.get("agent_error") or row.get("outcome")
    assert row["agent_error"]["class"] == cls and row["agent_error"]["retries"] == retries, row["agent_error"]
    assert row["run"]["retries"] == retries and len(row["run"]["retried"]) == retries
    assert all(t["class"] == cls for t in row["run"]["retried"])
    assert "rgbridge" not in row and "pass_at_1" not in row  # nothing scored
    # in no mean: the summaries count no repo, the run lists it as errored
    assert report["summary"]["total_repos"] == 0 and report["strict_summary"]["counted_repos"] == 0
    assert report["strict_summary"]["avg_pass_at_1"] == 0.0 and report["outcomes"] == {
        "kv-ledger.a1": {"compat": "agent_error"}
    }
    assert report["metadata"]["errored_attempts"] == ["kv-ledger.a1"]
    (rec,) = recordings(out)
    assert_recorded_not_scored(rec, cls)
    # each failed try kept aside, its recording too
    assert sorted(p.name for p in (out / "attempts" / "kv-ledger").iterdir()) == ["a1"] + [
        f"a1.agent-error-{n}" for n in range(1, retries + 1)
    ]
    assert len(recordings(out, aside=True)) == retries
    return row


# ----------------------------------------------------------------------------- the command adapter


def test_command_agent_killed_by_a_signal_is_retried_then_exits_non_zero(
    docker_client, tmp_path: Path, keys: None, capsys
) -> None:
    out = tmp_path / "out"
    crash = f"{PY} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'"
    code = run(out, "--agent", "command", "--agent-cmd", crash, "--retries", "2", "--retry-backoff", "0.2,0.3")
    printed = capsys.readouterr()
    assert code == EXIT_AGENT_ERRORS == 3
    row = assert_errored_row(out, "cli_crash", 2)
    assert row["agent_error"]["message"].startswith("killed by signal 9") and row["run"]["exit_code"] == -9
    assert "retry 1 of 2 in 0.2s" in printed.err and "retry 2 of 2 in 0.3s" in printed.err
    text = " ".join(printed.out.split())  # the terminal wraps long lines
    assert "ERRORED attempts (1; agent failures, not scored, not in the means): kv-ledger.a1 (cli_crash)" in text
    assert "stayed agent_error after 2 retries" in text
    # `--allow-errors` accepts them
    assert run(tmp_path / "ok", "--agent", "command", "--agent-cmd", crash, "--retries", "0", "--allow-errors") == 0
    assert_errored_row(tmp_path / "ok", "cli_crash", 0)


def test_command_agent_missing_binary_and_reported_rate_limit(docker_client, tmp_path: Path, keys: None) -> None:
    missing = "/bin/sh -c 'exec /nonexistent/agent-cli'"
    assert run(tmp_path / "missing", "--agent", "command", "--agent-cmd", missing, "--retries", "0") == 3
    assert_errored_row(tmp_path / "missing", "cli_missing", 0)
    # an agent whose stream is Claude Code's shape reporting the provider's 429, with a cost
    agent = tmp_path / "limited.py"
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "api_error_status": 429,
        "result": "API Error: Request rejected (429)",
        "total_cost_usd": 0.25,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 2,
            "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 1,
        },
    }
    agent.write_text(f"import json, sys\nprint(json.dumps({result!r}))\nsys.exit(1)\n")
    out = tmp_path / "limited"
    assert run(out, "--agent", "command", "--agent-cmd", f"{PY} {agent}", "--retries", "1", "--retry-backoff", "0") == 3
    row = assert_errored_row(out, "rate_limit", 1)
    assert row["run"]["tokens"] == {"input": 10, "output": 2, "cache_read": 5, "cache_write": 1}
    meta = report_of(out)["metadata"]
    # both tries cost, both counted (the run, the task)
    assert meta["cost_usd"] == 0.5 and meta["tokens"] == {"input": 20, "output": 4, "cache_read": 10, "cache_write": 2}
    assert meta["by_task"]["kv-ledger"]["cost_usd"] == 0.5


# ----------------------------------------------------------------------------- the real CLIs


REAL_CASES = [
    ("claude-code", 401, "auth"),
    ("claude-code", 529, "provider_unavailable"),
    ("claude-code", "truncated", "provider_unavailable"),
    ("codex", 429, "rate_limit"),
    ("codex", "truncated", "provider_unavailable"),
]


@pytest.mark.parametrize(("agent", "answer", "cls"), REAL_CASES)
def test_real_cli_provider_failures_are_agent_errors(
    agent: str, answer: int | str, cls: str, tmp_path: Path, keys: None, capsys, agent_cli
) -> None:
    agent_cli(CLI_BINARY[agent])
    action = Truncate() if answer == "truncated" else Fail(int(answer), "scripted failure")
    out = tmp_path / "out"
    with ScriptedModel(lambda conv: action) as model:
        base = model.base_url if agent == "claude-code" else model.openai_base_url
        code = run(
            out,
            "--agent",
            agent,
            "--model",
            "scripted-model",
            "--model-base-url",
            base,
            "--time-limit",
            "120",
            "--retries",
            "1",
            "--retry-backoff",
            "0.5",
        )
        assert model.agent_requests(), "the CLI never reached the endpoint"
    printed = capsys.readouterr().out
    assert code == EXIT_AGENT_ERRORS, printed
    row = assert_errored_row(out, cls, 1)
    assert row["agent"]["model"] == "scripted-model"  # never Claude Code's `<synthetic>`
    assert row["agent"]["version"] not in ("", "unknown")
    no_secret_on_disk(out)


# ----------------------------------------------------------------------------- refused before any agent


def test_missing_key_is_refused_before_any_agent(
    docker_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for agent, var in (("claude-code", "ANTHROPIC_API_KEY"), ("codex", "OPENAI_API_KEY")):
        out = tmp_path / agent
        capsys.readouterr()
        assert run(out, "--agent", agent) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "no model key" in err and var in err and "no agent was started" in err
        assert not (out / "attempts").exists() and not (out / "recordings").exists()
    # an endpoint of the user's may need no key: not refused for that
    assert run(tmp_path / "own", "--agent", "codex", "--model-base-url", "http://127.0.0.1:9/v1", "--show-config") == 0


def test_cli_without_a_version_is_refused(docker_client, tmp_path: Path, keys: None, capsys) -> None:
    silent = tmp_path / "claude"
    silent.write_text("#!/bin/sh\nexit 1\n")
    silent.chmod(0o755)
    out = tmp_path / "out"
    assert run(out, "--agent", "claude-code", "--agent-bin", str(silent)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "printed no version" in err and "no agent was started" in err
    assert not (out / "attempts").exists()
    # the command adapter has no version to print, but its binary must be there
    out = tmp_path / "command"
    assert run(out, "--agent", "command", "--agent-cmd", "/nonexistent/agent {prompt}") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'/nonexistent/agent' is not an executable" in err and not (out / "attempts").exists()


# ----------------------------------------------------------------------------- the classifiers


def test_claude_code_result_events_are_classified() -> None:
    def failure(**result: Any) -> str | None:
        parsed = claude_code.parse([{"type": "result", "is_error": True, **result}], "p")
        return parsed.failure.cls if parsed.failure else None

    # as Claude Code 2.1.332 printed them against the scripted endpoint
    assert failure(api_error_status=401, result="Failed to authenticate. API Error: 401 x") == "auth"
    assert failure(api_error_status=429, result="API Error: Request rejected (429)") == "rate_limit"
    assert (
        failure(api_error_status=529, result="API Error: 529 x. This is a server-side issue") == "provider_unavailable"
    )
    assert (
        failure(
            api_error_status=None,
            api_error="connection_failed",
            result="API Error: Connection to the API was lost (ECONNRESET).",
        )
        == "provider_unavailable"
    )
    assert failure(result="Not logged in · Please run /login") == "auth"
    assert failure(result="Prompt is too long") == "context_overflow"
    assert failure(subtype="error_max_turns", result="") is None  # the agent's own end
    parsed = claude_code.parse([{"type": "assistant", "message": {"model": "<synthetic>", "content": []}}], "p")
    assert parsed.model is None


def test_codex_failed_turns_are_classified() -> None:
    def failure(message: str) -> str | None:
        events = [
            {"type": "error", "message": "Reconnecting... 1/5"},
            {"type": "turn.failed", "error": {"message": message}},
        ]
        parsed = codex.parse(events, "p")
        return parsed.failure.cls if parsed.failure else None

    # as Codex 0.163.0 printed them against the scripted endpoint
    assert failure("unexpected status 401 Unauthorized: x, url: http://127.0.0.1:1/v1/responses") == "auth"
    assert failure("exceeded retry limit, last status: 429 Too Many Requests") == "rate_limit"
    assert failure("unexpected status 529 <unknown status code>: x") == "provider_unavailable"
    assert (
        failure("stream disconnected before completion: stream closed before response.completed")
        == "provider_unavailable"
    )
    assert failure("Missing environment variable: `OPENAI_API_KEY`.") == "auth"
    assert failure("something no one expected") == "cli_crash"
    ok = codex.parse(
        [{"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 40, "output_tokens": 7}}], "p"
    )
    assert ok.failure is None and ok.token_split() == {"input": 60, "output": 7, "cache_read": 40, "cache_write": None}


def test_exits_and_statuses() -> None:
    assert [from_status(s) for s in (401, 403, 429, 413, 500, 503, 529, 404, "x", True)] == [
        "auth", "auth", "rate_limit", "context_overflow", "provider_unavailable", "provider_unavailable",
        "provider_unavailable", None, None, None,
    ]  # fmt: skip
    assert crash_or_missing("exit", -11, "", answered=True).cls == "cli_crash"  # type: ignore[union-attr]
    assert crash_or_missing("exit", 127, "sh: 1: exec: x: not found", answered=False).cls == "cli_missing"  # type: ignore[union-attr]
    assert crash_or_missing("exit", 1, "boom", answered=False).cls == "cli_crash"  # type: ignore[union-attr]
    assert crash_or_missing("exit", 1, "", answered=True) is None  # it answered: the agent's end
    common = {"answered": False, "errors": [], "stderr": "Error: 429 Too Many Requests"}
    assert classify_attempt(None, how="exit", exit_code=1, **common).cls == "rate_limit"  # type: ignore[union-attr,arg-type]
    # cut by the time limit or stopped: the agent's work is scored, whatever it said
    assert classify_attempt(None, how="time_limit", exit_code=-15, **common) is None  # type: ignore[arg-type]
    assert classify_attempt(None, how="exit", exit_code=0, **common) is None  # type: ignore[arg-type]


def test_agent_errors_are_in_no_mean(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "mixed")
    scored = {**build_entry(make_score("a", compat_passed=4, strict_passed=4)), "attempt": 1}
    writer.record(scored, key="a.a1")
    errored = {"repo_name": "a", "lang": "python", "outcome": "agent_error", "attempt": 2}
    errored["agent_error"] = {"class": "rate_limit", "message": "429", "retries": 2}
    writer.record(errored, key="a.a2")
    report = json.loads(writer.finalize({"attempts": 2}).read_text())
    assert report["summary"]["total_repos"] == 1 and report["summary"]["avg_pass_at_1"] == 1.0
    assert report["strict_summary"]["avg_pass_at_1"] == 1.0 and report["strict_summary"]["counted_repos"] == 1
    assert report["summary"]["deployment_success_rate"] == 1.0
    assert report["outcomes"]["a.a2"] == {"compat": "agent_error"}
    lines = leaderboard_lines(report)
    # Pass@2 over the attempts the agent made: the errored one is not a failed one (1 of 1 tried)
    assert "strict Pass@1 1.0000" in lines[1]
    assert lines[-1] == "  ERRORED attempts (1; agent failures, not scored, not in the means): a.a2 (rate_limit)"


def test_real_claude_code_not_logged_in_is_an_auth_error(
    tmp_path: Path, keys: None, monkeypatch, capsys, agent_cli
) -> None:
    """The issue's first run: Claude Code with no key answers "Not logged in · Please run /login"
    (an endpoint of the user's was given, so the run did not refuse): an `auth` agent_error, not
    an empty workspace scored 0, and the run exits non-zero."""
    agent_cli("claude")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    out = tmp_path / "out"
    with ScriptedModel(lambda conv: Fail(500, "never reached")) as model:
        code = run(out, "--agent", "claude-code", "--model-base-url", model.base_url, "--retries", "0")
    assert code == EXIT_AGENT_ERRORS, capsys.readouterr().out
    row = assert_errored_row(out, "auth", 0)
    assert "Not logged in" in row["agent_error"]["message"]
