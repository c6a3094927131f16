"""Scoring benchmark: cold / cached / warm re-scores, an upstream-style baseline, parallel evaluate.

    python bench/scoring.py [--reps 3] [--cold-reps 1] [--eval-profile both] [--skip-eval] [--json FILE]

On the shipped `library-api` oracle (fastapi, real dependencies):

  (a) cold scores, both profiles, of a never-seen requirements set (the oracle's requirements.txt
      plus a line that changes its key but not what gets installed, so no dependency layer and
      no result exists for it): (a0) with an empty package cache (a fresh folder as
      RGBRIDGE_WHEEL_CACHE: every wheel is downloaded; RGBRIDGE_CLOSEST_SET=never, so no set an
      earlier run left on disk is copied instead), then (a1) with the packages already in that
      cache (another never-seen set, default settings); each case says how its sets were made;
  (b) re-score of an unchanged snapshot (result-cache hit), both profiles;
  (c) re-score after a one-file change (deps image cached, result-cache miss): compat alone —
      the like-for-like comparison with (d) — and both profiles;
  (d) the upstream-style flow: one image FROM our base with the repo copied in and requirements +
      test tools installed (`docker build --no-cache`, separate RUN steps, errors ignored as
      upstream does), the compat entrypoint run in it, the log graded by the upstream parsers,
      the image removed — serial, as upstream runs;
  (e) `evaluate` over 6 repos (oracle copies under 6 task ids, each with a distinct nonce file so
      nothing hits the cache) with 1 and with 2 workers;
  (o) the outside path: `rgbridge score` in a fresh process, as a user runs it, both profiles:
      (o-a1) a never-seen set with its packages cached (after another never-seen set with them,
      which also fills the bytecode store) against (o-c) a one-file change, each timed to its
      result.json and to the process's exit (what the user waits for);
  (f) pipelined cold scoring: `evaluate`, one worker, over four repos with never-seen sets
      (packages cached), with sets built ahead (RGBRIDGE_PREPARE_AHEAD default) and without
      (0), with the timeline of each repo: its sets' preparation and its run.

Prints medians and the targets: (c) >= 5x faster than (d) with identical scores; (b) < 1 s;
(a1) <= 1.5x (c, both profiles; issue 23); (a0) >= 2x faster than (d); identical scores in (a0) (a1) (c) (d);
2 workers >= 1.6x the throughput of 1; (o-a1) <= 1.5x (o-c) (issue 41); (f) with sets ahead no
longer than the slowest preparation plus four warm runs (issue 41); peak RSS of this process < 200 MB. The upstream base
image (python:3.10-slim) cannot be pulled here, so (d) starts FROM our base image, which already
has curl/procps/netcat: upstream's apt-get step is left out, which only flatters (d).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound

from bridge.scoring import coverage, upstream
from bridge.scoring.images.base import ensure_base_image, host_pip_index_settings, volume_exists
from bridge.scoring.images.sets import (
    CLOSEST_ENV,
    deps_image_tag,
    remove_volume,
    volume_for,
    wait_for_cache_fills,
    wait_for_compiles,
)
from bridge.scoring.python.compat import compat_extras
from bridge.scoring.result import DSRResult, PassAt1
from bridge.scoring.run.engine import score_repo
from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate
from bridge.scoring.run.workdir import ASSETS, requirements_of
from bridge.scoring.sandbox.containers import read_logs, remove_container, wait_with_timeout
from bridge.scoring.sandbox.docker_client import LABEL_KIND, get_client
from bridge.scoring.types import ScoreRequest, profile_choice
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

ROOT = Path(__file__).resolve().parent.parent
TASK_ID = "library-api"
EVAL_TASKS = ("kv-ledger", "library-api", "word-duel")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def say(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------- engine runs


def timed_score(task: Task, repo: Path, out: Path, *, profile: str, use_cache: bool) -> tuple[float, Any]:
    started = time.monotonic()
    result = score_repo(
        task,
        repo,
        ScoreRequest(
            profile=profile_choice(profile), use_cache=use_cache, output_dir=out, run_id=f"bench-{uuid.uuid4().hex[:8]}"
        ),
    )
    return time.monotonic() - started, result


def remove_deps_images(client: docker.DockerClient, task: Task, repo: Path) -> list[str]:
    """Drop the strict and compat dependency sets of this repo's requirements (tags and volumes)."""
    base = ensure_base_image(client)
    reqs = requirements_of(repo)
    removed = []
    for tag in (
        deps_image_tag(base, reqs, in_volume=True),
        deps_image_tag(base, reqs, compat_extras(task, repo), in_volume=True),
    ):
        try:
            client.images.remove(tag)  # by name: a set's tag sits on the base image
            removed.append(tag)
        except ImageNotFound:
            pass
        if remove_volume(client, volume_for(tag, "/opt/venv").name):
            removed.append(volume_for(tag, "/opt/venv").name)
    return removed


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def set_paths(out: Path) -> str:
    """How each profile's dependency set was made, from its build log: ``from scratch`` or
    ``closest`` (started from the closest set on disk, ``images/sets/closest.py``)."""
    found = []
    for log in sorted((out / "logs").glob("*/build.log")):
        text = log.read_text(encoding="utf-8", errors="replace")
        closest = "started from the closest set" in text and "built from scratch" not in text
        found.append(f"{log.parent.name}: {'closest' if closest else 'from scratch'}")
    return ", ".join(found) or "no build log"


