"""Pre-flight of agent runs on Ray (`rgbridge run --backend ray`, `rgbridge doctor --ray-address`).

One small task pinned to each alive node offering the `agent` resource reports what a run needs
there: the Docker engine (attempts score on it), each agent CLI and its version (found as
`settings_for` finds it), the sandbox, and which of the adapter's keys are set, by name only:
their values never leave the node. The verdicts are `rgbridge doctor` checks, each named after
its node; a CLI whose version differs between nodes (or from the driver's) is an error for a
run, since a row records one version.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal

from bridge.agents.adapters.base import Adapter
from bridge.agents.adapters.probe import find_cli
from bridge.agents.adapters.registry import ADAPTERS
from bridge.agents.adapters.registry import adapter as find_adapter
from bridge.agents.confine.netcheck import network_fact_check, network_facts
from bridge.errors import BridgeError
from bridge.release import exact_version
from bridge.scoring.doctor import Check
from bridge.scoring.run.ray_backend import connect, node_label

AGENT_RESOURCE = "agent"
#: how long the pre-flight waits for every node's answer (a worker may have to start)
CHECK_SECONDS = 180.0
Severity = Literal["error", "warning"]


def key_names(adapter: Adapter) -> tuple[str, ...]:
    """The adapter's model key variables (bridge/agents/run/agent_checks.py `check_key` reads the same)."""
    return adapter.key_env


def cli_version(adapter: Adapter, agent_bin: str | None, agent_cmd: str | None) -> tuple[str, str]:
    """(binary, version) of the agent's CLI on this node, found as the run finds it
    (`adapters.probe.find_cli`); the command adapter's program must be on PATH here."""
    with tempfile.TemporaryDirectory(prefix="rgbridge-probe-") as tmp:
        binary, version = find_cli(adapter, agent_bin, agent_cmd, Path(tmp))
    return adapter.resolve(binary), version


def sandbox_facts(kind: str) -> dict[str, Any]:
    """Whether the run's sandbox works here: the confinement package's own check when this
    bridge has it, else bubblewrap's version and one confined `true`."""
    try:
        confine = importlib.import_module("bridge.agents.confine")
    except ImportError:
        confine = None
    if confine is not None:
        try:
            box = confine.sandbox_for(kind)
            box.check()
            return {"ok": True, "detail": f"{box.kind} {box.version()}"}
        except Exception as exc:  # noqa: BLE001 - any failure of the check is the node's answer
            return {"ok": False, "detail": str(exc)}
    if kind == "none":
        return {"ok": True, "detail": "none (unconfined)"}
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return {"ok": False, "detail": "bubblewrap (bwrap) is not installed"}
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30, check=False)
        probe = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "detail": f"bwrap: {exc}"}
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"ok": False, "detail": f"bwrap cannot confine here: {last}"}
    return {"ok": True, "detail": f"{version.stdout.strip()} (confines)"}


def node_facts(agents: list[str], agent_bin: str | None, agent_cmd: str | None, sandbox: str) -> dict[str, Any]:
    """Body of one pre-flight task: what runs of these agents need on this node. Keys are
    reported by name and presence only; their values never leave the node."""
    from bridge.scoring.sandbox.docker_client import engine_available

    ok, detail = engine_available()
    clis: dict[str, dict[str, str]] = {}
    keys: dict[str, dict[str, bool]] = {}
    for name in agents:
        adapter = find_adapter(name)
        try:
            binary, version = cli_version(adapter, agent_bin, agent_cmd)
            clis[name] = {"binary": binary, "version": version}
        except BridgeError as exc:
            clis[name] = {"error": str(exc)}
        keys[name] = {k: bool(os.environ.get(k)) for k in key_names(adapter)}
    return {
        "node": node_label(),
        "bridge_version": exact_version(),
        "engine": {"ok": ok, "detail": detail},
        "cli": clis,
        "sandbox": sandbox_facts(sandbox),
        "network": network_facts(sandbox),  # the closed network's trial in that sandbox (issue 38)
        "keys": keys,
    }


def agent_nodes(ray: Any) -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(AGENT_RESOURCE, 0) > 0]


