"""`rgbridge run --backend ray` on a real multi-node Ray cluster started on this machine.

A head (no `agent` resource) and two worker nodes, each offering one `agent` and one `docker`
unit, run as separate `ray start --block` processes (tests/raycluster.py); the API keys are in
the nodes' environment only. The `command` adapter's scripted agent (tests/agents/mcp_sdk_agent.py)
runs two tasks × 2 attempts. Proves: the report equals the same run's with `--backend local`
(scores, counts, configuration; times and session ids aside) and the attempts ran on both
workers; a node whose CLI version differs is refused by the pre-flight, naming it, before any
attempt starts (and `rgbridge doctor --ray-address` names it too); Ctrl-C cancels the attempt in
flight (its processes gone) and `--resume` completes with no attempt scored twice, on the run's
backend or the other one; the real Claude Code and Codex CLIs (scripted model on loopback) run
on the nodes; a worker node killed in the middle of an attempt has it re-run from scratch on the
other worker, scored once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from raycluster import LocalCluster, joined, require_ray

from bridge.cli import main as rgbridge
from tests.helpers import agent_cmd, events, no_secret_on_disk, payload, recordings_of, report_of

pytestmark = pytest.mark.docker

REPO_ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-test-ray-node-only-5e0a"
TASKS = ("kv-ledger", "word-duel")
#: what legitimately differs between two runs of the same plan
VOLATILE = {
    "wall_seconds",
    "agent_seconds",
    "scoring_seconds",
    "overhead_seconds",
    "session_id",
    "timestamp",
    "created_at",
    "total_elapsed_seconds",
    "elapsed_seconds",
    "duration",
    "time",
    "time_to_ready",
    "backend",
    "workers",
}


@pytest.fixture(scope="module")
def node_dir(tmp_path_factory) -> Path:
    """Where the nodes keep their attempts' private folders (RGBRIDGE_RAY_ATTEMPTS_DIR)."""
    return tmp_path_factory.mktemp("node-attempts")


def no_node_folders_left(node_dir: Path) -> None:
    """Every execution's folder is gone: removed by its worker, or by its reaper when the worker
    was killed (a forced cancel, a node lost)."""
    _wait("the nodes' attempt folders removed", lambda: not list(node_dir.glob("*/*")), 60)


@pytest.fixture(scope="module")
def cluster(docker_client, request, node_dir: Path):
    require_ray()
    keys = {"ANTHROPIC_API_KEY": SECRET, "OPENAI_API_KEY": SECRET}
    local = LocalCluster(workers=2, resources={"agent": 1}, env={**keys, "RGBRIDGE_RAY_ATTEMPTS_DIR": str(node_dir)})
    with joined(local, keep_logs=lambda: request.session.testsfailed > 0) as running:  # the nodes' logs say why
        yield running