def summarise(dsr: DSRResult, p1: PassAt1) -> tuple[bool, int, int, float]:
    return (dsr.success, p1.passed, p1.total, p1.score)


def summarise_profile(p: Any) -> tuple[bool, int, int, float]:
    return summarise(p.dsr, p.pass_at_1)


# --------------------------------------------------------------------------- upstream-style baseline

UPSTREAM_DOCKERFILE = """FROM {base}
LABEL rgbridge.owner=rgbridge rgbridge.kind=bench-upstream
{args}WORKDIR /repo
COPY ./generated_repo /repo
RUN if [ -f requirements.txt ]; then pip install --no-cache-dir -r requirements.txt 2>/dev/null || true; \\
    else pip install --no-cache-dir flask fastapi uvicorn django djangorestframework requests sqlalchemy pydantic \\
    2>/dev/null || true; fi
COPY ./golden_tests /repo/tests
RUN if [ -f tests/requirements.txt ]; then pip install --no-cache-dir -r tests/requirements.txt 2>/dev/null || true; fi
RUN pip install --no-cache-dir pytest pytest-json-report requests httpx 2>/dev/null || true
COPY entrypoint.sh /entrypoint.sh
EXPOSE 8080
ENTRYPOINT ["bash", "/entrypoint.sh"]
"""


