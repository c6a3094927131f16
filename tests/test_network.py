"""The agent's network (issue 38, part B; bridge/agents/confine/network.py): under `--network
closed` a sandboxed program reaches its doors and no other service of the host's loopback; under
`allow` the proxy lets through exactly the `--allow-host` names and logs every host asked for;
`host` is the control (the same program reaches the service, so the checks can fail). Real
bubblewrap (also as an unprivileged user) and real Docker; every address is on this machine's
loopback (127.0.0.0/8) and every service is the test's own."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.agents.confine import Confinement, Confiner, SandboxError
from bridge.agents.confine.attempt_net import AttemptNetwork, endpoints_for, network_log
from bridge.agents.confine.bwrap import BwrapConfiner
from bridge.agents.confine.docker import DockerConfiner
from bridge.agents.confine.netcheck import network_line, resolve_network, trial
from bridge.agents.confine.network import host_python, stop_listening
from bridge.agents.confine.process import run_agent

HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
REPO_ROOT = Path(__file__).resolve().parent.parent
#: what the probe inside tries: the door, the host's service, then (allow) both names through the
#: proxy and the allowed name directly; one `name=value` per line
PROBE = r"""
import os, socket, sys, urllib.request
door, service, allowed, refused = (int(a) for a in sys.argv[1:5])
def raw(port, host="127.0.0.1"):
    try:
        s = socket.create_connection((host, port), timeout=3)
    except OSError:
        return "refused"
    with s:
        try:
            s.settimeout(1)
            return s.recv(64).decode() or "empty"
        except OSError:
            return "connected"
