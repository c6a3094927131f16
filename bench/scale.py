"""Scale benchmark: a leaderboard-like run of N predictions, each with its own requirements set,
unbounded and then under a disk budget (issue 23).

    PYTHONPATH=$PWD python3 bench/scale.py [--n 60] [--workers 2] [--budget-fraction 0.33] [--json FILE]

N predictions are built from the shipped Python oracles (kv-ledger, library-api, word-duel, in
turn), each under a task id of its own, each with a distinct requirements set: the oracle's
requirements plus a different combination of common pure-Python packages at different pins,
written in a shuffled order (all resolvable from the package cache or the index). They are
scored with `evaluate` (both profiles, `--workers 2`, no result cache) twice on never-seen sets
(after an unmeasured warm-up run over 9 repos that hold every pin of the pool with every
oracle, which fills the package cache, its sets then removed): once
with no budget, then (after the first run's sets are removed) under a budget of about a
third of the first run's disk high-water mark.

The bench keeps its books in a cache folder of its own (``RGBRIDGE_CACHE``; its wheel cache is
pre-filled with hard links to this machine's package cache, then the warm-up, so packages are
cached in both runs alike): it never evicts or prunes a set it did not build, on an engine shared with others.

Prints per run: throughput (repos per minute), p50/p95 seconds per repo, the disk high-water
mark of what the budget counts (sampled every second), evictions; then the targets: budgeted
high-water <= budget + one set, budgeted throughput within 10 % of unbounded, identical scores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ORACLES = ("kv-ledger", "library-api", "word-duel")
#: common pure-Python packages and pins that coexist with the oracles' and the test tools'
POOL = {
    "six": ("1.15.0", "1.16.0", "1.17.0"),
    "idna": ("3.7", "3.8", "3.10"),
    "certifi": ("2024.8.30", "2025.1.31"),
    "attrs": ("23.2.0", "24.2.0", "25.1.0"),
    "packaging": ("23.2", "24.1", "24.2"),
    "python-dateutil": ("2.8.2", "2.9.0.post0"),
    "pytz": ("2024.1", "2024.2", "2025.1"),
    "tomli": ("2.0.1", "2.2.1"),
}


def say(text: str) -> None:
    print(text, flush=True)


def requirement_sets(n: int, seed: int = 23) -> list[list[str]]:
    """n distinct sets of extra pins (1-3 packages each), in a shuffled order."""
    rng = random.Random(seed)
    seen: set[frozenset[str]] = set()
    out: list[list[str]] = []
    while len(out) < n:
        names = rng.sample(sorted(POOL), rng.randint(1, 3))
        pins = [f"{name}=={rng.choice(POOL[name])}" for name in names]
        if frozenset(pins) in seen:
            continue
        seen.add(frozenset(pins))
        out.append(pins)
    return out


def warmup_sets() -> list[list[str]]:
    """Sets that together hold every pin of POOL with every oracle: pin k of each package in set k."""
    width = max(len(pins) for pins in POOL.values())
    return [[f"{name}=={pins[k % len(pins)]}" for name, pins in sorted(POOL.items())] for k in range(width)]


def make_tree(base: Path, n: int, plan: list[tuple[str, list[str]]] | None = None) -> tuple[Path, Path]:
    """n predictions in turn from ORACLES with requirement_sets(n), or the (oracle, extra pins) of plan."""
    from bridge.tasks.catalog import Catalog

    shipped = Catalog.from_options(ROOT / "tasks")
    tasks_dir, preds = base / "tasks", base / "predictions"
    rng = random.Random(5)
    if plan is None:
        plan = [(ORACLES[i % len(ORACLES)], extra) for i, extra in enumerate(requirement_sets(n))]
    for i, (tid, extra) in enumerate(plan):
        src = shipped.get(tid).root
        new_id = f"{tid}-s{i:03d}"
        shutil.copytree(src, tasks_dir / new_id)
        toml = tasks_dir / new_id / "task.toml"
        toml.write_text(toml.read_text().replace(f'id = "{tid}"', f'id = "{new_id}"', 1))
        shutil.copytree(src / "solution", preds / new_id)
        req = preds / new_id / "requirements.txt"
        lines = [x for x in (req.read_text().splitlines() if req.is_file() else []) if x.strip()] + extra
        rng.shuffle(lines)
        req.write_text("\n".join(lines) + "\n")
    return tasks_dir, preds


def prefill_wheels(dest: Path) -> int:
    """Hard links to every wheel of this machine's package cache (the bench's own entries)."""
    real = Path(os.environ.get("RGBRIDGE_WHEEL_CACHE", "") or Path.home() / ".cache" / "rgbridge" / "wheels")
    count = 0
    for unit in real.iterdir() if real.is_dir() else []:
        files = [p for p in unit.iterdir() if p.suffix == ".whl"] if unit.is_dir() else []
        if len(files) != 1:
            continue
        (dest / unit.name).mkdir(parents=True, exist_ok=True)
        try:
            os.link(files[0], dest / unit.name / files[0].name)
        except OSError:
            shutil.copyfile(files[0], dest / unit.name / files[0].name)
        count += 1
    return count


class HighWater(threading.Thread):
    """Samples what the budget counts (kept_inventory) every second; keeps the maximum."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        from bridge.scoring.images.disk import kept_inventory
        from bridge.scoring.sandbox.docker_client import get_client

        client = get_client()
        while not self._halt.is_set():
            try:
                self.peak = max(self.peak, kept_inventory(client).budgeted_bytes)
            except Exception:  # a sample lost to a set vanishing mid-listing; the next one counts
                pass
            self._halt.wait(1.0)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak


def one_run(tasks_dir: Path, preds: Path, out: Path, workers: int, budget: str | None) -> dict[str, Any]:
    from bridge.scoring.images.disk import BUDGET_ENV, books_dir, evictions
    from bridge.scoring.images.sets import wait_for_cache_fills
    from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate
    from bridge.scoring.sandbox.docker_client import get_client
    from bridge.tasks.catalog import Catalog

    if budget is None:
        os.environ.pop(BUDGET_ENV, None)
        os.environ[BUDGET_ENV] = "unlimited"
    else:
        os.environ[BUDGET_ENV] = budget
    catalog = Catalog.from_options(tasks_dir)
    since = time.time()
    sampler = HighWater()
    sampler.start()
    started = time.monotonic()
    report, _writer, _plan = evaluate(
        catalog,
        EvaluationRequest(predictions_dir=preds, output_dir=out, profile="both", use_cache=False),
        EvaluationOptions(workers=workers),
    )
    wall = time.monotonic() - started
    peak = sampler.stop()
    wait_for_cache_fills()
    data = json.loads(report.read_text())
    per_repo = []
    scores: dict[str, Any] = {}
    outcomes: dict[str, int] = {}
    for entry in data["results"]:
        profiles = entry["rgbridge"]["profiles"]
        per_repo.append(max(p.get("elapsed_seconds") or 0.0 for p in profiles.values()))
        scores[entry["repo_name"]] = {
            name: (p["outcome"], p["pass_at_1"]["passed"], p["pass_at_1"]["total"], p["dsr"]["success"])
            for name, p in sorted(profiles.items())
        }
        for p in profiles.values():
            outcomes[p["outcome"]] = outcomes.get(p["outcome"], 0) + 1
    per_repo.sort()
    p95 = per_repo[min(len(per_repo) - 1, int(round(0.95 * (len(per_repo) - 1))))]
    return {
        "budget": budget,
        "wall_seconds": round(wall, 1),
        "repos_per_minute": round(len(per_repo) / wall * 60, 2),
        "p50_seconds": round(statistics.median(per_repo), 1),
        "p95_seconds": round(p95, 1),
        "high_water_bytes": peak,
        "evictions": len(evictions(books_dir(get_client()), since)),
        "outcomes": outcomes,
        "scores": scores,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60, help="predictions (default 60)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-fraction", type=float, default=1 / 3, help="budget / unbounded high-water mark")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unmeasured run that fills the package cache")
    ap.add_argument("--json", type=Path, metavar="FILE")
    args = ap.parse_args(argv)

    base = Path(tempfile.mkdtemp(prefix="rgbridge-scale-"))
    cache = base / "cache"
    cache.mkdir()
    real_tools = Path.home() / ".cache" / "rgbridge" / "tools"
    if real_tools.is_dir():
        (cache / "tools").symlink_to(real_tools)
    os.environ["RGBRIDGE_CACHE"] = str(cache)  # the bench's own books: it evicts only its own sets
    os.environ.pop("RGBRIDGE_WHEEL_CACHE", None)
    say(f"package cache prefilled with {prefill_wheels(cache / 'wheels')} wheel(s) (hard links)")

    from bridge.scoring.images.disk import format_size, kept_inventory, prune, set_estimate
    from bridge.scoring.sandbox.docker_client import get_client

    client = get_client()
    tasks_dir, preds = make_tree(base, args.n)
    say(f"{args.n} predictions with distinct requirement sets in {preds}")
    try:
        if not args.no_warmup:  # every wheel in the package cache before the measured runs
            # every oracle with every pin of POOL (len(ORACLES) x 3 repos), not the N measured
            # repos again: the same wheels cached, in a fraction of the time
            plan = [(tid, extra) for tid in ORACLES for extra in warmup_sets()]
            warm_tasks, warm_preds = make_tree(base / "warmup", len(plan), plan)
            say(f"warm-up run over {len(plan)} repos holding every pin (fills the package cache; not measured)")
            one_run(warm_tasks, warm_preds, base / "out-warmup", args.workers, None)
            prune(client, max_bytes=0)
        say("run 1: no budget")
        free = one_run(tasks_dir, preds, base / "out-free", args.workers, None)
        one_set = set_estimate(kept_inventory(client), "python-set")
        budget_bytes = int(free["high_water_bytes"] * args.budget_fraction)
        prune(client, max_bytes=0)  # the first run's sets: the second run builds them again
        say(f"run 2: budget {format_size(budget_bytes)} ({args.budget_fraction:.2f} of the high-water mark)")
        bounded = one_run(tasks_dir, preds, base / "out-budget", args.workers, str(budget_bytes))
    finally:
        prune(client, max_bytes=0)
        os.environ.pop("RGBRIDGE_DISK_BUDGET", None)
    same = free["scores"] == bounded["scores"]
    ratio = bounded["repos_per_minute"] / free["repos_per_minute"]
    within = bounded["high_water_bytes"] <= budget_bytes + one_set
    say("")
    say("| run | repos/min | p50 s | p95 s | disk high-water | evictions | outcomes |")
    say("|---|---|---|---|---|---|---|")
    for name, r in (("no budget", free), (f"budget {format_size(budget_bytes)}", bounded)):
        say(
            f"| {name} | {r['repos_per_minute']} | {r['p50_seconds']} | {r['p95_seconds']} | "
            f"{format_size(r['high_water_bytes'])} | {r['evictions']} | {r['outcomes']} |"
        )
    say("")
    say(f"one set ~{format_size(one_set)}; high-water within budget + one set: {'met' if within else 'MISSED'}")
    say(f"throughput under budget / unbounded: {ratio:.2f} ({'met' if ratio >= 0.9 else 'MISSED'}: >= 0.90)")
    say(f"scores identical: {'met' if same else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps({"free": free, "budget": bounded, "budget_bytes": budget_bytes}, indent=2))
    shutil.rmtree(base, ignore_errors=True)
    return 0 if (same and within) else 1


if __name__ == "__main__":
    raise SystemExit(main())