def _context(task: Task, repo: Path, base: str, buildargs: dict[str, str]) -> io.BytesIO:
    buf = io.BytesIO()
    ignore = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".DS_Store", "node_modules", ".venv", "venv")
    with tempfile.TemporaryDirectory(prefix="bench-ctx-") as tmp:
        ctx = Path(tmp)
        shutil.copytree(repo, ctx / "generated_repo", ignore=ignore)
        shutil.copytree(task.tests_dir, ctx / "golden_tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copyfile(ASSETS / "compat_entrypoint.sh", ctx / "entrypoint.sh")
        args = "".join(f"ARG {k}\n" for k in sorted(buildargs))
        (ctx / "Dockerfile").write_text(UPSTREAM_DOCKERFILE.format(base=base, args=args), encoding="utf-8")
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(ctx, arcname=".")
    buf.seek(0)
    return buf


def upstream_style(client: docker.DockerClient, task: Task, repo: Path) -> dict[str, Any]:
    """AC on the host, build --no-cache, run the entrypoint, grade the log, rmi: timed."""
    base = ensure_base_image(client)
    tag = f"rgbridge-bench-upstream:{uuid.uuid4().hex[:10]}"
    t0 = time.monotonic()
    coverage.static_api_coverage(task.readme, repo)
    buildargs = host_pip_index_settings()
    error = ""
    for chunk in client.api.build(
        fileobj=_context(task, repo, base, buildargs),
        custom_context=True,
        tag=tag,
        nocache=True,
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
        buildargs=buildargs,
        timeout=900,
    ):
        if "error" in chunk:
            error = str(chunk["error"])
    t_build = time.monotonic() - t0
    if error:
        raise RuntimeError(f"upstream-style build failed: {error}")
    env = {"REPO_LANG": task.lang, "SERVICE_PORT": str(task.port), "STARTUP_TIMEOUT": "15", "TEST_TIMEOUT": "300"}
    container = client.containers.create(
        tag,
        name=f"rgbridge-bench-upstream-{uuid.uuid4().hex[:8]}",
        environment=env,
        mem_limit="2g",
        network_mode="none",
        labels={"rgbridge.owner": "rgbridge", "rgbridge.kind": "bench-upstream"},
    )
    try:
        container.start()
        wait_with_timeout(container, upstream.CONTAINER_TIMEOUT)
        log = upstream.combine_container_log(
            read_logs(container, stdout=True, stderr=False), read_logs(container, stdout=False, stderr=True)
        )
    finally:
        remove_container(container)
    dsr, p1 = upstream.grade_upstream_log(log, task.lang)
    t_run = time.monotonic() - t0 - t_build
    try:
        client.images.remove(tag, force=True)
    except APIError:
        pass
    total = time.monotonic() - t0
    return {"seconds": total, "build": t_build, "run": t_run, "dsr": dsr, "pass_at_1": p1}


# --------------------------------------------------------------------------- evaluate scaling


def make_eval_tree(base: Path, catalog: Catalog) -> tuple[Path, Path]:
    """6 tasks (the 3 shipped ones and a renamed copy of each) and a predictions dir of oracles."""
    tasks_dir, preds = base / "tasks", base / "predictions"
    for tid in EVAL_TASKS:
        src = catalog.get(tid).root
        for new_id in (tid, f"{tid}-copy"):
            dest = tasks_dir / new_id
            shutil.copytree(src, dest)
            toml = dest / "task.toml"
            toml.write_text(
                toml.read_text(encoding="utf-8").replace(f'id = "{tid}"', f'id = "{new_id}"', 1), encoding="utf-8"
            )
            shutil.copytree(src / "solution", preds / new_id)
    return tasks_dir, preds


def time_evaluate(tasks_dir: Path, preds: Path, out: Path, workers: int, profile: str) -> float:
    for repo in preds.iterdir():  # a distinct snapshot per run: no result-cache hit
        (repo / ".bench-nonce").write_text(uuid.uuid4().hex, encoding="utf-8")
    catalog = Catalog.from_options(tasks_dir)
    started = time.monotonic()
    report, writer, _plan = evaluate(
        catalog,
        EvaluationRequest(predictions_dir=preds, output_dir=out, profile=profile),
        EvaluationOptions(workers=workers),
    )
    seconds = time.monotonic() - started
    data = json.loads(report.read_text(encoding="utf-8"))
    scores = [(r["repo_name"], r["pass_at_1"]["score"]) for r in data["results"]]
    bad = [s for s in scores if s[1] != 1.0]
    if len(scores) != 6 or bad:
        raise RuntimeError(f"evaluate gave unexpected scores: {scores}")
    return seconds


def wait_for_reapers(timeout: float = 180.0) -> float:
    """Wait until no build container is left compiling a set's bytecode or filling the bytecode
    store (a fresh process hands them to detached reapers, bridge/scoring/images/sets/reaper.py):
    a score timed while the previous one's compiles still run shares the CPU with them. The
    seconds waited."""
    client = get_client()
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        running = client.containers.list(filters={"label": f"{LABEL_KIND}=deps-build", "status": "running"})
        if not running:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def outside_score(repo: Path, out: Path) -> tuple[float, float, Any]:
    """`rgbridge score` in a fresh process, once no earlier score's compile is running: seconds until
    its result.json, until its exit, and the result."""
    wait_for_reapers()
    cmd = [sys.executable, "-m", "bridge.cli", "score", "--task", TASK_ID, "--profile", "both", "--no-cache"]
    cmd += ["--output-dir", str(out), "--json", str(repo)]
    # a user's shell: the bench runner's PYTHONDONTWRITEBYTECODE would make every fresh process
    # compile the bridge's modules again (0.4 s of each score, warm or cold)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    result_at = None
    while proc.poll() is None:
        if result_at is None and (out / "result.json").is_file():
            result_at = time.monotonic() - started
        time.sleep(0.05)
    exit_at = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"rgbridge score failed: {proc.stderr.read() if proc.stderr else ''}")
    data = json.loads((out / "result.json").read_text(encoding="utf-8"))
    return (result_at if result_at is not None else exit_at), exit_at, data


