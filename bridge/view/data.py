"""The view's data, as the JSON API serves it and the pages draw it: the list of runs, one run with
its attempts (live while the run is going), one attempt (trajectory, workspace timeline with diffs,
tests at submit, curve, recording files) and the comparison of two or more runs.

Everything is read from disk on each call (a run in progress changes under the view) through the
confined readers of bridge/view/catalog.py. Strings are passed on as data; the pages escape them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError, RecordingError
from bridge.reports.leaderboard import agent_error_class, attempt_key
from bridge.reports.runreport import check_numbers, report_from_entries
from bridge.reports.stats import DEFAULT_SEED, bootstrap_interval, paired_difference, per_task_pass_at_1, task_scores
from bridge.reports.stats_sections import all_stats
from bridge.reports.targets import open_target
from bridge.view.catalog import Catalog, Item, attempt_dir, read_json, recording_of, run_options
from bridge.view.live import attempt_status

STATUSES = ("queued", "running", "scored", "errored")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


#: (item path, signature, seed) -> what was computed from the files as they were
_MEMO: dict[tuple[Any, ...], Any] = {}
MEMO_SIZE = 256


def _signature(item: Item) -> tuple[Any, ...]:
    """What changes when the item's report changes: size and mtime of the files it is read from."""
    if item.kind == "live":
        options = run_options(item.path)
        folder = item.path / "intermediate" / str(options.get("run_id"))
        files = sorted(folder.glob("*.json"))[:5000] if folder.is_dir() else []
    elif item.kind == "run":
        files = sorted(item.path.glob("report_*.json"))
    elif item.kind == "recording":
        files = [item.path / "session.json", item.path / "results" / "index.json", item.path / "events.jsonl"]
        files += sorted((item.path / "results").glob("*/result.json"))
    else:
        files = [item.path / "result.json"]
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((f.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def memo(item: Item, what: str, seed: int, build: Callable[[], Any]) -> Any:
    """`build()`, computed again only when the item's files changed (a live run's page polls)."""
    key = (item.path, what, seed, _signature(item))
    if key not in _MEMO:
        if len(_MEMO) >= MEMO_SIZE:
            _MEMO.clear()
        _MEMO[key] = build()
    return _MEMO[key]


def report_of(item: Item) -> dict[str, Any]:
    """The item's report (read again only when its files changed)."""
    return memo(item, "report", 0, lambda: _read_report(item))  # type: ignore[no-any-return]


def _read_report(item: Item) -> dict[str, Any]:
    """The item's report; a run still going is its rows so far (`intermediate/<run>/`)."""
    if item.kind != "live":
        return open_target(item.path).report
    options = run_options(item.path)
    rows: list[dict[str, Any]] = []
    run_id = options.get("run_id")
    folder = item.path / "intermediate" / str(run_id)
    if isinstance(run_id, str) and folder.is_dir() and not folder.is_symlink():
        for path in sorted(folder.glob("*.json"))[:5000]:
            row = read_json(item.path, str(path.relative_to(item.path)))
            if isinstance(row, dict):
                rows.append(row)
    try:
        check_numbers(rows, folder)
    except BridgeError:
        rows = []
    meta = {"agent": {"name": options.get("agent"), "model": options.get("model")}, "run_id": run_id}
    meta.update(attempts=options.get("attempts"), live=True)
    return report_from_entries(rows, meta)


def _score(entry: Mapping[str, Any], profile: str) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(entry.get("rgbridge")).get("profiles")).get(profile)) or entry


def attempt_row(entry: Mapping[str, Any], profile: str = "strict") -> dict[str, Any]:
    """One attempt as the run page's table shows it."""
    run = _mapping(entry.get("run"))
    prof = _score(entry, profile)
    error = agent_error_class(entry)
    number = entry.get("attempt") if isinstance(entry.get("attempt"), int) else 1
    return {
        "key": attempt_key(entry),
        "task": str(entry.get("repo_name")),
        "attempt": number,
        "status": "errored" if error else "scored",
        "outcome": "agent_error" if error else str(prof.get("outcome") or entry.get("outcome") or ""),
        "error_class": error,
        "pass_at_1": _num(_mapping(prof.get("pass_at_1")).get("score")),
        "passed": _mapping(prof.get("pass_at_1")).get("passed"),
        "total": _mapping(prof.get("pass_at_1")).get("total"),
        "dsr": _mapping(prof.get("dsr")).get("success") is True,
        "ac": _num(_mapping(prof.get("api_coverage")).get("score")),
        "wall_seconds": _num(run.get("wall_seconds")) or _num(entry.get("elapsed_seconds")),
        "cost_usd": _num(run.get("cost_usd")),
        "tool_calls": run.get("tool_calls") if isinstance(run.get("tool_calls"), int) else None,
        "contaminated": bool(entry.get("contaminated")),
        "elapsed_seconds": None,
        "last_tool": None,
        "phase": None,
    }