@pytest.fixture()
def no_driver_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys live on the nodes only: the driver has none to pass or to leak."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "RGBRIDGE_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def _strip(data: Any, out: Path) -> Any:
    if isinstance(data, dict):
        return {k: _strip(v, out) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [_strip(v, out) for v in data]
    if isinstance(data, str):
        text = data.replace(str(out), "OUT")
        return re.sub(r"/\d{8}T\d{6}Z-[\w.-]+-[0-9a-f]{6}$", "/SESSION", text)  # a recording's session id
    return data


def comparable(out: Path) -> dict[str, Any]:
    return _strip(report_of(out), out)


def _args(
    out: Path, run_id: str, cmd: str, *extra: str, tasks: tuple[str, ...] = TASKS, attempts: int = 2
) -> list[str]:
    return [
        "run",
        "--agent",
        "command",
        "--agent-cmd",
        cmd,
        "--tasks",
        *tasks,
        "--attempts",
        str(attempts),
        "--workers",
        "2",
        "--time-limit",
        "120",
        "--output-dir",
        str(out),
        "--run-id",
        run_id,
        *extra,
    ]


def _payloads(tmp_path: Path) -> Path:
    files = {t: json.loads(payload(tmp_path, t).read_text()) for t in TASKS}
    combined = tmp_path / "payloads.json"
    combined.write_text(json.dumps(files))
    return combined


def _ray_facts(out: Path) -> dict[str, dict[str, Any]]:
    return {
        p.parent.parent.name + "." + p.parent.name: json.loads(p.read_text())
        for p in out.glob("attempts/*/a*/ray.json")
    }


def _agents_of(marker: Path) -> list[int]:
    """PIDs of scripted agents whose command line names `marker` (this test's payload). Only a
    Python running the agent script: the run's own process names the agent's command line in its
    `--agent-cmd` argument, and matching it let a wait for the second agent end at once, so a
    Ctrl-C could land before that attempt's session (and its recording) existed."""
    pattern = rf"^\S*python\S* \S*mcp_sdk_agent\.py \S+ {re.escape(str(marker))}( |$)"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _wait(what: str, check: Any, timeout: float, proc: subprocess.Popen[str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_ray_report_equals_local_and_spreads(cluster, tmp_path: Path, no_driver_keys: None, monkeypatch) -> None:
    cmd = agent_cmd("solve-by-task", _payloads(tmp_path))
    remote, local = tmp_path / "ray", tmp_path / "local"
    started = time.monotonic()
    assert rgbridge(_args(remote, "cmp", cmd, "--backend", "ray", "--ray-address", cluster.address)) == 0
    ray_wall = time.monotonic() - started
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):  # the local run's machine has the keys itself
        monkeypatch.setenv(name, SECRET)
    started = time.monotonic()
    assert rgbridge(_args(local, "cmp", cmd)) == 0
    local_wall = time.monotonic() - started
    assert comparable(remote) == comparable(local)
    report = report_of(remote)
    assert report["metadata"]["backend"] == "ray"
    assert report["summary"]["avg_pass_at_1"] == 1.0 and report["strict_summary"]["avg_pass_at_1"] == 1.0
    # every attempt came back into the run folder, each on a worker; both workers were used
    facts = _ray_facts(remote)
    assert sorted(facts) == sorted(f"{t}.a{k}" for t in TASKS for k in (1, 2))
    assert len({f["node"] for f in facts.values()}) == 2, facts
    for row in report["results"]:
        rec = Path(row["run"]["recording"])
        assert rec.is_relative_to(remote / "recordings") and (rec / "agent" / "trajectory.json").is_file()
        assert Path(row["run"]["trajectory"]).is_file() and Path(row["run"]["trajectory"]).is_relative_to(remote)
    recs = recordings_of(remote)
    assert len(recs) == 4
    for rec in recs:
        assert sum(1 for e in events(rec) if e["type"] == "score") == 1
        assert rgbridge(["recordings", "verify", str(rec)]) == 0
    no_secret_on_disk(remote)
    overheads = [round(f["driver_seconds"] - f["attempt_seconds"], 2) for f in facts.values()]
    print(f"\nray overhead per attempt (s): {overheads}; wall ray {ray_wall:.1f}s, local {local_wall:.1f}s")


def test_cli_version_mismatch_refused_before_any_attempt(cluster, agent_cli, tmp_path: Path, capsys) -> None:
    import ray

    agent_cli("claude")  # the driver's and the two workers' Claude Code (the wheel's)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "claude").write_text("#!/bin/sh\necho '9.9.9 (Claude Code)'\n")
    (shim / "claude").chmod(0o755)
    before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    odd = cluster.add_worker(name="odd", env={"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"})
    try:
        odd_id = _wait(
            "the odd node", lambda: [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before], 120
        )[0]
        out = tmp_path / "out"
        code = rgbridge(
            ["run", "--agent", "claude-code", "--tasks", "kv-ledger", "--output-dir", str(out), "--run-id", "odd"]
            + ["--backend", "ray", "--ray-address", cluster.address, "--model-base-url", "http://127.0.0.1:9"]
        )
        err = " ".join(capsys.readouterr().err.split())
        assert code == 2, err
        assert "claude-code versions differ" in err and "9.9.9" in err and f"/{odd_id[:6]}" in err, err
        assert not (out / "attempts").exists() and not (out / "recordings").exists()  # no attempt started
        assert rgbridge(["doctor", "--ray-address", cluster.address, "--agent", "claude-code"]) == 1
        text = " ".join(capsys.readouterr().out.split())
        assert "FAIL" in text and "versions differ" in text and odd_id[:6] in text, text
        assert SECRET not in text  # keys by name only
    finally:
        cluster.kill_node(odd)
    _wait("the odd node marked dead", lambda: not [n for n in ray.nodes() if n["Alive"] and n["NodeID"] == odd_id], 120)


@pytest.mark.parametrize(("first", "then"), [("ray", None), ("local", "ray"), ("ray", "local")])
def test_ctrl_c_cancels_then_resume_completes(
    first: str, then: str | None, cluster, node_dir: Path, tmp_path: Path, no_driver_keys: None
) -> None:
    """Ctrl-C mid-attempt, then `--resume` (with the run's backend, or the other one)."""
    pay, out = payload(tmp_path, "kv-ledger"), tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **cluster.auth_env()}
    cmd = [sys.executable, "-m", "bridge.cli", *_args(out, "rayint", agent_cmd("hang", pay), tasks=("kv-ledger",))]
    cmd += ["--backend", first, "--ray-address", cluster.address]
    cmd[cmd.index("--time-limit") + 1] = "20"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first_file = out / "intermediate" / "rayint" / "kv-ledger.a1.json"
    try:
        _wait("the first attempt scored", first_file.exists, 400, proc)
        _wait("the second attempt's agent", lambda: _agents_of(pay), 200, proc)
        first_bytes = first_file.read_bytes()
        assert json.loads(first_bytes).get("outcome") != "infra_error", first_bytes
        proc.send_signal(signal.SIGINT)  # Ctrl-C while the second agent works (on a node, or here)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output
    assert not (out / "intermediate" / "rayint" / "kv-ledger.a2.json").exists()
    _wait("the cancelled agent's processes to end", lambda: not _agents_of(pay), 60)
    no_node_folders_left(node_dir)
    resume = ["run", "--resume", "--output-dir", str(out)] + (["--backend", then] if then else [])
    assert rgbridge(resume) == 0
    report = report_of(out)
    assert sorted(r["attempt"] for r in report["results"]) == [1, 2]
    assert report["metadata"]["resumed"] == ["kv-ledger.a1"] and report["metadata"]["backend"] == (then or first)
    assert first_file.read_bytes() == first_bytes  # the scored attempt was kept, not redone
    recs = recordings_of(out)
    assert len(recs) == 2 and all(sum(1 for e in events(r) if e["type"] == "score") == 1 for r in recs)
    facts = _ray_facts(out)
    assert ("kv-ledger.a1" in facts) == (first == "ray") and ("kv-ledger.a2" in facts) == ((then or first) == "ray")
    if first == "local":  # cut short here: its folders kept aside, its session never scored
        asides = [p for p in (out / "recordings" / "rayint" / "kv-ledger").iterdir() if ".interrupted-" in p.name]
        (aside,) = asides  # once missing now and then: the Ctrl-C came before its session (see _agents_of)
        (old,) = [p.parent for p in aside.rglob("session.json")]
        assert not any(e["type"] == "score" for e in events(old))


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_real_cli_on_ray(agent: str, cluster, agent_cli, tmp_path: Path, no_driver_keys: None, monkeypatch) -> None:
    """The real CLI (its PyPI wheel on every node) against the scripted model on loopback."""
    from tests.scripted_model import CLI_BINARY, ScriptedModel, by_task_policy

    agent_cli(CLI_BINARY[agent])
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "CODEX_HOME"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "out"
    with ScriptedModel(by_task_policy()) as model:
        base = model.base_url if agent == "claude-code" else model.openai_base_url
        code = rgbridge(
            ["run", "--agent", agent, "--tasks", *TASKS, "--attempts", "2", "--time-limit", "300"]
            + ["--model", "scripted-model", "--model-base-url", base, "--output-dir", str(out)]
            + ["--run-id", f"{agent}-ray", "--backend", "ray", "--ray-address", cluster.address]
        )
        assert not model.errors, model.errors
    assert code == 0
    report = report_of(out)
    rows = report["results"]
    assert sorted((r["repo_name"], r["attempt"]) for r in rows) == [(t, k) for t in TASKS for k in (1, 2)]
    for row in rows:
        assert row["agent"]["name"] == agent and row["agent"]["version"] not in ("", "unknown")
        assert row["agent"]["model"] == "scripted-model" and row["run"]["submitted_by"] == "agent"
        for profile in ("compat", "strict"):
            p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
            assert p1["total"] > 0 and p1["passed"] == p1["total"], (row["repo_name"], profile, p1)
    assert len({f["node"] for f in _ray_facts(out).values()}) == 2
    for rec in recordings_of(out):
        assert sum(1 for e in events(rec) if e["type"] == "score") == 1
    no_secret_on_disk(out)  # the key lived in the nodes' environment only


def _node_proc(cluster, pid: int) -> subprocess.Popen[bytes]:
    """The `ray start` process (its process group is the node) that `pid` runs under."""
    nodes = {p.pid: p for p in cluster.procs}
    while pid > 1:
        pgid = os.getpgid(pid)
        if pgid in nodes:
            return nodes[pgid]
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError("the agent runs under no node of the cluster")


def test_worker_killed_mid_attempt_is_rerun_elsewhere(
    cluster, node_dir: Path, tmp_path: Path, no_driver_keys: None
) -> None:
    import threading

    import ray

    pay, out = payload(tmp_path, "kv-ledger"), tmp_path / "out"
    args = _args(out, "raykill", agent_cmd("hang", pay), "--backend", "ray", tasks=("kv-ledger",), attempts=1)
    args[args.index("--time-limit") + 1] = "30"
    box: dict[str, int] = {}
    thread = threading.Thread(target=lambda: box.setdefault("code", rgbridge(args)))
    thread.start()
    try:
        # the agent (and its sandbox's process, whose command line holds the agent's)
        agents = _wait("the agent on a node", lambda: _agents_of(pay), 300)
        victim = _node_proc(cluster, agents[0])
        time.sleep(2)
        cluster.kill_node(victim)  # the whole node: raylet, its workers (the agent's own group survives it)
        _wait("the killed attempt's agent to be reaped", lambda: not set(agents) & set(_agents_of(pay)), 60)
    finally:
        thread.join(timeout=900)
    assert not thread.is_alive() and box.get("code") == 0
    report = report_of(out)
    (row,) = report["results"]
    assert row["outcome"] != "infra_error", row
    assert row["rgbridge"]["profiles"]["strict"]["pass_at_1"]["score"] == 1.0
    assert row["run"]["submitted_by"] == "time_limit"
    alive = {n["NodeID"][:6] for n in ray.nodes() if n["Alive"]}
    (facts,) = _ray_facts(out).values()
    assert facts["node"].split("/")[-1] in alive  # re-run on a node still alive, not the killed one
    (lost,) = facts["lost_executions"]  # one execution lost with its node, then the one scored
    assert lost.split(":")[0].split("/")[-1] not in alive, lost
    assert [p.name for p in (out / "intermediate" / "raykill").glob("*.json")] == ["kv-ledger.a1.json"]
    (rec,) = recordings_of(out)
    assert sum(1 for e in events(rec) if e["type"] == "score") == 1
    no_node_folders_left(node_dir)  # the killed node's execution too: its reaper removed it