def profile_seconds(data: Any) -> str:
    """Each profile's own time in a result (the slower one is the score's path)."""
    return ", ".join(f"{name} {p['elapsed_seconds']:.2f}s" for name, p in sorted(data["profiles"].items()))


def outside_pair(data: Any) -> tuple[Any, Any]:
    return tuple(  # type: ignore[return-value]
        (p["dsr"]["success"], p["pass_at_1"]["passed"], p["pass_at_1"]["total"])
        for p in (data["profiles"]["strict"], data["profiles"]["compat"])
    )


def make_batch_tree(base: Path, catalog: Catalog, n: int = 4) -> tuple[Path, Path]:
    """``n`` copies of the oracle task under their own ids; predictions whose requirements each
    make a never-seen set (same packages, a new key)."""
    tasks_dir, preds = base / "tasks", base / "predictions"
    src = catalog.get(TASK_ID).root
    for k in range(n):
        new_id = f"{TASK_ID}-batch{k}"
        shutil.copytree(src, tasks_dir / new_id)
        toml = tasks_dir / new_id / "task.toml"
        toml.write_text(toml.read_text(encoding="utf-8").replace(f'id = "{TASK_ID}"', f'id = "{new_id}"', 1))
        shutil.copytree(src / "solution", preds / new_id)
    return tasks_dir, preds


def time_batch(tasks_dir: Path, preds: Path, out: Path, ahead: int | None) -> dict[str, Any]:
    """One-worker `evaluate` over the batch, each repo a never-seen set; the timeline of events."""
    for repo in sorted(preds.iterdir()):
        reqs = repo / "requirements.txt"
        base_text = reqs.read_text(encoding="utf-8").split("fastapi>=0.0.")[0]
        reqs.write_text(base_text + f"fastapi>=0.0.{uuid.uuid4().int % 10**12}\n", encoding="utf-8")
    saved = os.environ.get("RGBRIDGE_PREPARE_AHEAD")
    if ahead is not None:
        os.environ["RGBRIDGE_PREPARE_AHEAD"] = str(ahead)
    events: list[tuple[float, str, str]] = []
    done: dict[str, float] = {}
    catalog = Catalog.from_options(tasks_dir)
    started = time.monotonic()
    try:
        report, _writer, _plan = evaluate(
            catalog,
            EvaluationRequest(predictions_dir=preds, output_dir=out, profile="both"),
            EvaluationOptions(
                workers=1,
                progress=lambda tid, msg: events.append((time.monotonic() - started, tid, msg)),
                on_done=lambda tid, _e: done.__setitem__(tid, time.monotonic() - started),
            ),
        )
    finally:
        _restore("RGBRIDGE_PREPARE_AHEAD", saved)
    total = time.monotonic() - started
    data = json.loads(report.read_text(encoding="utf-8"))
    scores = [r["pass_at_1"]["score"] for r in data["results"]]
    if scores != [1.0] * len(scores):
        raise RuntimeError(f"the batch scored {scores}")
    timeline: dict[str, dict[str, float]] = {}
    previous_done = 0.0
    for tid in sorted(done, key=done.__getitem__):
        own = [(t, m) for t, who, m in events if who == tid]
        prep = [t for t, m in own if m == "preparing sets ahead"]
        ready = [t for t, m in own if m.startswith("sets prepared ahead")]
        timeline[tid] = {
            "prep_start": prep[0] if prep else float("nan"),
            "prep_end": ready[0] if ready else float("nan"),
            "run_start": previous_done,
            "run_end": done[tid],
        }
        previous_done = done[tid]
    return {"total": total, "timeline": timeline}


def say_timeline(label: str, batch: dict[str, Any]) -> None:
    say(f"(f) {label}: {batch['total']:.1f}s")
    for tid, t in batch["timeline"].items():
        prep = (
            f"sets built ahead {t['prep_start']:6.1f}-{t['prep_end']:6.1f}s"
            if t["prep_end"] == t["prep_end"]
            else "sets built by its own score"
        )
        say(f"    {tid:24s} {prep:36s} scored {t['run_start']:6.1f}-{t['run_end']:6.1f}s")


