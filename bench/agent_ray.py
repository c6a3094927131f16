"""Agent runs on Ray: wall time on one and on two worker nodes, and the per-attempt overhead.

    python bench/agent_ray.py [--attempts 2] [--json FILE]

Starts a real Ray cluster on this machine (tests/raycluster.py: a head without the `agent`
resource and worker nodes with one `agent` and one `docker` unit each) and runs the same plan,
the `command` adapter's scripted agent (tests/agents/mcp_sdk_agent.py) solving kv-ledger and
word-duel × `--attempts`: (a) `--backend local --workers 2` for reference, (b) `--backend ray`
with one worker node, (c) the same with a second worker node added. Per attempt, the Ray
backend's own overhead is the driver's time (submitted to unpacked in the run folder, from the
attempt's `ray.json`) minus `Attempt.run` on the node: scheduling, the node's settings and CLI
probe, packing the recording and the folder, the object store, unpacking and verifying.
On one 2-core machine sharing one Docker engine, two nodes cannot be twice as fast.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# bench/ray.py is named like the `ray` package: drop this folder from the path so `import ray` finds Ray.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bridge.cli import main as rgbridge  # noqa: E402

TASKS = ("kv-ledger", "word-duel")
AGENT = ROOT / "tests" / "agents" / "mcp_sdk_agent.py"


def _payloads(tmp: Path) -> Path:
    files = {}
    for task in TASKS:
        src = ROOT / "tasks" / task / "solution"
        files[task] = {p.relative_to(src).as_posix(): p.read_text() for p in src.rglob("*") if p.is_file()}
    path = tmp / "payloads.json"
    path.write_text(json.dumps(files))
    return path


def _run(out: Path, payloads: Path, attempts: int, *extra: str) -> float:
    cmd = f"{sys.executable} {AGENT} solve-by-task {payloads} {{mcp_config}} {{workspace}}"
    args = ["run", "--agent", "command", "--agent-cmd", cmd, "--tasks", *TASKS, "--attempts", str(attempts)]
    args += ["--workers", "2", "--time-limit", "300", "--output-dir", str(out), "--run-id", "bench", *extra]
    started = time.monotonic()
    if rgbridge(args) != 0:
        raise SystemExit(f"run failed: {out}")
    return round(time.monotonic() - started, 2)


def _attempts(out: Path) -> list[dict[str, Any]]:
    facts = [json.loads(p.read_text()) for p in sorted(out.glob("attempts/*/a*/ray.json"))]
    for f in facts:
        f["overhead_seconds"] = round(f["driver_seconds"] - f["attempt_seconds"], 3)
    return facts


def _not_scored(out: Path) -> list[str]:
    (report,) = out.glob("report_*.json")
    rows = json.loads(report.read_text())["results"]
    return [f"{r['repo_name']}.a{r['attempt']}: {r.get('error')}" for r in rows if r.get("outcome") == "infra_error"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from raycluster import LocalCluster, joined

    keys = {"ANTHROPIC_API_KEY": "sk-bench-not-a-key", "OPENAI_API_KEY": "sk-bench-not-a-key"}
    result: dict[str, Any] = {"tasks": list(TASKS), "attempts": args.attempts}
    with tempfile.TemporaryDirectory(prefix="rgbridge-agent-ray-bench-") as tmp_name:
        tmp = Path(tmp_name)
        payloads = _payloads(tmp)
        os.environ.update(keys)
        result["local_wall_seconds"] = _run(tmp / "local", payloads, args.attempts)
        for k in keys:  # from here on the keys are the nodes' only
            os.environ.pop(k)
        with joined(LocalCluster(workers=1, resources={"agent": 1}, env=keys)) as cluster:
            for nodes in (1, 2):
                if nodes == 2:
                    cluster.add_worker(name="worker-2")
                out = tmp / f"ray{nodes}"
                wall = _run(out, payloads, args.attempts, "--backend", "ray", "--ray-address", cluster.address)
                facts = _attempts(out)
                result[f"ray_{nodes}_nodes"] = {
                    "wall_seconds": wall,
                    "nodes_used": len({f["node"] for f in facts}),
                    "overhead_seconds": [f["overhead_seconds"] for f in facts],
                    "overhead_median": statistics.median(f["overhead_seconds"] for f in facts),
                    "attempt_seconds": [f["attempt_seconds"] for f in facts],
                    "not_scored": _not_scored(out),
                }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
