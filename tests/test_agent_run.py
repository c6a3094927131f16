"""`rgbridge run` end to end with the `command` adapter driving a scripted agent built on the `mcp`
SDK's own client (tests/agents/mcp_sdk_agent.py): solved attempts scored in both profiles, an
agent cut at the time limit (`time_limit`), one ending without submitting (`agent_exit`),
`--resume` after a Ctrl-C with no attempt scored twice; trajectories validated by the `atif`
package's models; no API key in any file the run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.agents.run.planned import EXIT_UNSCORED
from bridge.cli import main as rgbridge
from tests.helpers import (
    SECRET,
    agent_cmd,
    assert_atif,
    events,
    no_secret_on_disk,
    payload,
    recordings_of,
    report_of,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def assert_agent_beside_files(rec: Path, tmp_path: Path, capsys) -> None:
    """`rgbridge timeline` and the HTML report show the agent's steps among the file events."""
    capsys.readouterr()
    assert rgbridge(["timeline", str(rec), "--json"]) == 0
    timeline = json.loads(capsys.readouterr().out)
    kinds = [e["kind"] for e in timeline["entries"]]
    assert "agent" in kinds and kinds.index("agent") < kinds.index("submit"), kinds  # in time order
    buckets = timeline["histogram"]["buckets"]
    assert sum(b["agent"] for b in buckets) == kinds.count("agent")  # per bucket beside the file events
    assert sum(b["total"] for b in buckets) >= 3
    assert rgbridge(["timeline", str(rec)]) == 0
    assert "agent steps:" in capsys.readouterr().out
    assert timeline["agent"]["tool_calls"] >= 3
    html = tmp_path / "report.html"
    assert rgbridge(["report", str(rec), "--html", str(html)]) == 0
    page = html.read_text()
    assert "<h3>Agent</h3>" in page and "mcp__rgbridge__submit_task" in page


@pytest.fixture()
def keyed_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)