def remove_outside_sets(task: Task, repo: Path, texts: list[str]) -> None:
    """Drop the never-seen sets (o) made: a fresh process hands a set's bytecode compile to a
    detached reaper, whose container holds the set's volume until it ends (a minute at most here)."""
    client = get_client()
    reqs_path = repo / "requirements.txt"
    original = reqs_path.read_text(encoding="utf-8")
    deadline = time.monotonic() + 120
    for text in texts:
        reqs_path.write_text(text, encoding="utf-8")
        base = ensure_base_image(client)
        reqs = requirements_of(repo)
        tags = [
            deps_image_tag(base, reqs, in_volume=True),
            deps_image_tag(base, reqs, compat_extras(task, repo), in_volume=True),
        ]
        while True:
            remove_deps_images(client, task, repo)
            kept = [t for t in tags if volume_exists(client, volume_for(t, "/opt/venv").name)]
            if not kept or time.monotonic() > deadline:
                break
            time.sleep(5)
    reqs_path.write_text(original, encoding="utf-8")


def run_outside(reps: int, task: Task, repo: Path, work: Path, figures: dict[str, Any]) -> dict[str, bool]:
    """(o): never-seen sets with cached packages and one-file changes, alternated, in fresh processes;
    the never-seen sets are removed afterwards."""
    reqs_path = repo / "requirements.txt"
    original = reqs_path.read_text(encoding="utf-8")
    target = repo / "app" / "main.py"
    cold_r, cold_x, warm_r, warm_x, pairs = [], [], [], [], []
    made: list[str] = []
    # a never-seen set first: after it its packages are in the cache, and their bytecode in the
    # store (bridge/scoring/images/sets/bytecode.py), as after any earlier set with them
    reqs_path.write_text(original + f"fastapi>=0.0.{uuid.uuid4().int % 10**12}\n", encoding="utf-8")
    made.append(reqs_path.read_text(encoding="utf-8"))
    outside_score(repo, work / "o-prime")
    wait_for_cache_fills()
    for i in range(reps):
        reqs_path.write_text(original + f"fastapi>=0.0.{uuid.uuid4().int % 10**12}\n", encoding="utf-8")
        made.append(reqs_path.read_text(encoding="utf-8"))
        r, x, data = outside_score(repo, work / f"o-a1-{i}")
        cold = data
        cold_r.append(r)
        cold_x.append(x)
        pairs.append(outside_pair(data))
        with target.open("a", encoding="utf-8") as fh:
            fh.write(f"# bench edit {uuid.uuid4().hex}\n")
        r, x, data = outside_score(repo, work / f"o-c-{i}")
        warm_r.append(r)
        warm_x.append(x)
        pairs.append(outside_pair(data))
        say(
            f"(o) rgbridge score, run {i + 1}: never-seen set, packages cached {cold_r[-1]:.2f}s to result, "
            f"{cold_x[-1]:.2f}s to exit (profiles {profile_seconds(cold)}); one-file change {warm_r[-1]:.2f}s / "
            f"{warm_x[-1]:.2f}s (profiles {profile_seconds(data)}); ratio {cold_x[-1] / warm_x[-1]:.2f}x"
        )
    reqs_path.write_text(original, encoding="utf-8")
    remove_outside_sets(task, repo, made)
    ratios = [c / w for c, w in zip(cold_x, warm_x, strict=True)]
    figures.update(
        {
            "o_a1_result_s": cold_r,
            "o_a1_exit_s": cold_x,
            "o_c_result_s": warm_r,
            "o_c_exit_s": warm_x,
            "o_a1_over_c": ratios,
            "o_scores": pairs,
        }
    )
    say(
        f"(o) outside path: (o-a1) median {median(cold_x):.2f}s ({min(cold_x):.2f}-{max(cold_x):.2f}), "
        f"(o-c) median {median(warm_x):.2f}s ({min(warm_x):.2f}-{max(warm_x):.2f}), ratio per run "
        f"{[round(x, 2) for x in ratios]} (target <= 1.5x in each)"
    )
    return {
        "(o-a1) <= 1.5x (o-c), every run": all(x <= 1.5 for x in ratios),
        "(o) identical scores": len(set(pairs)) == 1,
    }


