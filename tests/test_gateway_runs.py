"""`rgbridge run` with its defaults through the model gateway (issue 38, items 1, 3, 4 and 6),
with the real Claude Code and Codex CLIs against the scripted provider on loopback
(tests/scripted_model.py). Few CLI runs, many assertions each:

- an honest run per CLI: the agent's own shell finds no key in its environment or in any file
  of its attempt (it holds a placeholder), the provider receives the real key on every call,
  kv-ledger is solved (Pass@1 1.0 in both profiles), the row's tokens are the provider's usage
  summed over the calls it answered (`run.wire`, beside the CLI's own figures), and the wire
  transcript is in the recording without the key;
- a provider answering 401 to every call: `agent_error`/auth within 30 s of the first 401, the
  run stops (the second task is listed as not run), exits non-zero naming the variable and endpoint;
- a provider answering 529 for the whole time limit: `agent_error`/provider_unavailable, never scored;
- a `--max-cost` reached after the first answer: the attempt ends mid-way as `cost_limit`
  (the refused call in its wire transcript and on its page),
  submitted and scored; `--max-cost-per-attempt` does so for each attempt on a budget of its own,
  and a cap over a model no price lists is refused before any agent starts;
- Codex started while the attempt's MCP endpoint does not answer (its server process stopped):
  `agent_error`/mcp_unavailable, never scored;
- `--network allow --allow-host`: each CLI's shell reaches the named host (a site of the test's
  on 127.0.0.2) through the proxy and is refused by another (127.0.0.3), logged in the row and
  the recording.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.run.planned import EXIT_UNSCORED
from bridge.agents.run.runner import EXIT_AGENT_ERRORS
from bridge.cli import main as rgbridge
from bridge.recording.wire_transcript import PATH as WIRE_TRANSCRIPT
from bridge.recording.wire_transcript import refused, wire_records
from bridge.reports.wire_sections import wire_transcript_html
from tests.helpers import SECRET, no_secret_on_disk, recordings_of, report_of
from tests.loopback import LoopbackServer
from tests.scripted_model import (
    CLI_BINARY,
    Action,
    Calls,
    Conversation,
    Fail,
    Policy,
    Reply,
    ScriptedModel,
    _shell_call,
    _shell_tool,
    by_task_policy,
)

#: the agent's own shell looks for the key (built from two halves: the whole never appears in a
#: command, which the CLI may log in its HOME) in its environment and every file it can reach
PROBE = (
    f"k1='{SECRET[:9]}'; k2='{SECRET[9:]}'; key=\"$k1$k2\"; "
    'if env | grep -qF "$key"; then echo KEY_IN_ENV; else echo NO_KEY_IN_ENV; fi; '
    'echo "KEY_FILES:[$(grep -rlF "$key" "$HOME" "$TMPDIR" "$PWD" 2>/dev/null | head -3)]"; '
    "env | grep -q 'rgbridge-attempt-' && echo HAS_PLACEHOLDER; true"
)


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "CODEX_HOME", "ANTHROPIC_AUTH_TOKEN", "CODEX_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def probing(inner: Policy, script: str = PROBE, marker: str = "KEY_FILES") -> Policy:
    """`inner`, after one shell call running `script` (once the CLI offers a shell); `marker`
    is a word of the script that tells its call apart."""

    def policy(conv: Conversation) -> Action:
        shell = "Bash" if conv.offers("Bash") else _shell_tool(conv)  # Claude Code's, else Codex's
        if shell and not any(marker in json.dumps(r.call.arguments) for r in conv.history):
            return Calls((_shell_call(conv, shell, script, None),))
        return inner(conv)

    return policy


def probe_output(model: ScriptedModel, marker: str = "KEY_FILES") -> str:
    for request in model.agent_requests():
        for result in request.conversation.history if request.conversation else ():
            if marker in json.dumps(result.call.arguments):
                return result.text
    raise AssertionError("the probe never ran")


def run(agent: str, model: ScriptedModel, out: Path, *extra: str, tasks: tuple[str, ...] = ("kv-ledger",)) -> int:
    base = model.base_url if agent == "claude-code" else model.openai_base_url
    return rgbridge(
        [
            "run",
            "--agent",
            agent,
            "--tasks",
            *tasks,
            "--model-base-url",
            base,
            "--output-dir",
            str(out),
            "--run-id",
            f"{agent}-gw",
            *extra,
        ]
    )


@pytest.mark.docker
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_honest_run_through_the_gateway(
    agent: str, docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    agent_cli(CLI_BINARY[agent])
    out = tmp_path / "out"
    with ScriptedModel(probing(by_task_policy())) as model:
        code = run(agent, model, out, "--time-limit", "300", "--model", "scripted-model")
        assert not model.errors, model.errors
        probe = probe_output(model)
        credentials = list(model.wire.credentials)
        inputs, outputs = model.wire.totals()
    assert code == 0
    # the key: never inside, always on the provider's side
    assert "NO_KEY_IN_ENV" in probe and "KEY_FILES:[]" in probe and "HAS_PLACEHOLDER" in probe, probe
    assert credentials and set(credentials) == {SECRET}, credentials
    no_secret_on_disk(out)
    (row,) = report_of(out)["results"]
    for profile in ("compat", "strict"):
        p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
        assert p1["total"] > 0 and p1["passed"] == p1["total"], (profile, p1)
    # numbers from the wire: the provider's usage summed over the calls it answered
    wire = row["run"]["wire"]
    assert wire["source"] == "gateway" and wire["answered"] >= 4
    assert row["run"]["tokens"] == {"input": inputs, "output": outputs, "cache_read": 0, "cache_write": 0}
    assert row["run"]["tokens_source"] == "gateway" and "tokens" in row["run"]["cli_reported"]
    assert row["run"]["cost_usd"] is None and wire["unpriced_models"] == ["scripted-model"]  # never 0
    (rec,) = recordings_of(out)
    transcript = (rec / "agent" / "wire.jsonl").read_text()
    assert SECRET not in transcript and not re.search(r"rgbridge-attempt-[\w-]{20,}", transcript)
    assert len(transcript.splitlines()) >= wire["calls"]


@pytest.mark.docker
def test_revoked_key_stops_the_run_within_30_seconds(
    docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None, capsys: Any
) -> None:
    agent_cli("claude")
    out = tmp_path / "out"
    with ScriptedModel(lambda conv: Fail(401)) as model:
        code = run("claude-code", model, out, "--time-limit", "300", tasks=("kv-ledger", "word-duel"))
        first = model.requests[0].at
        calls = len(model.requests)
        endpoint = model.base_url
    printed = capsys.readouterr()
    assert code == EXIT_AGENT_ERRORS
    assert "ANTHROPIC_API_KEY" in printed.err and endpoint in printed.err, printed.err
    report = report_of(out)
    row, not_started = sorted(report["results"], key=lambda r: r["repo_name"])
    # every planned attempt is a row: the one the stop kept from starting says why
    assert not_started["repo_name"] == "word-duel" and not_started["outcome"] == "not_run"
    assert "refused the key" in not_started["unscored"]
    assert row["repo_name"] == "kv-ledger" and row["outcome"] == "agent_error"
    assert row["agent_error"]["class"] == "auth" and row["run"]["retries"] == 0
    ended = json.loads((out / "attempts" / "kv-ledger" / "a1" / "state.json").read_text())["agent_ended_at"]
    assert ended - first <= 30, ended - first
    assert report["metadata"]["not_run"] == ["word-duel.a1"] and calls < 20
    assert not (out / "attempts" / "word-duel").exists()


@pytest.mark.docker
def test_outage_for_the_whole_time_limit_is_never_scored(
    docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    agent_cli("claude")
    out = tmp_path / "out"
    with ScriptedModel(lambda conv: Fail(529)) as model:
        code = run("claude-code", model, out, "--time-limit", "30", "--retries", "0")
    assert code == EXIT_AGENT_ERRORS
    (row,) = report_of(out)["results"]
    assert row["outcome"] == "agent_error" and row["agent_error"]["class"] == "provider_unavailable"
    assert "rgbridge" not in row or not row.get("rgbridge")  # never scored
    assert row["run"]["wire"]["waited_seconds"] > 0 and row["run"]["wire"]["answered"] == 0


@pytest.mark.docker
@pytest.mark.parametrize("cap", ["--max-cost", "--max-cost-per-attempt"])
def test_cost_cap_ends_the_attempt_mid_way_as_cost_limit(
    cap: str, docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    agent_cli("claude")
    out = tmp_path / "out"
    with ScriptedModel(by_task_policy()) as model:
        # a priced model: the first answer costs more than the cap, the next call is refused
        code = run(
            "claude-code",
            model,
            out,
            *("--time-limit", "300", "--attempts", "2", "--model", "claude-sonnet-4-5", cap, "1e-7"),
        )
        answered = len(model.wire.usage)
    report = report_of(out)
    first, second = sorted(report["results"], key=lambda r: r["attempt"])
    per_attempt = cap == "--max-cost-per-attempt"
    # the run's cap: attempt 2 never starts; the attempt's: attempt 2 starts on a budget of its
    # own, gets its own first answer, and is cut the same way
    assert answered == (2 if per_attempt else 1)
    cut = (first, second) if per_attempt else (first,)
    for row in cut:
        run_ = row["run"]
        assert run_["ended"] == "cost_limit" and run_["submitted_by"] == "cost_limit", run_
        assert row["outcome"] != "agent_error" and row["rgbridge"]["profiles"]["strict"]  # submitted and scored
        wire = run_["wire"]
        assert wire["answered"] == 1 and wire["cost_limited"] and run_["cost_usd"] > 1e-7
        assert wire["cost_limited_by"] == ("attempt" if per_attempt else "run")
        assert wire["cost_caps"] == ({"attempt": 1e-7, "run": None} if per_attempt else {"attempt": None, "run": 1e-7})
    # the refusal that ended each cut attempt is in its transcript and on its page, at no cost
    recordings = recordings_of(out)
    assert len(recordings) == len(cut)
    for rec in recordings:
        records = list(wire_records(rec / WIRE_TRANSCRIPT, max_records=1000, max_bytes=1 << 26))
        refusals = [r for r in records if refused(r) == "cost_limit"]
        assert refusals and all(r["call"]["cost_usd"] == 0 and "body" not in r["request"] for r in refusals)
        assert sum(1 for r in records if r["call"].get("billed") and r["call"]["status"] == 200) == 1
        assert SECRET not in (rec / WIRE_TRANSCRIPT).read_text()
        assert f"{len(refusals)} refused by the gateway" in wire_transcript_html(rec)
    meta = report["metadata"]
    if per_attempt:
        assert meta["max_cost_per_attempt_usd"] == 1e-7 and "max_cost_usd" not in meta
    else:
        assert second["outcome"] == "not_run" and "cost cap" in second["unscored"]
        assert meta["max_cost_usd"] == 1e-7 and meta["not_started"] == ["kv-ledger.a2"]
    assert code in (0, EXIT_AGENT_ERRORS, EXIT_UNSCORED)


@pytest.mark.docker
def test_a_cap_over_an_unpriced_model_is_refused_before_any_agent_starts(
    docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None, capsys: Any
) -> None:
    agent_cli("claude")
    out = tmp_path / "out"
    with ScriptedModel(by_task_policy()) as model:
        code = run(
            "claude-code", model, out, "--model", "scripted-model", "--max-cost-per-attempt", "1", "--max-cost", "2"
        )
        calls = len(model.requests)
    err = " ".join(capsys.readouterr().err.split())
    # its calls would count nothing toward the cap: refused, naming the model and the fix
    assert code == 2 and calls == 0 and not (out / "attempts").exists()
    assert "'scripted-model' is not in the price table" in err and "--price scripted-model=IN,OUT" in err, err


@pytest.mark.docker
def test_codex_started_while_the_mcp_endpoint_does_not_answer_is_mcp_unavailable(
    docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    agent_cli("codex")
    out = tmp_path / "out"
    attempt = out / "attempts" / "kv-ledger" / "a1"
    frozen: list[int] = []

    def freeze_the_server() -> None:
        """Stop the attempt's MCP server once it is ready (before Codex connects), and let it go
        once Codex has given up on it (its startup limit is 60 s)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not frozen:
            try:  # the run marks the attempt running once its server is ready, then starts Codex
                running = json.loads((attempt / "state.json").read_text()).get("phase") == "running"
            except (OSError, ValueError):
                running = False
            if not running:
                time.sleep(0.02)
                continue
            mark = str(attempt / "server" / "ready.json").encode()  # in the server's argv
            for entry in Path("/proc").iterdir():
                try:
                    if entry.name.isdigit() and mark in (entry / "cmdline").read_bytes():
                        os.kill(int(entry.name), signal.SIGSTOP)
                        frozen.append(int(entry.name))
                except OSError:
                    continue
            break
        gave_up = time.monotonic() + 90
        while time.monotonic() < gave_up:
            text = "".join(
                (attempt / "agent" / name).read_text(errors="replace")
                for name in ("stream.jsonl", "stderr.log")
                if (attempt / "agent" / name).is_file()
            )
            if "MCP" in text:
                break
            time.sleep(0.2)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=freeze_the_server, daemon=True)
    thread.start()
    with ScriptedModel(lambda conv: Reply("done, no tools needed")) as model:
        code = run("codex", model, out, "--time-limit", "200", "--retries", "0", "--model", "scripted-model")
    thread.join(timeout=10)
    assert frozen, "the attempt's server was never seen"
    assert code == EXIT_AGENT_ERRORS
    (row,) = report_of(out)["results"]
    assert row["outcome"] == "agent_error" and row["agent_error"]["class"] == "mcp_unavailable", row.get("agent_error")
    assert "rgbridge" not in row  # never scored