def run_summary(item: Item, report: Mapping[str, Any], *, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """One line of the runs page: who, what, how well (Pass@k with intervals), cost, when."""
    md = _mapping(report.get("metadata"))
    config = _mapping(md.get("config"))
    raw_agent = md.get("agent")
    agent = _mapping(raw_agent) or ({"name": raw_agent} if isinstance(raw_agent, str) else {})
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    models = sorted({str(_mapping(r.get("agent")).get("model") or "") for r in results} - {""})
    cost = _num(md.get("cost_usd"))
    if cost is None:
        costs = [c for c in (_num(_mapping(r.get("run")).get("cost_usd")) for r in results) if c is not None]
        cost = sum(costs) if costs else None
    outcomes: dict[str, int] = {}
    for r in results:
        row = attempt_row(r)
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
    boxes = [_mapping(_mapping(r.get("run")).get("sandbox")) for r in results]
    sandbox = md.get("sandbox") or config.get("sandbox") or next((b.get("kind") for b in boxes if b.get("kind")), None)
    network = (
        md.get("network") or config.get("network") or next((b["network"] for b in boxes if b.get("network")), None)
    )
    if isinstance(network, Mapping):  # a network block: its mode or kind names it
        network = network.get("mode") or network.get("kind")
    return {
        "id": item.id,
        "name": item.path.name,
        "kind": item.kind,
        "live": item.kind == "live",
        "agent": agent.get("name") or md.get("client"),
        "cli_version": config.get("cli_version") or agent.get("version"),
        "model": ", ".join(models) or config.get("model") or agent.get("model"),
        "prompt": config.get("prompt"),
        "prompt_hash": config.get("prompt_hash"),
        "config_hash": config.get("hash"),
        "date": md.get("timestamp") or md.get("created_at") or md.get("run_id"),
        "sandbox": sandbox if isinstance(sandbox, str) else None,
        "unconfined": md.get("unconfined") is True or sandbox == "none",
        "network": network if isinstance(network, str) else None,
        "cost_usd": cost,
        "attempts": len(results),
        "outcomes": outcomes,
        "statistics": memo(item, "stats", seed, lambda: {s.profile: s.as_dict() for s in all_stats(report, seed=seed)}),
    }


def runs(catalog: Catalog, *, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    out = []
    for item in catalog.items:
        try:
            out.append(run_summary(item, report_of(item), seed=seed))
        except BridgeError as exc:  # an unreadable folder is listed with its reason, not dropped
            out.append({"id": item.id, "name": item.path.name, "kind": item.kind, "error": str(exc)[:300]})
    return out


def _seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _matches(row: Mapping[str, Any], filters: Mapping[str, str]) -> bool:
    task, outcome, error = filters.get("task", ""), filters.get("outcome", ""), filters.get("error", "")
    if task and task.lower() not in row["task"].lower():
        return False
    over = _seconds(filters.get("over", ""))
    took = row["wall_seconds"] if row["wall_seconds"] is not None else row["elapsed_seconds"]
    if over is not None and (took is None or took < over):
        return False
    if outcome and outcome not in (row["outcome"], row["status"]):
        return False
    return not (error and (row["error_class"] or "") != error)


SORTS = {
    "task": lambda r: (r["task"], r["attempt"]),
    "outcome": lambda r: (r["outcome"], r["task"], r["attempt"]),
    "error": lambda r: (r["error_class"] or "", r["task"], r["attempt"]),
    "time": lambda r: (-(r["wall_seconds"] or r["elapsed_seconds"] or 0.0), r["task"], r["attempt"]),
    "pass": lambda r: (-(r["pass_at_1"] or 0.0), r["task"], r["attempt"]),
}


def run_detail(
    catalog: Catalog, item: Item, *, filters: Mapping[str, str] | None = None, seed: int = DEFAULT_SEED
) -> dict[str, Any]:
    """One run: its summary and every attempt, queued and running ones included while it goes."""
    report = report_of(item)
    rows = {r["key"]: r for r in (attempt_row(e) for e in report.get("results") or [] if isinstance(e, Mapping))}
    options = run_options(item.path) if item.kind in ("run", "live") else {}
    raw_tasks, raw_attempts = options.get("tasks"), options.get("attempts")
    tasks = [t for t in raw_tasks if isinstance(t, str)] if isinstance(raw_tasks, list) else []
    attempts = raw_attempts if isinstance(raw_attempts, int) and not isinstance(raw_attempts, bool) else 1
    now = time.time()
    for task in tasks[:2000]:
        for k in range(1, min(attempts, 100) + 1):
            key = f"{task}.a{k}"
            folder = attempt_dir(item.path, task, k)
            status = attempt_status(item.path, folder, now) if folder is not None else None
            if key in rows:
                continue  # scored or errored: its row says all
            rows[key] = {**attempt_row({"repo_name": task, "attempt": k}), "outcome": "", "status": "queued"}
            if status is not None:
                rows[key].update(status)
    filters = filters or {}
    shown = [r for r in rows.values() if _matches(r, filters)]
    shown.sort(key=SORTS.get(filters.get("sort", "task"), SORTS["task"]))
    counts = {s: sum(1 for r in rows.values() if r["status"] == s) for s in STATUSES}
    per_task = memo(item, "per_task", seed, lambda: _per_task(report, seed))
    return {
        "run": run_summary(item, report, seed=seed),
        "metadata": {k: v for k, v in _mapping(report.get("metadata")).items() if not isinstance(v, (dict, list))},
        "counts": counts,
        "going": item.kind == "live" and (counts["queued"] + counts["running"] > 0 or not rows),
        "attempts": shown,
        "per_task": per_task,
        "filters": dict(filters),
        "outcomes": sorted({r["outcome"] for r in rows.values() if r["outcome"]}),
        "error_classes": sorted({r["error_class"] for r in rows.values() if r["error_class"]}),
    }


def _task_intervals(item: Item, report: Mapping[str, Any], seed: int) -> dict[str, list[float]]:
    """{task: [low, high]} of each task's Pass@1 over its attempts (the run page's, memoized)."""
    rows = memo(item, "per_task", seed, lambda: _per_task(report, seed))
    return {row["task"]: [row["low"], row["high"]] for row in rows}


def _per_task(report: Mapping[str, Any], seed: int) -> list[dict[str, Any]]:
    """Each task's mean Pass@1 (strict) over its attempts, with a bootstrap interval over them."""
    out = []
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    for task, scores in sorted(task_scores(results, "strict").items()):
        iv = bootstrap_interval(scores.pass_at_1, seed=seed)
        if iv is not None:
            out.append({"task": task, "attempts": iv.tasks, "mean": iv.mean, "low": iv.low, "high": iv.high})
    return out


def find_entry(item: Item, report: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    for entry in report.get("results") or []:
        if isinstance(entry, dict) and attempt_key(entry) == key:
            return entry
    return None


def compare(catalog: Catalog, ids: list[str], *, profile: str = "strict", seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Two or more runs: Pass@1 per task side by side, the tasks one solves and another does not,
    each run's paired difference against the first (interval, p-value), cost against Pass@1."""
    if len(ids) < 2:
        raise RecordingError("compare needs two or more runs")
    items = [catalog.get(i) for i in ids]
    reports = [report_of(i) for i in items]
    per_task = [
        per_task_pass_at_1([r for r in rep.get("results") or [] if isinstance(r, Mapping)], profile) for rep in reports
    ]
    solved = [_solved_tasks(rep, profile) for rep in reports]
    tasks = sorted(set().union(*per_task))
    base = per_task[0]
    pairs = []
    for item, values in zip(items[1:], per_task[1:], strict=True):
        diff = paired_difference(values, base, seed=seed)
        pairs.append({"run": item.id, "against": items[0].id, **(diff.__dict__ if diff else {"tasks": 0})})
    only = []
    for i, a in enumerate(items):
        for j, b in enumerate(items):
            if i != j:
                only.append({"run": a.id, "not": b.id, "tasks": sorted(solved[i] - solved[j])})
    return {
        "profile": profile,
        "seed": seed,
        "runs": [run_summary(i, rep, seed=seed) for i, rep in zip(items, reports, strict=True)],
        "tasks": [{"task": t, "pass_at_1": [v.get(t) for v in per_task]} for t in tasks],
        "intervals": [_task_intervals(i, rep, seed) for i, rep in zip(items, reports, strict=True)],
        "solved_by_one_not_other": only,
        "paired": pairs,
    }


def _solved_tasks(report: Mapping[str, Any], profile: str) -> set[str]:
    """Tasks where some scored attempt passed every golden test."""
    out = set()
    for entry in report.get("results") or []:
        if isinstance(entry, Mapping) and not agent_error_class(entry):
            p1 = _mapping(_score(entry, profile).get("pass_at_1"))
            if isinstance(p1.get("total"), int) and p1["total"] > 0 and p1.get("passed") == p1["total"]:
                out.add(str(entry.get("repo_name")))
    return out


def recording_for(catalog: Catalog, item: Item, entry: Mapping[str, Any] | None) -> Path | None:
    if item.kind == "recording":
        return item.path
    return recording_of(catalog, dict(entry)) if entry is not None else None