def run_pipeline(catalog: Catalog, work: Path, warm_both: float, figures: dict[str, Any]) -> dict[str, bool]:
    """(f): the batch without sets ahead, then with them."""
    tasks_dir, preds = make_batch_tree(work / "batch", catalog)
    serial = time_batch(tasks_dir, preds, work / "batch-serial", 0)
    say_timeline("one worker, four never-seen sets, no sets ahead", serial)
    piped = time_batch(tasks_dir, preds, work / "batch-ahead", None)
    say_timeline("one worker, four never-seen sets, sets built ahead", piped)
    preps = [t["prep_end"] - t["prep_start"] for t in piped["timeline"].values() if t["prep_end"] == t["prep_end"]]
    # the first repo builds its own sets: its preparation is its cold score less a warm run
    first = next(iter(piped["timeline"].values()))
    preps.append(max(0.0, first["run_end"] - first["run_start"] - warm_both))
    bound = max(preps) + 4 * warm_both
    figures.update({"f_serial": serial, "f_ahead": piped, "f_bound_s": bound})
    say(
        f"(f) with sets ahead {piped['total']:.1f}s, without {serial['total']:.1f}s; slowest preparation "
        f"{max(preps):.1f}s + 4 warm runs ({warm_both:.2f}s each) = {bound:.1f}s"
    )
    return {"(f) sets ahead <= slowest preparation + 4 runs": piped["total"] <= bound}


def warm_both_runs(task: Task, repo: Path, work: Path, reps: int) -> list[float]:
    """(c) both profiles: one-file changes on a set already on disk."""
    target_file = repo / "app" / "main.py"
    timed_score(task, repo, work / "c-prime", profile="both", use_cache=True)
    times = []
    for i in range(reps):
        with target_file.open("a", encoding="utf-8") as fh:
            fh.write(f"# bench edit {uuid.uuid4().hex}\n")
        times.append(timed_score(task, repo, work / f"c-only{i}", profile="both", use_cache=True)[0])
    return times


