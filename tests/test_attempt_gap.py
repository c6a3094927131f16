"""No gap (issue 30, item 3): from the session's start to the agent's end one bridge process owns an
attempt's session, records its workspace and watches the golden files, whatever the agent does
and whenever it connects.

`rgbridge run` starts the attempt's MCP server (HTTP on loopback, the attempt's own credential)
before the agent; the server opens the session itself. An agent that copies the golden tests and
the solution into its workspace before it ever connects (or never connects) is recorded live
and flagged contaminated. (Before, the run opened the session, closed its manager and left the
session unwatched until the agent's own stdio server re-attached it.) These runs use no sandbox,
so the agent can read the task folder: what is shown is the watch, not the confinement."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bridge.agents.attempt.server import AttemptServer, ServerStartError
from bridge.cli import main as rgbridge
from tests.helpers import (
    REPO_ROOT,
    agent_cmd,
    agent_window,
    assert_held_through_the_agent,
    at,
    events,
    payload,
    recordings_of,
    report_of,
)

GAP_AGENT = REPO_ROOT / "tests" / "agents" / "gap_agent.py"
TASK = "kv-ledger"
TASK_DIR = REPO_ROOT / "tasks" / TASK


@pytest.fixture()
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)


def run(out: Path, cmd: str, *extra: str) -> int:
    return rgbridge(
        ["run", "--agent", "command", "--agent-cmd", cmd, "--tasks", TASK, "--time-limit", "120",
         "--sandbox", "none", "--output-dir", str(out), "--run-id", out.name, *extra]
    )  # fmt: skip


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["connect", "never"])
def test_golden_reads_before_connecting_are_recorded(mode: str, docker_client, tmp_path: Path, no_token: None) -> None:
    out = tmp_path / f"gap-{mode}"
    assert run(out, f"{sys.executable} {GAP_AGENT} {mode} {TASK_DIR} {{mcp_config}} {{workspace}}") == 0
    (row,) = report_of(out)["results"]
    assert row["run"]["submitted_by"] == ("agent" if mode == "connect" else "agent_exit")
    window = agent_window(out)
    (rec,) = recordings_of(out)
    evs = events(rec)
    # the copies were recorded live, by the recorder, while the agent ran (not found afterwards)
    copied = {"app.py", "golden_tests/test_keys.py", "early.txt"}
    live = {e["path"]: e for e in evs if e["type"] == "file_created" and not e.get("synthetic")}
    assert copied <= set(live), sorted(live)
    for path in copied:
        assert window[0] - 1.0 <= at(live[path]) <= window[1] + 1.0, (path, live[path]["t"], window)
    # ... and so were the reads of the golden files: the attempt is contaminated
    golden = [e for e in evs if e["type"] == "golden_access"]
    assert golden and all(window[0] - 1.0 <= at(e) <= window[1] + 1.0 for e in golden), golden
    assert row["contaminated"] is True
    assert_held_through_the_agent(rec, window)


@pytest.mark.docker
def test_honest_run_is_held_by_one_process(docker_client, tmp_path: Path, no_token: None) -> None:
    out = tmp_path / "honest"
    assert run(out, agent_cmd("solve", payload(tmp_path, TASK))) == 0
    report = report_of(out)
    (row,) = report["results"]
    assert row["contaminated"] is False and row["run"]["submitted_by"] == "agent"
    assert row["rgbridge"]["profiles"]["strict"]["pass_at_1"]["score"] == 1.0
    assert row["run"]["sandbox"]["kind"] == "none" and row["run"]["sandbox"]["confined"] is False
    assert report["metadata"]["sandbox"] == "none" and report["metadata"]["unconfined"] is True
    (rec,) = recordings_of(out)
    assert_held_through_the_agent(rec, agent_window(out))
    kinds = [e["type"] for e in events(rec)]
    assert kinds.count("session_start") == 1 and "reattach" not in kinds[: kinds.index("submit")]
    # the agent's MCP config: an HTTP entry with its own credential, which reached nothing else
    entry = json.loads((out / "attempts" / TASK / "a1" / "home" / "mcp.json").read_text())["mcpServers"]["rgbridge"]
    assert entry["url"].startswith("http://127.0.0.1:") and entry["headers"]["Authorization"].startswith(
        "Bearer rgbc1."
    )
    credential = entry["headers"]["Authorization"].split()[1].encode()
    for path in [*rec.rglob("*"), *(out / "attempts" / TASK / "a1" / "workspace").rglob("*")]:
        if path.is_file() and not path.is_symlink():
            assert credential not in path.read_bytes(), f"credential in {path}"
    assert not (out / "attempts" / TASK / "a1" / "server" / "ready.json").exists()
    options = json.loads((out / "run.json").read_text())
    assert options["sandbox"] == "none" and options["agent_binds"] == []


def test_a_failed_server_start_says_why(tmp_path: Path) -> None:
    """The server's own error (its stderr) is the error of the attempt."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RGBRIDGE_TOKEN", None)
    ws, rec = tmp_path / "ws", tmp_path / "rec"
    ws.mkdir()
    argv = [sys.executable, "-m", "mcp_server", "--transport", "http", "--port", "0", "--workspace", str(ws),
            "--recordings", str(rec), "--start-task", "no-such-task", "--ready-file", str(tmp_path / "ready.json")]  # fmt: skip
    with pytest.raises(ServerStartError) as err:
        AttemptServer.start(
            argv, env=env, ready_file=tmp_path / "ready.json", stderr=tmp_path / "e.log", stop=threading.Event()
        )
    assert "exited (2) before it was ready" in str(err.value) and "no-such-task" in str(err.value)
    # one that never gets ready is ended at the time limit, with what it said
    stuck = [
        sys.executable,
        "-c",
        "import sys, time; print('stuck on purpose', file=sys.stderr, flush=True); time.sleep(60)",
    ]
    started = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        AttemptServer.start(
            stuck,
            env=env,
            ready_file=tmp_path / "r2.json",
            stderr=tmp_path / "e2.log",
            stop=threading.Event(),
            timeout=3,
        )
    assert "not ready after 3 s" in str(err.value) and "stuck on purpose" in str(err.value)
    assert time.monotonic() - started < 30


