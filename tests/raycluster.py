"""A real multi-node Ray cluster on this machine, for tests and the bench.

A head and N worker nodes run as separate `ray start --block` processes, each in its own process
group with its own `docker` resource, ports and temporary folder, so clusters of concurrent
test runs never meet. `stop()` sends SIGTERM to each node (never `ray stop`, which would stop
every Ray process of the machine); `kill_node()` SIGKILLs one node's whole process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_ports(count: int) -> list[int]:
    """Distinct free ports (all sockets held open while choosing, so none repeats)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _ray_cli() -> str:
    found = shutil.which("ray", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if not found:
        raise RuntimeError("the `ray` command is not installed")
    return found


@dataclass
class LocalCluster:
    workers: int = 2
    head_cpus: int = 1
    worker_cpus: int = 1
    docker_slots: int = 1
    address: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    temp_dir: str = ""
    log_dir: str = ""

    def _node_args(self) -> list[str]:
        # Each node gets its own agent ports: the defaults are fixed numbers that a second node
        # (or another cluster) on the same machine would collide with.
        agent, metrics, runtime_env, agent_grpc = free_ports(4)
        return ["--block", "--disable-usage-stats", "--object-store-memory=200000000",
                f"--resources={{\"docker\": {self.docker_slots}}}", f"--dashboard-agent-listen-port={agent}",
                f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
                f"--dashboard-agent-grpc-port={agent_grpc}"]

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop("RAY_ADDRESS", None)
        log = open(Path(self.log_dir) / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the node
        return subprocess.Popen([_ray_cli(), "start", *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start(self, timeout: float = 120.0) -> LocalCluster:
        # A short path: Ray's unix sockets live under it (108-byte limit).
        self.temp_dir = tempfile.mkdtemp(prefix="rgr", dir="/tmp")
        self.log_dir = tempfile.mkdtemp(prefix="rgbridge-raylogs-")
        (port,) = free_ports(1)
        self.address = f"127.0.0.1:{port}"
        head = ["--head", f"--port={port}", "--node-ip-address=127.0.0.1", f"--num-cpus={self.head_cpus}",
                f"--temp-dir={self.temp_dir}", "--include-dashboard=false",
                *self._node_args()]
        self.procs.append(self._spawn(head, "head"))
        self._wait_nodes(1, timeout)
        for i in range(self.workers):
            self.add_worker(timeout=timeout, name=f"worker{i}")
        return self

    def add_worker(self, *, timeout: float = 120.0, name: str | None = None) -> subprocess.Popen:
        expected = self.alive_nodes() + 1
        args = [f"--address={self.address}", "--node-ip-address=127.0.0.1", f"--num-cpus={self.worker_cpus}",
                *self._node_args()]
        proc = self._spawn(args, name or f"worker{len(self.procs)}")
        self.procs.append(proc)
        self._wait_nodes(expected, timeout)
        return proc

    def alive_nodes(self) -> int:
        if self.procs and self.procs[0].poll() is not None:
            return 0
        try:
            out = subprocess.run([sys.executable, "-c", (
                "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False);"
                "print(sum(1 for n in ray.nodes() if n['Alive']))"), self.address],
                capture_output=True, text=True, timeout=30, env={**os.environ, "RAY_ADDRESS": ""})
        except subprocess.TimeoutExpired:
            return 0
        try:
            return int(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    def _wait_nodes(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Ray node exited early (code {proc.returncode}); logs in {self.log_dir}")
            if self.alive_nodes() >= count:
                return
            time.sleep(1)
        raise RuntimeError(f"Ray cluster did not reach {count} node(s) in {timeout}s; logs in {self.log_dir}")

    def kill_node(self, proc: subprocess.Popen) -> None:
        """Node death: SIGKILL the node's whole process group (raylet, its workers)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first, then the head
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
        # The node processes have exited; their session files are ours to remove.
        shutil.rmtree(self.temp_dir, ignore_errors=True)
