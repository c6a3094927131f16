"""Ray backend benchmark: local vs Ray throughput, and the per-job overhead of going through Ray.

    python bench/ray.py [--repos 6] [--local-workers 2] [--json FILE]

Starts a real Ray cluster on this machine (a head and two worker nodes as separate
`ray start --block` processes, one `docker` slot each; tests/raycluster.py) and scores the same
predictions folder, both profiles, result cache off:
  (a) local backend, `--local-workers` repos at a time;
  (b) Ray backend, every repo in flight (the cluster runs 3 jobs at a time);
  (c) per-job overhead on an idle cluster: repos scored one at a time (strict) on Ray; overhead =
      driver wall time of a job minus the time its profile took on the worker (packing, object
      store, scheduling, unpacking and hash checks, logs coming back).
The repos are the kv-ledger oracle under N task copies (same code, distinct task ids), so every
job does the same work. Scores must match between backends. On one 2-core machine sharing one
Docker engine expect no speed-up: the figure of interest is the overhead per job.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This file is named like the `ray` package: drop its folder from the path so `import ray` finds Ray.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bridge.scoring.run.engine import ScoreOptions
from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate
from bridge.tasks.catalog import Catalog

SOURCE_TASK = "kv-ledger"


def make_inputs(tmp: Path, repos: int) -> tuple[Catalog, Path]:
    tasks, preds = tmp / "tasks", tmp / "preds"
    tasks.mkdir()
    preds.mkdir()
    source = ROOT / "tasks" / SOURCE_TASK
    for i in range(repos):
        tid = f"{SOURCE_TASK}-{i}"
        shutil.copytree(source, tasks / tid, ignore=shutil.ignore_patterns("__pycache__"))
        manifest = tasks / tid / "task.toml"
        manifest.write_text(re.sub(r'(?m)^id\s*=\s*".*"$', f'id = "{tid}"', manifest.read_text()), encoding="utf-8")
        shutil.copytree(source / "solution", preds / tid)
    return Catalog.from_options(tasks), preds


def scores(report: Path) -> dict[str, dict[str, tuple]]:
    data = json.loads(report.read_text(encoding="utf-8"))
    return {
        e["repo_name"]: {
            n: (p["outcome"], p["pass_at_1"]["score"], p["dsr"]["success"])
            for n, p in e["rgbridge"]["profiles"].items()
        }
        for e in data["results"]
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=6)
    parser.add_argument("--local-workers", type=int, default=2)
    parser.add_argument("--overhead-jobs", type=int, default=3)
    parser.add_argument("--json", type=Path, metavar="FILE")
    args = parser.parse_args()

    from raycluster import LocalCluster

    from bridge.scoring.run.ray_backend import RayBackend

    figures: dict[str, object] = {"repos": args.repos, "jobs": 2 * args.repos}
    with tempfile.TemporaryDirectory(prefix="rgbridge-bench-ray-") as tmp_name:
        tmp = Path(tmp_name)
        catalog, preds = make_inputs(tmp, args.repos)
        # Warm-up (not timed): the dependency image of the oracle exists before either backend runs.
        evaluate(
            catalog,
            EvaluationRequest(
                predictions_dir=preds, output_dir=tmp / "warm", only=[f"{SOURCE_TASK}-0"], profile="both"
            ),
        )

        t0 = time.monotonic()
        local, _, _ = evaluate(
            catalog,
            EvaluationRequest(predictions_dir=preds, output_dir=tmp / "local", profile="both", use_cache=False),
            EvaluationOptions(workers=args.local_workers),
        )
        local_s = time.monotonic() - t0

        started = time.monotonic()
        cluster = LocalCluster(workers=2).start()
        figures["cluster_start_seconds"] = round(time.monotonic() - started, 1)
        try:
            os.environ.update(cluster.auth_env())  # before Ray is imported: it reads them then
            import ray

            ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
            backend = RayBackend()
            try:
                t0 = time.monotonic()
                remote, _, _ = evaluate(
                    catalog,
                    EvaluationRequest(predictions_dir=preds, output_dir=tmp / "ray", profile="both", use_cache=False),
                    EvaluationOptions(workers=2 * args.repos, scoring=ScoreOptions(backend=backend)),
                )
                ray_s = time.monotonic() - t0
                nodes = sorted({t["node"] for t in backend.timings})
                ray_profile = [t["score_seconds"] for t in backend.timings]
                backend.timings.clear()
                only = [f"{SOURCE_TASK}-{i}" for i in range(min(args.overhead_jobs, args.repos))]
                evaluate(
                    catalog,
                    EvaluationRequest(
                        predictions_dir=preds, output_dir=tmp / "overhead", profile="strict", only=only, use_cache=False
                    ),
                    EvaluationOptions(workers=1, scoring=ScoreOptions(backend=backend)),
                )
                overheads = [t["wall_seconds"] - t["score_seconds"] for t in backend.timings]
                worker_side = [t["worker_seconds"] - t["score_seconds"] for t in backend.timings]
            finally:
                backend.close()
                ray.shutdown()
        finally:
            cluster.stop()
        same = scores(local) == scores(remote)
        local_profile = [
            p["elapsed_seconds"]
            for e in json.loads(local.read_text())["results"]
            for p in e["rgbridge"]["profiles"].values()
        ]
        jobs = 2 * args.repos
        figures.update(
            {
                "local_seconds": round(local_s, 1),
                "local_jobs_per_minute": round(60 * jobs / local_s, 2),
                "ray_seconds": round(ray_s, 1),
                "ray_jobs_per_minute": round(60 * jobs / ray_s, 2),
                "ray_nodes_used": nodes,
                "speedup": round(local_s / ray_s, 2),
                "overhead_per_job_seconds": {
                    "median": round(statistics.median(overheads), 3),
                    "max": round(max(overheads), 3),
                },
                "overhead_on_worker_seconds": {"median": round(statistics.median(worker_side), 3)},
                "profile_seconds_median": {
                    "local": round(statistics.median(local_profile), 2),
                    "ray": round(statistics.median(ray_profile), 2),
                },
                "scores_identical": same,
            }
        )
    print(f"jobs: {jobs} ({args.repos} repos x 2 profiles), result cache off")
    print(
        f"local ({args.local_workers} workers): {figures['local_seconds']} s  "
        f"= {figures['local_jobs_per_minute']} jobs/min"
    )
    print(
        f"ray (head + 2 workers, 3 docker slots): {figures['ray_seconds']} s  "
        f"= {figures['ray_jobs_per_minute']} jobs/min  (x{figures['speedup']}; nodes used: {len(nodes)})"
    )
    print(
        f"per-job overhead on an idle cluster: median {figures['overhead_per_job_seconds']['median']} s, "
        f"max {figures['overhead_per_job_seconds']['max']} s "
        f"(of which on the worker: {figures['overhead_on_worker_seconds']['median']} s)"
    )
    print(
        f"one profile's own scoring time (median): local {figures['profile_seconds_median']['local']} s, "
        f"on a Ray node {figures['profile_seconds_median']['ray']} s"
    )
    print(f"scores identical: {same}; cluster start {figures['cluster_start_seconds']} s (not counted)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