def gather_facts(
    ray: Any, agents: list[str], agent_bin: str | None, agent_cmd: str | None, sandbox: str, timeout: float
) -> list[dict[str, Any]]:
    """`node_facts` of every alive node offering `agent`, each pinned to its node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(node_facts)
    refs: dict[Any, tuple[str, str]] = {}
    for node in agent_nodes(ray):
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        ref = remote.options(num_cpus=0, max_retries=0, scheduling_strategy=strategy).remote(
            agents, agent_bin, agent_cmd, sandbox
        )
        refs[ref] = (node["NodeID"], f"{node.get('NodeManagerAddress', '?')}/{node['NodeID'][:6]}")
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout) if refs else ([], [])
    out: list[dict[str, Any]] = []
    failed: dict[str, dict[str, Any]] = {}
    for ref, (node_id, label) in refs.items():
        if ref not in ready:
            ray.cancel(ref, force=True)
            failed[node_id] = {"node": label, "unreachable": f"did not answer in {timeout:.0f}s"}
            continue
        try:
            out.append(ray.get(ref))
        except ray.exceptions.RayError as exc:
            failed[node_id] = {"node": label, "unreachable": first_line(exc)}
    if failed:  # a node that left the cluster meanwhile takes no attempt: said, not refused
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        for node_id, fact in failed.items():
            out.append(fact if node_id in alive else {"node": fact["node"], "gone": fact["unreachable"]})
    return sorted(out, key=lambda f: str(f["node"]))


def facts_checks(
    facts: list[dict[str, Any]],
    agents: list[str],
    *,
    required: bool,
    driver_version: str | None = None,
    keys_required: bool = True,
) -> list[Check]:
    """The pre-flight's verdict per node and check (`required`: the run's agent must be there;
    `keys_required`: its model key too, unless the run names an endpoint of its own)."""
    level: Severity = "error" if required else "warning"
    checks: list[Check] = []
    if not facts:
        return [Check("cluster", False, f"no alive node offers the '{AGENT_RESOURCE}' resource", START_FIX)]
    for f in facts:
        node = f["node"]
        if "unreachable" in f:
            checks.append(Check(f"node {node}", False, f["unreachable"], "see the node's Ray logs"))
            continue
        if "gone" in f:
            checks.append(Check(f"node {node}", True, f"left the cluster: {f['gone']}", "", "warning"))
            continue
        engine = f["engine"]
        checks.append(Check(f"{node} engine", engine["ok"], engine["detail"], "" if engine["ok"] else _ENGINE_FIX))
        for name in agents:
            cli = f["cli"][name]
            if "error" in cli:
                checks.append(Check(f"{node} {name}", False, cli["error"], _install_fix(name), level))
            else:
                checks.append(Check(f"{node} {name}", True, f"{cli['version']} ({cli['binary']})"))
            keys = f["keys"][name]
            if keys:
                present = [k for k, v in keys.items() if v]
                checks.append(
                    Check(
                        f"{node} keys",
                        bool(present) or not keys_required,
                        f"{name}: " + (", ".join(present) + " present" if present else "none of " + ", ".join(keys)),
                        "" if present else _KEYS_FIX,
                        level if keys_required else "warning",
                    )
                )
        box = f["sandbox"]
        checks.append(
            Check(
                f"{node} sandbox",
                box["ok"],
                box["detail"],
                "" if box["ok"] else "install bubblewrap (and allow user namespaces) or run with --sandbox docker",
            )
        )
        checks.extend(network_fact_check(f"{node} network", f.get("network")))
    answered = [f for f in facts if "unreachable" not in f and "gone" not in f]
    for name in agents:
        checks.extend(_version_check(name, answered, driver_version if required else None, level))
    bridges = {str(f["bridge_version"]) for f in answered}
    if len(bridges) > 1:
        checks.append(
            Check(
                "bridge versions",
                False,
                "nodes run different bridges: " + _spread({str(f["node"]): str(f["bridge_version"]) for f in answered}),
                "install the same repogenesis-bridge on every node",
                "warning",
            )
        )
    return checks


def _version_check(name: str, facts: list[dict[str, Any]], driver: str | None, level: Severity) -> list[Check]:
    found = {str(f["node"]): f["cli"][name]["version"] for f in facts if "version" in f["cli"][name]}
    if driver is not None:
        found["the driver"] = driver
    if len(set(found.values())) <= 1:
        return [Check(f"{name} version", True, f"{next(iter(found.values()), 'none')} on every node")] if found else []
    return [
        Check(
            f"{name} version",
            False,
            f"{name} versions differ: {_spread(found)} (a row records one version)",
            f"install the same {name} version on every node",
            level,
        )
    ]


def _spread(by_node: dict[str, str]) -> str:
    groups: dict[str, list[str]] = {}
    for node, value in sorted(by_node.items()):
        groups.setdefault(value, []).append(node)
    return "; ".join(f"{value} on {', '.join(nodes)}" for value, nodes in sorted(groups.items()))


def _install_fix(name: str) -> str:
    return f"install it on the node ({find_adapter(name).installed_by}) or pass --agent-bin PATH valid on every node"


START_FIX = 'start each node that runs agents with --resources=\'{"agent": 1, "docker": 1}\''
_ENGINE_FIX = "start the node's Docker engine (attempts score there)"
_KEYS_FIX = "set the key in the node's environment before `ray start`, or in the job's runtime_env env_vars"


def cluster_checks(
    address: str | None,
    agent: str | None = None,
    agent_bin: str | None = None,
    agent_cmd: str | None = None,
    sandbox: str = "auto",
    timeout: float = CHECK_SECONDS,
) -> list[Check]:
    """`rgbridge doctor --ray-address`: every node offering `agent` checked. With `agent`, its
    CLI must be on every node in one version; without, every adapter's CLI is looked at."""
    ray = connect(address)
    agents = [agent] if agent else sorted(n for n, a in ADAPTERS.items() if not a.takes_command)
    facts = gather_facts(ray, agents, agent_bin, agent_cmd, sandbox, timeout)
    return facts_checks(facts, agents, required=agent is not None)


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok and c.severity == "error"]


def first_line(exc: BaseException) -> str:
    """A short reason: the first line of the message (of the task's own exception, for a Ray
    task that raised: a RayTaskError's own first line only names the task and its process)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return f"{type(cause).__name__}: {first_line(cause)}"
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