def test_a_failed_server_start_fails_the_attempt_with_its_error(
    docker_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'the bridge could not start: disk on fire' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("RGBRIDGE_PYTHON", str(fake))  # the interpreter the run starts the server with
    out = tmp_path / "failed"
    (tmp_path / "venv").mkdir()  # binds must exist (bridge/agents/confine/scope.py)
    (tmp_path / "relative" / "tools").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    binds = ["--agent-bind", str(tmp_path / "venv"), "--agent-bind", "relative/tools"]
    assert run(out, f"{sys.executable} -c pass {{mcp_config}}", *binds) == 0
    options = json.loads((out / "run.json").read_text())  # what --resume reads back
    assert options["sandbox"] == "none"
    assert options["agent_binds"] == [str(tmp_path / "venv"), os.path.abspath("relative/tools")]
    report = report_of(out)
    assert report["results"] == []
    message = report["metadata"]["failed_attempts"][f"{TASK}.a1"]
    assert "exited (3) before it was ready" in message and "disk on fire" in message
    assert not (out / "attempts" / TASK / "a1" / "agent" / "stream.jsonl").exists()  # no agent was started


# ----------------------------------------------------------------------------- fast checks

#: where each adapter's HTTP entry keeps its url and its bearer header (their documented formats)
HTTP_KEYS = {
    "claude-code": ("url", "headers"),
    "command": ("url", "headers"),
    "cursor-agent": ("url", "headers"),
    "copilot": ("url", "headers"),
    "gemini": ("httpUrl", "headers"),
    "codex": ("url", "http_headers"),
}


@pytest.mark.parametrize("name", sorted(HTTP_KEYS))
def test_every_adapter_gets_an_http_entry_with_its_credential(name: str, tmp_path: Path) -> None:
    import tomllib

    from bridge.agents.adapters.base import AttemptSetup, HttpServer
    from bridge.agents.adapters.mcp_configs import SERVER_KEY
    from bridge.agents.adapters.registry import adapter

    for sub in ("ws", "home", "tmp"):
        (tmp_path / sub).mkdir()
    url, token = "http://127.0.0.1:40123/mcp", "rgbc1.abcdef.0123456789abcdef0123456789abcdef"
    setup = AttemptSetup(
        binary="/opt/bin/agent", prompt="p", workspace=tmp_path / "ws", home=tmp_path / "home", tmp=tmp_path / "tmp",
        server=HttpServer(url, token), agent_cmd="/bin/agent {prompt} {mcp_config}",
    )  # fmt: skip
    launch = adapter(name).build(setup)
    (path, text), *_ = [(p, t) for p, t in launch.files.items() if SERVER_KEY in t]
    assert path.is_relative_to(setup.home)  # never in the workspace, which is recorded
    doc = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    entry = (doc.get("mcpServers") or doc.get("mcp_servers"))[SERVER_KEY]
    url_key, headers_key = HTTP_KEYS[name]
    assert entry[url_key] == url and entry[headers_key] == {"Authorization": f"Bearer {token}"}
    assert "command" not in entry and "args" not in entry


def test_protected_paths_cover_what_the_agent_must_not_see(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.agents.confine.protected import protected_paths
    from bridge.agents.run.options import RunOptions
    from bridge.agents.run.settings import settings_for
    from bridge.locations import cache_dir, data_home
    from bridge.tasks.catalog import Catalog

    monkeypatch.setenv("RGBRIDGE_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/engine.sock")
    tasks = REPO_ROOT / "tasks"
    options = RunOptions(
        agent="command", agent_cmd="true {prompt}", tasks=[TASK], run_id="p", recordings=str(tmp_path / "rec"),
        server_args=["--tasks", str(tasks)], sandbox="bwrap", agent_binds=[str(tmp_path / "venv")],
    )  # fmt: skip
    settings = settings_for(options, Catalog.from_options(tasks), tmp_path / "out")
    assert settings.sandbox == "bwrap" and settings.agent_binds == (tmp_path / "venv",)
    protected = set(protected_paths(settings.server_args, settings.catalog, settings.recordings, settings.output_dir))
    for path in (tasks, TASK_DIR, TASK_DIR / "tests", TASK_DIR / "solution", tmp_path / "rec", data_home(),
                 cache_dir(), tmp_path / "out", Path("/var/run/docker.sock"), tmp_path / "engine.sock"):  # fmt: skip
        assert path in protected, path
    assert all(p.is_absolute() for p in protected)
    assert tmp_path / "venv" not in protected


KILLER = """
import os, signal, sys, time
from pathlib import Path
workspace = Path(sys.argv[1])
for entry in Path("/proc").iterdir():
    try:
        cmd = (entry / "cmdline").read_bytes().split(b"\\0")
    except OSError:
        continue
    if b"--start-task" in cmd and str(workspace).encode() in cmd:
        os.kill(int(entry.name), signal.SIGKILL)
(workspace / "after.txt").write_text("written after the server was killed")
time.sleep(1)
"""


@pytest.mark.docker
def test_an_agent_that_kills_the_server_is_reported(docker_client, tmp_path: Path, no_token: None) -> None:
    """Unconfined, an agent can kill the attempt's server (a sandbox's own PID namespace hides it):
    the row says the session went unwatched, and the run still finishes the attempt."""
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    out = tmp_path / "killer"
    assert run(out, f"{sys.executable} {script} {{workspace}}") == 0
    (row,) = report_of(out)["results"]
    assert row["run"]["submitted_by"] == "agent_exit"
    assert "exited (-9) before the agent ended" in row["run"]["errors"][0], row["run"]["errors"]
    (rec,) = recordings_of(out)
    kinds = [e["type"] for e in events(rec)]
    assert "reattach" in kinds and kinds.index("reattach") < kinds.index("submit")  # the run took it back


def test_each_attempt_server_serves_its_own_credential_only(tmp_path: Path) -> None:
    """Two attempts' servers side by side: each answers its own agent's credential (a call without
    a session id means its attempt's session) and refuses the other's and none; the server token
    is never written; ended, each lets its session go still open (the run takes it back)."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from bridge.sessions.live import load_record

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RGBRIDGE_TOKEN", None)
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name / "ws").mkdir(parents=True)
            argv = [sys.executable, "-m", "mcp_server", "--transport", "http", "--port", "0",
                    "--workspace", str(tmp_path / name / "ws"), "--recordings", str(tmp_path / name / "rec"),
                    "--start-task", TASK, "--client-name", "test", "--ready-file", str(tmp_path / name / "ready")]  # fmt: skip
            server = AttemptServer.start(
                argv, env=env, ready_file=tmp_path / name / "ready", stderr=tmp_path / name / "err", stop=threading.Event()
            )  # fmt: skip
            assert server is not None
            servers.append(server)
        a, b = (s.ready for s in servers)
        assert a.url != b.url and a.credential != b.credential

        async def status(url: str, credential: str) -> str:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"}, timeout=60)
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                result = await client.call_tool("task_status", {})
                return str(result.structured_content["session_id"])

        assert anyio.run(status, a.url, a.credential) == a.session_id
        assert anyio.run(status, b.url, b.credential) == b.session_id
        import requests

        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        for url, token in ((b.url, a.credential), (a.url, b.credential), (a.url, "")):
            answer = requests.post(url, json=init, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            assert answer.status_code == 401, (url, answer.status_code)
    finally:
        for server in servers:
            server.end()
    assert not list(tmp_path.rglob("http-token")) and not list(tmp_path.rglob("ready"))
    for name, ready in zip(("a", "b"), (s.ready for s in servers), strict=True):
        rec = tmp_path / name / "rec" / ready.session_id
        assert load_record(rec).state == "active"  # let go, not quit: the run submits it
        assert [e["type"] for e in events(rec)][-1] == "detach"


def test_a_server_whose_run_died_lets_the_session_go(tmp_path: Path) -> None:
    """The run holds the server's standard input: when it closes (a run killed with SIGKILL closes
    it too) the server ends as on SIGTERM and lets the session go."""
    from bridge.sessions.ownership import held_elsewhere

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RGBRIDGE_TOKEN", None)
    (tmp_path / "ws").mkdir()
    argv = [sys.executable, "-m", "mcp_server", "--transport", "http", "--port", "0", "--workspace",
            str(tmp_path / "ws"), "--recordings", str(tmp_path / "rec"), "--start-task", TASK,
            "--ready-file", str(tmp_path / "ready")]  # fmt: skip
    server = AttemptServer.start(
        argv, env=env, ready_file=tmp_path / "ready", stderr=tmp_path / "err", stop=threading.Event()
    )
    assert server is not None
    rec = tmp_path / "rec" / server.ready.session_id
    try:
        assert held_elsewhere(rec)
        assert server.proc.stdin is not None
        server.proc.stdin.close()  # no signal: only the end of its input
        assert server.proc.wait(timeout=300) is not None  # a loaded machine imports the SDK slowly
    finally:
        server.end()
    assert not held_elsewhere(rec)
    assert "detach" in [e["type"] for e in events(rec)]


def test_an_end_signal_lost_in_a_finalizer_still_ends_the_server(tmp_path: Path) -> None:
    """A SIGTERM whose Ended lands in a finalizer is dropped by Python ("Exception ignored in"),
    and later end signals are ignored by then: the server must still end (it hung for good, seen
    when the run closed an attempt server's input while it was starting)."""
    script = tmp_path / "lost.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from mcp_server.transport import Ended, end_on_signals, raise_if_ended\n"
        "end_on_signals()\n"
        "class Finalized:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(0.2)  # the handler runs here; its Ended is dropped\n"
        "Finalized()\n"
        "try:\n"
        "    raise_if_ended()\n"
        "except Ended as exc:\n"
        "    sys.exit(100 + exc.signum)\n"
        "sys.exit(1)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert "Exception ignored" in done.stderr  # the Ended really was lost in the finalizer
    assert done.returncode == 100 + signal.SIGTERM, done.stderr