@pytest.mark.docker
def test_command_agent_two_tasks_two_attempts(docker_client, tmp_path: Path, keyed_env: None, capsys) -> None:
    out = tmp_path / "out"
    # One payload holding both tasks' files would collide; each task gets its own through a folder map.
    files = {t: json.loads(payload(tmp_path, t).read_text()) for t in ("kv-ledger", "word-duel")}
    combined = tmp_path / "payloads.json"
    combined.write_text(json.dumps(files))
    code = rgbridge(
        [
            "run",
            "--agent",
            "command",
            "--agent-cmd",
            agent_cmd("solve-by-task", combined),
            "--tasks",
            "kv-ledger",
            "word-duel",
            "--attempts",
            "2",
            "--workers",
            "2",
            "--time-limit",
            "120",
            "--output-dir",
            str(out),
            "--run-id",
            "two-by-two",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    report = report_of(out)
    rows = report["results"]
    assert sorted((r["repo_name"], r["attempt"]) for r in rows) == [
        ("kv-ledger", 1),
        ("kv-ledger", 2),
        ("word-duel", 1),
        ("word-duel", 2),
    ]
    for row in rows:
        assert row["agent"] == {"name": "command", "version": "unknown", "model": "scripted-mcp-sdk"}
        for profile in ("compat", "strict"):
            p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
            assert p1["total"] > 0 and p1["passed"] == p1["total"], (row["repo_name"], profile, p1)
        assert row["run"]["submitted_by"] == "agent" and row["run"]["tool_calls"] >= 3
        assert row["contaminated"] is False
        trajectory = assert_atif(Path(row["run"]["trajectory"]))
        assert trajectory.agent.model_name == "scripted-mcp-sdk"
        assert any(
            c.function_name == "mcp__rgbridge__submit_task" for s in trajectory.steps for c in s.tool_calls or []
        )
    assert report["summary"]["avg_pass_at_1"] == 1.0 and report["strict_summary"]["avg_pass_at_1"] == 1.0
    assert report["metadata"]["bridge_version"].startswith("0.4.0")
    assert "compat Pass@2 1.0000" in printed and "strict Pass@2 1.0000" in printed
    # Each attempt its own session, recording and workspace; the agent's files kept in the recording.
    recs = recordings_of(out)
    assert len(recs) == 4
    for rec in recs:
        assert (rec / "agent" / "trajectory.json").is_file() and (rec / "agent" / "stream.jsonl").is_file()
        assert sum(1 for e in events(rec) if e["type"] == "score") == 1
    assert rgbridge(["recordings", "verify", str(recs[0])]) == 0
    assert_agent_beside_files(recs[0], tmp_path, capsys)
    no_secret_on_disk(out)
    # `rgbridge report OUT` prints the leaderboard line
    capsys.readouterr()
    assert rgbridge(["report", str(out)]) == 0
    line = capsys.readouterr().out
    assert "command unknown + scripted-mcp-sdk" in line and "python: compat Pass@1 1.0000" in line


@pytest.mark.docker
def test_hang_is_cut_and_exit_is_submitted(docker_client, tmp_path: Path, keyed_env: None) -> None:
    pay = payload(tmp_path, "kv-ledger")
    hang_out, exit_out = tmp_path / "hang", tmp_path / "exit"
    started = time.monotonic()
    assert (
        rgbridge(
            [
                "run",
                "--agent",
                "command",
                "--agent-cmd",
                agent_cmd("hang", pay),
                "--tasks",
                "kv-ledger",
                "--time-limit",
                "25",
                "--output-dir",
                str(hang_out),
                "--run-id",
                "hang",
            ]
        )
        == 0
    )
    assert time.monotonic() - started < 240
    assert (
        rgbridge(
            [
                "run",
                "--agent",
                "command",
                "--agent-cmd",
                agent_cmd("exit", pay),
                "--tasks",
                "kv-ledger",
                "--time-limit",
                "120",
                "--output-dir",
                str(exit_out),
                "--run-id",
                "exit",
            ]
        )
        == 0
    )
    for out, signal_name, ended in ((hang_out, "time_limit", "time_limit"), (exit_out, "agent_exit", "exit")):
        (row,) = report_of(out)["results"]
        assert row["run"]["submitted_by"] == signal_name and row["run"]["ended"] == ended
        assert row["rgbridge"]["profiles"]["strict"]["pass_at_1"]["score"] == 1.0  # scored as left
        (rec,) = recordings_of(out)
        record = json.loads((rec / "session.json").read_text())
        assert record["submission"]["signal"] == signal_name
        kinds = [e["type"] for e in events(rec)]
        assert kinds.index("agent_run") < kinds.index("submit") < kinds.index("score")
        (agent_run,) = [e for e in events(rec) if e["type"] == "agent_run"]
        assert agent_run["ended"] == ended and agent_run["agent"] == "command"
        assert_atif(rec / "agent" / "trajectory.json")
    hang_row = report_of(hang_out)["results"][0]["run"]
    assert 25 <= hang_row["agent_seconds"] < 40
    # the hanging agent's whole process group is gone (its MCP server included)
    out = subprocess.run(["pgrep", "-f", str(hang_out)], capture_output=True, text=True)
    assert out.stdout.strip() == ""


@pytest.mark.docker
def test_on_exit_abandon_quits_without_scoring(docker_client, tmp_path: Path, keyed_env: None) -> None:
    pay, out = payload(tmp_path, "kv-ledger"), tmp_path / "out"
    assert (
        rgbridge(
            [
                "run",
                "--agent",
                "command",
                "--agent-cmd",
                agent_cmd("exit", pay),
                "--tasks",
                "kv-ledger",
                "--on-exit",
                "abandon",
                "--output-dir",
                str(out),
                "--run-id",
                "abandon",
            ]
        )
        == EXIT_UNSCORED  # issue 38: a planned attempt without a score
    )
    report = report_of(out)
    assert "abandoned" in report["metadata"]["failed_attempts"]["kv-ledger.a1"]
    (row,) = report["results"]
    assert row["outcome"] == "not_run" and "abandoned" in row["unscored"]
    (rec,) = recordings_of(out)
    assert json.loads((rec / "session.json").read_text())["state"] == "quit"


@pytest.mark.docker
def test_resume_after_ctrl_c_scores_no_attempt_twice(docker_client, tmp_path: Path, keyed_env: None) -> None:
    pay, out = payload(tmp_path, "kv-ledger"), tmp_path / "out"
    hold = tmp_path / "hold"
    hold.write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "bridge.cli",
        "run",
        "--agent",
        "command",
        "--agent-cmd",
        # the runner passes its agents only an allow-list of the environment: the hold goes in the command
        f"env MCP_SDK_AGENT_HOLD={hold} " + agent_cmd("solve", pay),
        "--tasks",
        "kv-ledger",
        "--attempts",
        "2",
        "--time-limit",
        "300",
        "--output-dir",
        str(out),
        "--run-id",
        "resumed",
        # the scripted agent and the test talk through files of the test's own folder (`hold`,
        # `hold.first`), which a sandbox rightly hides: this test is about Ctrl-C and resume
        "--sandbox",
        "none",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = out / "intermediate" / "resumed" / "kv-ledger.a1.json"
    second = out / "attempts" / "kv-ledger" / "a2"

    def held() -> bool:  # the second agent wrote its files and waits for `hold` to go
        stream = second / "agent" / "stream.jsonl"
        return stream.exists() and '"subtype": "held"' in stream.read_text()

    try:
        deadline = time.monotonic() + 240
        while not held():
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the second attempt's agent was not held in time"
            time.sleep(0.5)
        # the second attempt is certainly in flight: its agent cannot end while `hold` exists
        assert json.loads((second / "state.json").read_text())["phase"] == "running"
        assert first.exists()  # the first attempt was scored before the second started
        first_bytes = first.read_bytes()
        proc.send_signal(signal.SIGINT)  # Ctrl-C while the second agent works
        output, _ = proc.communicate(timeout=120)
    finally:
        hold.unlink(missing_ok=True)  # an agent left behind by a failure ends on its own
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, output
    assert not (out / "intermediate" / "resumed" / "kv-ledger.a2.json").exists()
    # the stopped attempt's server (started by the run) is gone with the run
    left = subprocess.run(["pgrep", "-f", f"{out}.*--start-task"], capture_output=True, text=True)
    assert left.stdout.strip() == ""
    assert rgbridge(["run", "--resume", "--output-dir", str(out)]) == 0
    report = report_of(out)
    assert sorted(r["attempt"] for r in report["results"]) == [1, 2]
    assert report["metadata"]["resumed"] == ["kv-ledger.a1"]
    assert first.read_bytes() == first_bytes  # the scored attempt was kept, not redone
    recs = recordings_of(out)
    assert len(recs) == 2
    assert all(sum(1 for e in events(rec) if e["type"] == "score") == 1 for rec in recs)
    # the interrupted second attempt was set aside, quit, never scored
    (aside,) = [p for p in (out / "recordings" / "resumed" / "kv-ledger").iterdir() if ".interrupted-" in p.name]
    (old,) = [p.parent for p in aside.rglob("session.json")]
    assert json.loads((old / "session.json").read_text())["state"] == "quit"
    assert not any(e["type"] == "score" for e in events(old))


def test_options_are_checked(tmp_path: Path, capsys) -> None:
    for bad, says in (
        (["--attempts", "0"], "--attempts: must be a whole number at least 1, not '0'"),
        (["--time-limit", "-1"], "--time-limit: must be a number of seconds above 0, not '-1'"),
        (["--workers", "x"], "--workers: must be a whole number at least 1, not 'x'"),
    ):
        with pytest.raises(SystemExit):
            rgbridge(["run", "--agent", "command", "--tasks", "kv-ledger", *bad])
        assert says in capsys.readouterr().err
    assert rgbridge(["run", "--agent", "claude-code", "--tasks", "kv-ledgr", "--output-dir", str(tmp_path)]) == 2
    assert "did you mean 'kv-ledger'" in capsys.readouterr().err
    # --no-preflight: the option check is under test, not the engine (the test runs without one)
    missing_cmd = ["run", "--agent", "command", "--tasks", "kv-ledger", "--output-dir", str(tmp_path / "o")]
    assert rgbridge([*missing_cmd, "--no-preflight"]) == 2
    assert "--agent-cmd" in capsys.readouterr().err
    assert rgbridge(["run", "--resume", "--output-dir", str(tmp_path / "nothing")]) == 2
    assert "no run" in capsys.readouterr().err


def test_show_prompt_is_the_one_template(capsys) -> None:
    assert rgbridge(["run", "--show-prompt", "--tasks", "kv-ledger"]) == 0
    text = capsys.readouterr().out
    readme = (REPO_ROOT / "tasks" / "kv-ledger" / "README.md").read_text()
    assert readme.strip() in text and "submit_task" in text and "port 8090" in text
