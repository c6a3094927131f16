"""A real multi-node Ray cluster on this machine, for tests and the bench.

A head and N worker nodes run as separate `ray start --block` processes, each in its own process
group with its own `docker` resource, ports and temporary folder, so clusters of concurrent
test runs never meet. `stop()` sends SIGTERM to each node (never `ray stop`, which would stop
every Ray process of the machine); `kill_node()` SIGKILLs one node's whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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


PROCESS_TOKEN = secrets.token_hex(32)


def require_ray() -> None:
    """Skip the test without Ray, or fail it when CI requires Ray (RGBRIDGE_REQUIRE_RAY=1). It
    looks with find_spec, not an import: Ray reads its auth settings from the environment when
    imported, and `joined` sets them first."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("ray") is None:
        if os.environ.get("RGBRIDGE_REQUIRE_RAY", "") not in ("", "0", "false", "no"):
            pytest.fail("Ray required (RGBRIDGE_REQUIRE_RAY=1) but not installed: pip install '.[ray]'")
        pytest.skip("Ray is not installed (extra 'ray')")


@contextlib.contextmanager
def joined(cluster: LocalCluster, keep_logs: Callable[[], bool] = lambda: False) -> Iterator[LocalCluster]:
    """The cluster started and this process joined to it (with its token) while inside the block;
    then the driver leaves and every node is stopped (logs kept when `keep_logs()` says so)."""
    cluster.start()
    try:
        with cluster.driver_env():
            import ray

            ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
            try:
                yield cluster
            finally:
                ray.shutdown()
    finally:
        cluster.stop(keep_logs=keep_logs())


@dataclass
class LocalCluster:
    workers: int = 2
    head_cpus: int = 1
    worker_cpus: int = 1
    docker_slots: int = 1
    #: more custom resources each worker node offers (agent runs: {"agent": 1}); the head has none
    resources: dict[str, float] = field(default_factory=dict)
    #: added to every node's environment (its Ray workers inherit it)
    env: dict[str, str] = field(default_factory=dict)
    address: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    temp_dir: str = ""
    log_dir: str = ""
    #: the clusters' own auth token: nodes and drivers get it by environment, so neither the
    #: shared ~/.ray/auth_token nor another cluster on the machine decides who may join. One per
    #: test process: Ray caches the token a driver first read (its token loader), so a second
    #: cluster with another token could not be joined from the same pytest process.
    token: str = field(default_factory=lambda: PROCESS_TOKEN)

    def auth_env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    @contextlib.contextmanager
    def driver_env(self) -> Iterator[None]:
        """This process joins the cluster with its token while inside the block."""
        saved = {k: os.environ.get(k) for k in self.auth_env()}
        os.environ.update(self.auth_env())
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _node_args(self, *, head: bool = False) -> list[str]:
        # Each node gets its own agent ports: the defaults are fixed numbers that a second node
        # (or another cluster) on the same machine would collide with.
        agent, metrics, runtime_env, agent_grpc = free_ports(4)
        return [
            "--block",
            "--disable-usage-stats",
            "--object-store-memory=200000000",
            "--resources=" + json.dumps({"docker": self.docker_slots, **({} if head else self.resources)}),
            f"--dashboard-agent-listen-port={agent}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
        ]

    def _spawn(self, args: list[str], name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        env = dict(os.environ)
        env.update(self.env)
        env.update(extra_env or {})
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop("RAY_ADDRESS", None)
        env.update(self.auth_env())
        log = open(Path(self.log_dir) / f"{name}.log", "wb")  # lives as long as the node
        return subprocess.Popen(
            [_ray_cli(), "start", *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start(self, timeout: float = 300.0) -> LocalCluster:
        # A short path: Ray's unix sockets live under it (108-byte limit).
        self.temp_dir = tempfile.mkdtemp(prefix="rgr", dir="/tmp")
        self.log_dir = tempfile.mkdtemp(prefix="rgbridge-raylogs-")
        (port,) = free_ports(1)
        self.address = f"127.0.0.1:{port}"
        head = [
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.head_cpus}",
            f"--temp-dir={self.temp_dir}",
            "--include-dashboard=false",
            *self._node_args(head=True),
        ]
        try:
            self.procs.append(self._spawn(head, "head"))
            self._wait_started(self.procs[-1], "head", timeout)
            for i in range(self.workers):
                self.add_worker(timeout=timeout, name=f"worker{i}")
        except BaseException:
            self.stop(keep_logs=True)  # never leave half a cluster running; logs say why
            raise
        return self

    def add_worker(
        self, *, timeout: float = 300.0, name: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """One more worker node; `env` is added to its environment (its Ray workers inherit it)."""
        name = name or f"worker{len(self.procs)}"
        args = [
            f"--address={self.address}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.worker_cpus}",
            *self._node_args(),
        ]
        proc = self._spawn(args, name, env)
        self.procs.append(proc)
        self._wait_started(proc, name, timeout)
        return proc

    def _wait_started(self, proc: subprocess.Popen, name: str, timeout: float) -> None:
        """`ray start` prints this line once the node's processes run and it joined the cluster
        (a log line, not a probe driver: probes take many seconds on a loaded machine)."""
        log = Path(self.log_dir) / f"{name}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"Ray node {name} exited early (code {proc.returncode}); see {log}")
            if "Ray runtime started" in log.read_text(encoding="utf-8", errors="replace"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Ray node {name} did not start in {timeout}s; see {log}")

    def kill_node(self, proc: subprocess.Popen) -> None:
        """Node death: SIGKILL the node's whole process group (raylet, its workers)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        self.procs.remove(proc)  # dead on purpose: not a node that "exited early"

    def stop(self, *, keep_logs: bool = False) -> None:
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
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)
