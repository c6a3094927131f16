"""View benchmark: how long the run page of `rgbridge view` takes on a run of 100 attempts.

    python bench/view.py [--tasks 25] [--attempts 4] [--repeat 10] [--keep DIR]

The run folder is synthetic (tests/view_runs.py: rows in the sample recording's result shape,
one of them linked to a copy of the sample recording), tasks x attempts rows. The server is the
real one (uvicorn on loopback, in this process); each figure is the wall time of one HTTP GET
of the run page (report read, statistics with 2,000 bootstrap resamples per figure, the table
and the SVG), and of its live JSON, the runs page and one attempt page: cold (the view's memo of
reports and statistics cleared before each load, as on a run's first view) and warm (what a
reload or a live poll of an unchanged run costs). Prints median and worst.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.view.catalog import discover  # noqa: E402
from bridge.view.data import _MEMO  # noqa: E402
from tests.view_runs import Served, finished_run  # noqa: E402


def _get(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read()
    return time.perf_counter() - start, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=25)
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-view-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        scores = {f"task-{t:03d}": [(t * 7 + k * 11) % 36 for k in range(args.attempts)] for t in range(args.tasks)}
        scores["kv-ledger"] = scores.pop(next(iter(scores)))  # the one with the sample recording
        run = finished_run(base, "bench-run", scores)
        catalog = discover([run])
        rid = catalog.items[0].id
        print(f"run of {args.tasks * args.attempts} attempts ({args.tasks} tasks x {args.attempts})")
        with Served(catalog) as srv:
            for name, path in [
                ("run page", f"/runs/{rid}"),
                ("run live JSON", f"/api/runs/{rid}/live"),
                ("runs page", "/"),
                ("attempt page", f"/runs/{rid}/attempts/kv-ledger.a1"),
            ]:
                _get(srv.url(path))  # imports, first read
                for label, clear in (("cold", True), ("warm", False)):
                    times, size = [], 0
                    for _ in range(args.repeat):
                        if clear:  # as on a run's first view: report read and statistics computed
                            _MEMO.clear()
                        t, size = _get(srv.url(path))
                        times.append(t)
                    print(
                        f"{name:14s} {label} median {statistics.median(times) * 1000:7.1f} ms"
                        f"  worst {max(times) * 1000:7.1f} ms  ({size} bytes, {args.repeat} loads)"
                    )
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