def run_only(args: argparse.Namespace, task: Task, repo: Path, work: Path, catalog: Catalog) -> int:
    figures: dict[str, Any] = {}
    checks: dict[str, bool] = {}
    if args.only == "o":
        checks.update(run_outside(args.reps, task, repo, work, figures))
    else:
        warm = warm_both_runs(task, repo, work, args.reps)
        say(f"(c) one-file change, both: median {median(warm):.2f}s {[round(x, 2) for x in warm]}")
        figures["c_warm_both_s"] = median(warm)
        checks.update(run_pipeline(catalog, work, median(warm), figures))
    for name, ok in checks.items():
        say(f"  {'MET ' if ok else 'MISS'} {name}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str), encoding="utf-8")
    return 0


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions of (b) and (c) (default 3)")
    ap.add_argument("--cold-reps", type=int, default=1, help="repetitions of (a) and (d) (default 1)")
    ap.add_argument("--eval-profile", default="both", choices=("both", "strict", "compat"))
    ap.add_argument("--skip-eval", action="store_true", help="leave out (e)")
    ap.add_argument("--skip-outside", action="store_true", help="leave out (o)")
    ap.add_argument("--skip-pipeline", action="store_true", help="leave out (f)")
    ap.add_argument("--only", choices=("o", "f"), help="only (c) and this case")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)

    client = get_client()
    catalog = Catalog.from_options(ROOT / "tasks")
    task = catalog.get(TASK_ID)
    figures: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="rgbridge-bench-"))
    try:
        repo = work / "repo"
        shutil.copytree(task.solution_dir, repo)
        if args.only:
            return run_only(args, task, repo, work, catalog)

        cold: dict[str, list[float]] = {"a0": [], "a1": []}
        cold_scores: list[tuple[Any, Any]] = []
        made: list[str] = []  # requirement files whose sets the cold cases built
        reqs_path = repo / "requirements.txt"
        original_reqs = reqs_path.read_text(encoding="utf-8")
        cold_paths: dict[str, list[str]] = {"a0": [], "a1": []}
        saved = {name: os.environ.get(name) for name in ("RGBRIDGE_WHEEL_CACHE", CLOSEST_ENV)}
        for i in range(args.cold_reps):
            os.environ["RGBRIDGE_WHEEL_CACHE"] = str(work / f"wheels-{i}")  # empty: a fresh machine
            try:
                for case, label in (("a0", "nothing cached"), ("a1", "packages cached")):
                    # (a0) is a fresh machine's build: every wheel downloaded, none of the sets an
                    # earlier run left on disk copied instead (which would also leave the cache
                    # without them, so (a1) would not have its packages cached either)
                    if case == "a0":
                        os.environ[CLOSEST_ENV] = "never"
                    else:
                        _restore(CLOSEST_ENV, saved[CLOSEST_ENV])
                    # A never-seen set: same packages, a new key (a floor every version meets).
                    reqs_path.write_text(
                        original_reqs + f"fastapi>=0.0.{uuid.uuid4().int % 10**12}\n", encoding="utf-8"
                    )
                    out = work / f"{case}-{i}"
                    secs, res = timed_score(task, repo, out, profile="both", use_cache=False)
                    cold[case].append(secs)
                    paths = set_paths(out)
                    cold_paths[case].append(paths)
                    pair = (summarise_profile(res.profile("strict")), summarise_profile(res.profile("compat")))
                    cold_scores.append(pair)
                    say(
                        f"({case}) cold score, never-seen requirements, {label} (both): {secs:.2f}s "
                        f"strict={pair[0]} compat={pair[1]} [sets {paths}]"
                    )
                    made.append(reqs_path.read_text(encoding="utf-8"))
                    wait_for_cache_fills()  # the host fills the cache after a score: (a1) starts with it full
                    # bytecode still being compiled into the set (after its score) is not the next case's
                    wait_for_compiles()
            finally:
                for name, value in saved.items():
                    _restore(name, value)
        # The sets made above are removed only now: each key is new anyway (never seen), and on a
        # file system mounted with online discard (this machine's) deleting a set slows the next
        # second or two of I/O, which would be charged to the following case, not to scoring.
        for text in made:
            reqs_path.write_text(text, encoding="utf-8")
            remove_deps_images(client, task, repo)
        reqs_path.write_text(original_reqs, encoding="utf-8")
        figures["a0_cold_empty_cache_both_s"] = median(cold["a0"])
        figures["a1_cold_cached_packages_both_s"] = median(cold["a1"])
        figures["a_set_paths"] = cold_paths

        timed_score(task, repo, work / "b-prime", profile="both", use_cache=True)  # fill the cache
        cached = [timed_score(task, repo, work / f"b{i}", profile="both", use_cache=True)[0] for i in range(args.reps)]
        figures["b_cached_both_s"] = median(cached)
        say(f"(b) cached re-score (both): median {median(cached):.3f}s  {[round(x, 3) for x in cached]}")

        warm_compat, warm_both, warm_scores, warm_pairs = [], [], [], []
        target_file = repo / "app" / "main.py"
        for i in range(args.reps):
            with target_file.open("a", encoding="utf-8") as fh:
                fh.write(f"# bench edit {uuid.uuid4().hex}\n")
            secs, res = timed_score(task, repo, work / f"c{i}", profile="compat", use_cache=True)
            warm_compat.append(secs)
            warm_scores.append(summarise_profile(res.profile("compat")))
            with target_file.open("a", encoding="utf-8") as fh:
                fh.write(f"# bench edit {uuid.uuid4().hex}\n")
            secs_b, res_b = timed_score(task, repo, work / f"cb{i}", profile="both", use_cache=True)
            warm_both.append(secs_b)
            warm_pairs.append((summarise_profile(res_b.profile("strict")), summarise_profile(res_b.profile("compat"))))
        figures["c_warm_compat_s"] = median(warm_compat)
        figures["c_warm_both_s"] = median(warm_both)
        say(f"(c) one-file change, compat: median {median(warm_compat):.2f}s {[round(x, 2) for x in warm_compat]}")
        say(f"(c) one-file change, both:   median {median(warm_both):.2f}s {[round(x, 2) for x in warm_both]}")

        ups, up_scores = [], []
        for _ in range(args.cold_reps):
            u = upstream_style(client, task, repo)
            ups.append(u["seconds"])
            up_scores.append(summarise(u["dsr"], u["pass_at_1"]))
            say(
                f"(d) upstream-style fresh build + run: {u['seconds']:.2f}s (build {u['build']:.2f}s, "
                f"run+grade {u['run']:.2f}s) score={up_scores[-1]}"
            )
        figures["d_upstream_s"] = median(ups)
        ratio = figures["d_upstream_s"] / figures["c_warm_compat_s"]
        identical = len(set(warm_scores + up_scores)) == 1
        figures["d_over_c"] = ratio
        figures["scores_identical"] = identical
        figures["scores"] = {
            "c_compat": warm_scores,
            "d_upstream": up_scores,
            "a_cold": cold_scores,
            "c_both": warm_pairs,
        }
        say(
            f"(d)/(c) = {ratio:.1f}x (target >= 5x); scores identical: {identical} "
            f"(c={warm_scores[0]}, d={up_scores[0]})"
        )
        a1_over_c = figures["a1_cold_cached_packages_both_s"] / figures["c_warm_both_s"]
        d_over_a0 = figures["d_upstream_s"] / figures["a0_cold_empty_cache_both_s"]
        # Every case scores alike: strict in (a) and (c), compat in (a), (c) and (d).
        cold_identical = len(set(cold_scores + warm_pairs)) == 1 and {p[1] for p in cold_scores} <= set(
            warm_scores + up_scores
        )
        figures.update({"a1_over_c_both": a1_over_c, "d_over_a0": d_over_a0, "cold_scores_identical": cold_identical})
        say(
            f"(a1) cached packages / (c) one-file change (both) = {a1_over_c:.2f}x (target <= 1.5x); "
            f"(d) upstream-style / (a0) empty cache = {d_over_a0:.2f}x (target >= 2x); "
            f"scores identical in every case: {cold_identical}"
        )

        if not args.skip_eval:
            tasks_dir, preds = make_eval_tree(work / "eval", catalog)
            # One warm-up so every deps image (and the tester extras) exists: we time scoring, not builds.
            time_evaluate(tasks_dir, preds, work / "eval-out-warm", 2, args.eval_profile)
            t1 = time_evaluate(tasks_dir, preds, work / "eval-out-1", 1, args.eval_profile)
            t2 = time_evaluate(tasks_dir, preds, work / "eval-out-2", 2, args.eval_profile)
            figures.update(
                {"e_profile": args.eval_profile, "e_1_worker_s": t1, "e_2_workers_s": t2, "e_throughput_ratio": t1 / t2}
            )
            say(
                f"(e) evaluate 6 repos ({args.eval_profile}): 1 worker {t1:.1f}s ({6 / t1 * 60:.1f} repos/min), "
                f"2 workers {t2:.1f}s ({6 / t2 * 60:.1f} repos/min): {t1 / t2:.2f}x (target >= 1.6x)"
            )

        extra_checks: dict[str, bool] = {}
        if not args.skip_outside:
            extra_checks.update(run_outside(args.reps, task, repo, work, figures))
        if not args.skip_pipeline:
            extra_checks.update(run_pipeline(catalog, work, figures["c_warm_both_s"], figures))

        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        figures["peak_rss_mb"] = rss_mb
        say(f"peak RSS of the bridge process: {rss_mb:.0f} MB (target < 200 MB)")
        checks = {
            "(b) cached < 1 s": figures["b_cached_both_s"] < 1.0,
            "(c) >= 5x faster than (d)": ratio >= 5.0,
            "(c)/(d) identical scores": identical,
            "(a1) cached packages <= 1.5x (c) both": a1_over_c <= 1.5,
            "(a0) empty cache >= 2x faster than (d)": d_over_a0 >= 2.0,
            "(a)/(c)/(d) identical scores": cold_identical,
            "peak RSS < 200 MB": rss_mb < 200,
        }
        if "e_throughput_ratio" in figures:
            checks["2 workers >= 1.6x"] = figures["e_throughput_ratio"] >= 1.6
        checks.update(extra_checks)
        figures["targets"] = checks
        for name, ok in checks.items():
            say(f"  {'MET ' if ok else 'MISS'} {name}")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str), encoding="utf-8")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