def http(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError as exc:
        return "error:" + str(getattr(exc, "code", type(exc).__name__))
print("door=" + http(f"http://127.0.0.1:{door}/"))
print("service=" + raw(service))
print("allowed_direct=" + raw(allowed, "127.0.0.2"))
if os.environ.get("HTTP_PROXY"):
    print("allowed_proxied=" + http(f"http://127.0.0.2:{allowed}/"))
    print("refused_proxied=" + http(f"http://127.0.0.3:{refused}/"))
"""


class Service:
    """A one-line TCP service (or a tiny HTTP one) of the test's own on a loopback address."""

    def __init__(self, body: str, host: str = "127.0.0.1", http: bool = False) -> None:
        self.body = body
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.http = http
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # shut down by close(); closed here (no other thread's number to reuse)
                self.sock.close()
                return
            with conn:
                if self.http:
                    conn.settimeout(5)
                    try:
                        conn.recv(4096)
                    except OSError:
                        continue
                    data = self.body.encode()
                    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                    conn.sendall(head.encode() + data)
                else:
                    conn.sendall(self.body.encode())

    def close(self) -> None:
        stop_listening(self.sock)
        self.thread.join(10)  # gone with its test, not still serving into the next one
        assert not self.thread.is_alive(), "the test's service did not stop"


@pytest.fixture()
def services() -> Iterator[dict[str, Service]]:
    found = {
        "door": Service("door-" + secrets.token_hex(4), http=True),
        "service": Service("secret-" + secrets.token_hex(4)),
        "allowed": Service("allowed-" + secrets.token_hex(4), host="127.0.0.2", http=True),
        "refused": Service("refused-" + secrets.token_hex(4), host="127.0.0.3", http=True),
    }
    yield found
    for service in found.values():
        service.close()


def run_probe(sandbox: Confiner, mode: str, services: dict[str, Service], folder: Path) -> tuple[dict[str, str], list]:
    for name in ("w", "h", "t"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    base = Confinement(workspace=folder / "w", home=folder / "h", tmp=folder / "t")
    python = host_python() if sandbox.kind != "docker" else "python3"
    ports = [str(services[n].port) for n in ("door", "service", "allowed", "refused")]
    with AttemptNetwork(mode, ["127.0.0.2"] if mode == "allow" else [], {"mcp": services["door"].port}) as net:
        ended = run_agent(
            [python, "-c", PROBE, *ports],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", **net.env},
            cwd=folder / "w",
            stdout=folder / "out.txt",
            stderr=folder / "err.txt",
            time_limit=60,
            stop=threading.Event(),
            sandbox=sandbox,
            confinement=net.confine(base),
        )
        asked = net.asked()
    assert ended.how == "exit" and ended.exit_code == 0, (ended, (folder / "err.txt").read_text())
    lines = (folder / "out.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line), asked


def check_modes(sandbox: Confiner, services: dict[str, Service], tmp_path: Path) -> None:
    door = services["door"].body
    closed, asked = run_probe(sandbox, "closed", services, tmp_path / "closed")
    assert closed == {"door": door, "service": "refused", "allowed_direct": "refused"} and asked == []
    allow, asked = run_probe(sandbox, "allow", services, tmp_path / "allow")
    assert allow["door"] == door and allow["service"] == "refused", (allow, {k: v.port for k, v in services.items()})
    assert allow["allowed_direct"] == "refused", "the allowed host is reached through the proxy only"
    assert allow["allowed_proxied"] == services["allowed"].body
    assert allow["refused_proxied"] == "error:403"
    seen = [(a["host"], a["port"], a["allowed"], a["status"]) for a in asked]
    assert seen == [
        ("127.0.0.2", services["allowed"].port, True, 200),
        ("127.0.0.3", services["refused"].port, False, 403),
    ]


# --------------------------------------------------------------------------- no sandbox needed


def test_the_mode_follows_the_options_and_contradictions_are_refused() -> None:
    assert resolve_network(None, "bwrap", []) == "closed"
    assert resolve_network(None, "docker", []) == "closed"
    assert resolve_network(None, "none", []) == "host"  # nothing to close: rows say unconfined
    assert resolve_network("allow", "bwrap", ["pypi.org"]) == "allow"
    for network, kind, hosts, words in [
        ("closed", "none", [], "needs a sandbox"),
        ("allow", "none", ["x"], "needs a sandbox"),
        ("closed", "bwrap", ["x"], "--allow-host needs --network allow"),
        ("allow", "bwrap", [], "at least one --allow-host"),
    ]:
        with pytest.raises(SandboxError, match=words):
            resolve_network(network, kind, hosts)
    # the doors: the MCP server, and a model endpoint of the user's on this host's loopback only
    assert endpoints_for("http://127.0.0.1:5000/mcp", "http://127.0.0.1:6000/v1") == {"mcp": 5000, "model": 6000}
    assert endpoints_for("http://127.0.0.1:5000/mcp", "https://models.example.test/v1") == {"mcp": 5000}


def test_the_proxy_lets_exactly_the_named_host_through_and_logs_the_rest(services: dict[str, Service]) -> None:
    with AttemptNetwork("allow", ["127.0.0.2"], {}) as net:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": net.env["HTTP_PROXY"]}))
        allowed = services["allowed"]
        assert opener.open(f"http://127.0.0.2:{allowed.port}/x?y=1", timeout=10).read().decode() == allowed.body
        for url in (f"http://127.0.0.3:{services['refused'].port}/", f"http://localhost:{allowed.port}/"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                opener.open(url, timeout=10)
            assert refused.value.code == 403  # localhost is another name: exact names only
        # CONNECT (what HTTPS uses): refused for an unnamed host, a tunnel for the named one
        port = int(net.env["HTTPS_PROXY"].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as tunnel:
            tunnel.sendall(f"CONNECT 127.0.0.2:{allowed.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")  # a tunnel to the named host
        with socket.create_connection(("127.0.0.1", port), timeout=10) as tunnel:
            tunnel.sendall(f"CONNECT 127.0.0.1:{services['service'].port} HTTP/1.1\r\n\r\n".encode())
            assert tunnel.recv(4096).startswith(b"HTTP/1.1 403")
        summary = net.summary()
        kept = tempfile.mkdtemp()
        net.keep(Path(kept) / "network.json")
    assert summary["mode"] == "allow" and summary["allowed_hosts"] == ["127.0.0.2"]
    verdicts = {(a["host"], a["allowed"]) for a in network_log(Path(kept) / "network.json")}
    shutil.rmtree(kept)
    assert verdicts == {("127.0.0.2", True), ("127.0.0.3", False), ("localhost", False), ("127.0.0.1", False)}
    assert {h["host"]: h["allowed"] for h in summary["hosts_asked"]} == {
        f"127.0.0.2:{allowed.port}": True,
        f"127.0.0.3:{services['refused'].port}": False,
        f"localhost:{allowed.port}": False,
        f"127.0.0.1:{services['service'].port}": False,
    }


# --------------------------------------------------------------------------- bubblewrap


@needs_bwrap
def test_bwrap_closed_reaches_only_its_doors_allow_only_the_named_host(
    services: dict[str, Service], tmp_path: Path
) -> None:
    check_modes(BwrapConfiner(), services, tmp_path)
    # the control: the host's network, the same probe reaches the host's service
    shared, _ = run_probe(BwrapConfiner(), "host", services, tmp_path / "host")
    assert shared["service"] == services["service"].body and shared["allowed_direct"] == "connected"
    line = network_line()
    assert line.ok and "--network closed works in" in line.detail, line


@needs_bwrap
def test_an_unprivileged_user_gets_the_closed_network_or_the_fix(unprivileged_user: str) -> None:
    """The bridge run as a plain user: the closed network's trial (doors, forwarder, refusal of
    the host's loopback) passes in that user's bubblewrap, or the refusal names the fix."""
    system = subprocess.run(
        [host_python(), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    site = next(p for p in sys.path if p.endswith("site-packages"))
    if system.stdout.strip() != str(tuple(sys.version_info[:2])):
        pytest.skip("the system's python3 cannot import this environment's packages")
    home = Path(tempfile.mkdtemp(prefix="rgbridge-netuser-", dir="/tmp"))
    os.chown(home, pwd.getpwnam(unprivileged_user).pw_uid, -1)
    code = (
        "from bridge.agents.confine.bwrap import BwrapConfiner; from bridge.agents.confine.netcheck import trial\n"
        "from bridge.agents.confine import SandboxError\n"
        "try:\n    trial(BwrapConfiner()); print('ok')\n"
        "except SandboxError as exc:\n    print('refused', exc)\n"
    )
    try:
        out = subprocess.run(
            ["runuser", "-u", unprivileged_user, "--", "env", f"PYTHONPATH={REPO_ROOT}:{site}", f"TMPDIR={home}",
             f"HOME={home}", host_python(), "-c", code],
            capture_output=True, text=True, timeout=120, cwd=home,
        )  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)
    text = out.stdout.strip()
    assert text == "ok" or ("refused" in text and "--sandbox docker" in text), (text, out.stderr[-2000:])


# --------------------------------------------------------------------------- Docker


@pytest.mark.docker
def test_docker_network_none_reaches_only_its_doors(
    docker_client, services: dict[str, Service], tmp_path: Path
) -> None:
    sandbox = DockerConfiner()
    sandbox.check()
    trial(sandbox)
    check_modes(sandbox, services, tmp_path)


def test_network_json_of_an_attempt_is_read_defensively(tmp_path: Path) -> None:
    assert network_log(tmp_path / "absent.json") == []
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert network_log(tmp_path / "bad.json") == []
    (tmp_path / "odd.json").write_text(json.dumps({"asked": [{"host": "a"}, 3, "x"]}))
    assert network_log(tmp_path / "odd.json") == [{"host": "a"}]


@needs_bwrap
@pytest.mark.docker
def test_run_allow_lets_the_named_host_through_and_records_every_host_asked(
    docker_client, services: dict[str, Service], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`rgbridge run --network allow --allow-host 127.0.0.2`: the agent's requests through the
    proxy, the named host answered and the other refused, each a `network_request` event of the
    recording; the mode and the name in the run's configuration. (`--on-exit abandon`: nothing
    to score, so the attempt is a `not_run` row and the exit says so.)"""
    from bridge.agents.run.planned import EXIT_UNSCORED
    from bridge.cli import main as rgbridge
    from tests.helpers import events, recordings_of

    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    agent = tmp_path / "asker.py"
    agent.write_text(
        "import sys, urllib.request\n"
        "for host, port in (('127.0.0.2', sys.argv[1]), ('127.0.0.3', sys.argv[2])):\n"
        "    try:\n"
        "        print(host, urllib.request.urlopen(f'http://{host}:{port}/', timeout=10).read().decode())\n"
        "    except OSError as exc:\n"
        "        print(host, 'error', getattr(exc, 'code', exc))\n"
    )
    out = tmp_path / "out"
    code = rgbridge(
        ["run", "--agent", "command", "--agent-cmd", f"{sys.executable} {agent} {services['allowed'].port} "
         f"{services['refused'].port}", "--tasks", "kv-ledger", "--sandbox", "bwrap", "--network", "allow",
         "--allow-host", "127.0.0.2", "--on-exit", "abandon", "--output-dir", str(out), "--run-id", "allow",
         "--retries", "0"]
    )  # fmt: skip
    assert code == EXIT_UNSCORED, capsys.readouterr()
    stream = (out / "attempts" / "kv-ledger" / "a1" / "agent" / "stream.jsonl").read_text()
    assert f"127.0.0.2 {services['allowed'].body}" in stream and "127.0.0.3 error 403" in stream
    (rec,) = recordings_of(out)
    asked = [e for e in events(rec) if e["type"] == "network_request"]
    assert [(e["host"], e["port"], e["allowed"], e["status"]) for e in asked] == [
        ("127.0.0.2", services["allowed"].port, True, 200),
        ("127.0.0.3", services["refused"].port, False, 403),
    ]
    kept = json.loads((rec / "agent" / "network.json").read_text())
    assert kept["mode"] == "allow" and kept["allowed_hosts"] == ["127.0.0.2"] and len(kept["asked"]) == 2
    config = json.loads((out / "config.json").read_text())
    assert config["network"] == "allow" and config["allow_hosts"] == ["127.0.0.2"]


@needs_bwrap
@pytest.mark.docker  # the run's pre-flight asks the engine first
def test_a_network_mode_that_cannot_start_here_is_refused_before_any_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from bridge.agents.confine import netcheck
    from bridge.cli import main as rgbridge

    out, marker = tmp_path / "out", tmp_path / "an-agent-ran"
    capsys.readouterr()
    code = rgbridge(
        ["run", "--agent", "command", "--agent-cmd", f"touch {marker}", "--tasks", "kv-ledger", "--sandbox", "none",
         "--network", "closed", "--output-dir", str(out), "--run-id", "nonet"]
    )  # fmt: skip
    assert code == 2 and "--network closed needs a sandbox" in capsys.readouterr().err
    assert not marker.exists() and not (out / "attempts").exists()
    # a sandbox whose closed network does not work (here: no interpreter for the forwarder)
    monkeypatch.setattr(netcheck, "host_python", lambda: "/nonexistent/python3")
    netcheck.forget_network_checks()
    try:
        with pytest.raises(SandboxError, match="did not reach its door.*/nonexistent/python3"):
            netcheck.network_check(BwrapConfiner())
    finally:
        netcheck.forget_network_checks()


@needs_bwrap
def test_a_ray_nodes_preflight_runs_the_network_trial() -> None:
    """`rgbridge doctor --ray-address` and a Ray run's pre-flight: each node runs the closed
    network's trial in its sandbox and the driver shows one line per node (bridge/agents/ray/checks.py)."""
    from bridge.agents.confine import netcheck
    from bridge.agents.ray.checks import facts_checks, node_facts

    netcheck.forget_network_checks()
    facts = node_facts(["claude-code"], None, None, "bwrap")
    assert facts["network"]["ok"] and "--network closed works in bwrap" in facts["network"]["detail"], facts
    (line,) = [c for c in facts_checks([facts], ["claude-code"], required=False) if c.name.endswith(" network")]
    assert line.ok and line.name == f"{facts['node']} network"
    # a node whose trial failed: a warning naming the fix; a node of an older bridge: no line
    broken = {**facts, "network": {"ok": False, "detail": "--network closed does not work in bwrap", "fix": "F"}}
    (bad,) = [c for c in facts_checks([broken], ["claude-code"], required=True) if c.name.endswith(" network")]
    assert not bad.ok and bad.fix == "F" and bad.severity == "warning"
    older = {k: v for k, v in facts.items() if k != "network"}
    assert not [c for c in facts_checks([older], ["claude-code"], required=False) if c.name.endswith(" network")]