class Site:
    """A one-page HTTP site of the test's own on a loopback address (127.0.0.0/8 only)."""

    def __init__(self, host: str) -> None:
        self.body = f"site-{host}-{os.urandom(4).hex()}"
        body = self.body.encode()

        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = LoopbackServer(Page, host)
        self.host, self.port = host, self.server.port

    def close(self) -> None:
        self.server.close()


@pytest.mark.docker
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_network_allow_lets_the_shell_reach_the_named_host_only(
    agent: str, docker_client: Any, agent_cli: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    """`--network allow --allow-host 127.0.0.2`: the CLI's own shell tool fetches a page of the
    allowed host through the proxy and is refused (403) by the other (127.0.0.3), which is logged
    in agent/network.json, the recording and the row; the model calls still pass the gateway."""
    agent_cli(CLI_BINARY[agent])
    allowed, refused = Site("127.0.0.2"), Site("127.0.0.3")
    fetch = (
        "for h in "
        + f"{allowed.host}:{allowed.port} {refused.host}:{refused.port}"
        + "; do echo \"NETFETCH $h $(curl -s -m 20 -w ' code:%{http_code}' http://$h/)\"; done"
    )
    out = tmp_path / "out"
    try:
        with ScriptedModel(probing(by_task_policy(), fetch, "NETFETCH")) as model:
            code = run(
                agent,
                model,
                out,
                *("--time-limit", "300", "--model", "scripted-model"),
                *("--network", "allow", "--allow-host", allowed.host),
            )
            assert not model.errors, model.errors
            seen = probe_output(model, "NETFETCH")
    finally:
        allowed.close()
        refused.close()
    assert code == 0
    assert f"NETFETCH {allowed.host}:{allowed.port} {allowed.body} code:200" in seen, seen
    assert f"NETFETCH {refused.host}:{refused.port}" in seen and "code:403" in seen and refused.body not in seen
    (row,) = report_of(out)["results"]
    network = row["run"]["sandbox"]["network"]
    assert network["mode"] == "allow" and network["allowed_hosts"] == [allowed.host]
    assert network["hosts_asked"] == [
        {"host": f"{allowed.host}:{allowed.port}", "allowed": True},
        {"host": f"{refused.host}:{refused.port}", "allowed": False},
    ]
    (rec,) = recordings_of(out)
    kept = json.loads((rec / "agent" / "network.json").read_text())
    assert [(a["host"], a["port"], a["allowed"], a["status"]) for a in kept["asked"]] == [
        (allowed.host, allowed.port, True, 200),
        (refused.host, refused.port, False, 403),
    ]
    # the model calls went through the gateway's door, not the proxy
    assert row["run"]["wire"]["answered"] >= 2 and row["run"]["tokens_source"] == "gateway"
    for profile in ("compat", "strict"):
        p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
        assert p1["total"] > 0 and p1["passed"] == p1["total"], (profile, p1)
