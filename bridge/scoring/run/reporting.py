"""Run reports: upstream-schema report and aggregates, strict aggregates, resume (the terminal
table of a report is bridge/reports/table.py).

Layout under an output dir (as upstream, §2.8):
    intermediate/<run_id>/<Task>.json   one per repo, written atomically as soon as it is done
    report_<run_id>.json                {metadata, summary, results} + our fields

Each repo entry is the upstream per-repo dict of its primary profile (compat when scored)
plus our keys `outcome` and `rgbridge` (both profiles in full, hashes, grader version).
Upstream readers ignore extra keys, so the report still sits in the published schema.

Resume (fixes W16): `load_previous` reads *every* intermediate folder of the output dir
(and upstream's old flat files directly under `intermediate/`), not only the newest one;
per task the newest file wins (mtime, then run folder name). `RunWriter.adopt` copies resumed
entries into the current run folder, so each run folder is complete on its own and chained
resumes never lose results.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bridge.errors import ScoringError
from bridge.fs.files import write_json_atomic
from bridge.release import exact_version
from bridge.scoring.result import GRADER_VERSION, OUTCOMES, ScoreResult
from bridge.scoring.run.report_row import ReportRow
from bridge.scoring.upstream import EXIT_BUILD_FAILED, EXIT_TIMEOUT, EXIT_UNEXPECTED, HARNESS_VERSION

log = logging.getLogger(__name__)

_NUMERIC_KEYS = frozenset({"score", "total", "passed", "failed", "total_apis", "implemented_apis"})

LANGS = ("python", "java")
#: a row of an agent run whose agent CLI failed (auth, rate limit, crash...: bridge/agents/adapters/failures.py):
#: not the agent's work, so like an infra_error it is in no mean; unlike one it has no profile
AGENT_ERROR = "agent_error"
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
_TASK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def _r4(x: float) -> float:
    return round(x, 4)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


# ----------------------------------------------------------------------------- upstream summary


def _up_pass(rows: Sequence[Mapping[str, Any]]) -> float:
    return _mean([r["pass_at_1"]["score"] for r in rows if r.get("pass_at_1", {}).get("total", 0) > 0])


def _up_ac(rows: Sequence[Mapping[str, Any]]) -> float:
    return _mean(
        [
            r["api_coverage"]["score"]
            for r in rows
            if r.get("api_coverage") and r["api_coverage"].get("total_apis", 0) > 0
        ]
    )


def _up_dsr(rows: Sequence[Mapping[str, Any]]) -> float:
    return _mean([1.0 if r.get("dsr", {}).get("success", False) else 0.0 for r in rows])


def summarize_upstream(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Upstream's `summary` exactly (§2.8): macro means, zero-total repos excluded from Pass@1,
    repos without endpoints excluded from AC, DSR over all repos."""
    if not results:
        return {
            "total_repos": 0,
            "evaluated": 0,
            "avg_pass_at_1": 0.0,
            "avg_api_coverage": 0.0,
            "deployment_success_rate": 0.0,
        }
    by_lang = {lang: [r for r in results if r.get("lang") == lang] for lang in LANGS}
    return {
        "total_repos": len(results),
        "python_repos": len(by_lang["python"]),
        "java_repos": len(by_lang["java"]),
        "avg_pass_at_1": _r4(_up_pass(results)),
        "avg_api_coverage": _r4(_up_ac(results)),
        "deployment_success_rate": _r4(_up_dsr(results)),
        "pass_at_1_by_lang": {lang: _r4(_up_pass(rows)) for lang, rows in by_lang.items()},
        "ac_by_lang": {lang: _r4(_up_ac(rows)) for lang, rows in by_lang.items()},
        "dsr_by_lang": {lang: _r4(_up_dsr(rows)) for lang, rows in by_lang.items()},
    }


# ----------------------------------------------------------------------------- strict summary


def infer_outcome(entry: Mapping[str, Any]) -> str:
    """Outcome of a result dict: our `outcome` key, else derived from upstream's fields."""
    outcome = entry.get("outcome")
    if outcome in OUTCOMES or outcome == AGENT_ERROR:
        return str(outcome)
    if entry.get("error") is not None or entry.get("exit_code") == EXIT_UNEXPECTED:
        return "infra_error"
    if entry.get("build_error") is not None or entry.get("exit_code") == EXIT_BUILD_FAILED:
        return "build_failed"
    if entry.get("exit_code") == EXIT_TIMEOUT:
        return "timeout"
    if not entry.get("dsr", {}).get("success", False):
        return "deploy_failed"
    return "scored"


def profile_rows(entries: Iterable[Mapping[str, Any]], profile: str) -> list[dict[str, Any]]:
    """Flat per-repo rows of one profile from report entries (uses their `rgbridge` sub-dict).

    An entry without that profile is skipped; a plain upstream dict is used as is for
    `profile="compat"`.
    """
    rows: list[dict[str, Any]] = []
    for e in entries:
        if is_agent_error(e):  # nothing of the agent's was scored
            continue
        prof = (e.get("rgbridge") or {}).get("profiles", {}).get(profile)
        if prof is not None:
            rows.append({"repo_name": e.get("repo_name"), "lang": e.get("lang"), **prof})
        elif profile == "compat" and "rgbridge" not in e:
            rows.append(dict(e))
    return rows


def is_agent_error(entry: Mapping[str, Any]) -> bool:
    return entry.get("outcome") == AGENT_ERROR


def scored_entries(entries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The entries that count in the means: an agent run's `agent_error` rows are left out."""
    return [e for e in entries if not is_agent_error(e)]


def summarize_strict(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Strict aggregates over flat rows (lang, outcome?, dsr, pass_at_1, api_coverage?,
    dynamic_api_coverage?) — see `profile_rows`.

    Every repo whose outcome is scored / deploy_failed / build_failed / timeout counts: a
    total of 0 scores 0 (nothing is free, unlike W10). infra_error repos are not the agent's
    fault: they are excluded and counted separately. AC means are over counted repos with
    endpoints (a README without endpoints says nothing about the repo).
    """
    counts = {o: 0 for o in (*OUTCOMES, AGENT_ERROR)}
    for r in results:
        counts[infer_outcome(r)] += 1
    # infra_error (engine fault) and task_error (ungradable task) are nobody's score
    counted = [r for r in results if infer_outcome(r) not in ("infra_error", "task_error", AGENT_ERROR)]
    infra = [r for r in results if infer_outcome(r) == "infra_error"]  # by what broke: runner.infra_reason

    def pass_score(r: Mapping[str, Any]) -> float:
        p = r.get("pass_at_1") or {}
        total = p.get("total", 0) or 0
        return round(p.get("passed", 0) / total, 4) if total > 0 else 0.0

    def ac_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
        vals = [r[key]["score"] for r in rows if r.get(key) and r[key].get("total_apis", 0) > 0]
        return _r4(_mean(vals)) if vals else None

    def block(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "repos": len(rows),
            "avg_pass_at_1": _r4(_mean([pass_score(r) for r in rows])),
            "deployment_success_rate": _r4(_up_dsr(rows)),
            "avg_api_coverage": ac_mean(rows, "api_coverage"),
            "avg_dynamic_api_coverage": ac_mean(rows, "dynamic_api_coverage"),
        }

    overall = block(counted)
    return {
        "total_repos": len(results),
        "counted_repos": len(counted),
        "infra_errors": counts["infra_error"],
        "infra_errors_by_reason": dict(Counter(str(r.get("infra_reason") or "unclassified") for r in infra)),
        **{k: v for k, v in overall.items() if k != "repos"},
        "outcomes": counts,
        "by_lang": {lang: block([r for r in counted if r.get("lang") == lang]) for lang in LANGS},
    }


# ----------------------------------------------------------------------------- entries & files


def build_row(result: ScoreResult, primary: str | None = None) -> ReportRow:
    """Report row for one scored repo: upstream dict of the primary profile + our fields."""
    if primary is None:
        primary = "compat" if "compat" in result.profiles else next(iter(result.profiles), "")
    rgbridge = {
        "primary_profile": primary,
        "task_hash": result.task_hash,
        "snapshot_hash": result.snapshot_hash,
        "grader_version": result.grader_version,
        "created_at": result.created_at.isoformat(),
        "profiles": {name: p.model_dump(mode="json") for name, p in result.profiles.items()},
    }
    upstream = result.to_upstream_dict(primary)
    return ReportRow.model_validate({**upstream, "outcome": result.profile(primary).outcome, "rgbridge": rgbridge})


def build_entry(result: ScoreResult, primary: str | None = None) -> dict[str, Any]:
    """The JSON of `build_row`: what report files and their readers hold."""
    return build_row(result, primary).to_json()


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _tries(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """An agent row's tries: the final one (its `run`) and the ones retried before it."""
    run = entry.get("run")
    if not isinstance(run, Mapping):
        return []
    earlier = [r for r in run.get("retried") or [] if isinstance(r, Mapping)]
    return [run, *earlier]


def _sum_tries(tries: Iterable[Mapping[str, Any]]) -> tuple[float | None, dict[str, int | None]]:
    cost: float | None = None
    tokens: dict[str, int | None] = dict.fromkeys(TOKEN_KINDS)
    for t in tries:
        c = _number(t.get("cost_usd"))
        if c is not None:
            cost = (cost or 0.0) + c
        split = t.get("tokens")
        if isinstance(split, Mapping):
            for kind in TOKEN_KINDS:
                n = _number(split.get(kind))
                if n is not None:
                    tokens[kind] = (tokens[kind] or 0) + int(n)
    return (round(cost, 6) if cost is not None else None), tokens


def cost_metadata(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An agent run's spending as its CLIs reported it, every try counted (a retried failure cost
    too): the run's cost and tokens (input, output, cache read, cache write; None where no CLI
    reported them), the same per task, and the attempts that stayed `agent_error`."""
    cost, tokens = _sum_tries(t for e in entries for t in _tries(e))
    by_task: dict[str, dict[str, Any]] = {}
    for task in sorted({str(e.get("repo_name")) for e in entries}):
        c, tk = _sum_tries(t for e in entries if str(e.get("repo_name")) == task for t in _tries(e))
        by_task[task] = {"cost_usd": c, "tokens": tk}
    errored = sorted(_entry_key(e) for e in entries if is_agent_error(e))
    return {"cost_usd": cost, "tokens": tokens, "by_task": by_task, "errored_attempts": errored}


def new_run_id(now: datetime | None = None) -> str:
    """Upstream's run id format: local time YYYY-MM-DD_HH-MM-SS."""
    return (now or datetime.now()).strftime("%Y-%m-%d_%H-%M-%S")


def _check_name(name: str, what: str) -> str:
    if not _TASK_NAME.match(name or ""):
        raise ScoringError(f"invalid {what} for a report file name: {name!r}")
    return name


def bad_number(data: Any, where: str = "") -> str | None:
    """Where a score field of a (possibly upstream-schema) report is not a finite number, or None.

    Reports on disk are input like any other: a hand-edited `"score": "n/a"` must make the entry
    invalid with a message, not crash a resume or a summary with a TypeError.
    """
    if isinstance(data, Mapping):
        for k, v in data.items():
            here = f"{where}.{k}" if where else str(k)
            if (
                k in _NUMERIC_KEYS
                and v is not None
                and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v))
            ):
                return f"{here} = {v!r}"
            found = bad_number(v, here)
            if found:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = bad_number(v, f"{where}[{i}]")
            if found:
                return found
    return None


def load_previous(
    output_dir: Path | str,
    run_id: str | None = None,
    *,
    tasks: Iterable[str] | None = None,
    include_infra_errors: bool = False,
) -> dict[str, dict[str, Any]]:
    """Earlier per-repo results of an output dir, keyed by task (repo_name).

    Reads every `intermediate/<run>/` folder and upstream's flat `intermediate/*.json`;
    newest file wins per task (mtime, then folder name). `run_id` is accepted for symmetry
    and needs no special case: its folder is read like the others. `tasks` restricts the
    result to the current selection. infra_error results are dropped unless asked for, so
    resume re-runs them (they were not the agent's fault).
    """
    base = Path(output_dir) / "intermediate"
    if not base.is_dir():
        return {}
    candidates: list[tuple[float, str, Path]] = []
    folders = [base] + sorted(d for d in base.iterdir() if d.is_dir())
    for folder in folders:
        for f in folder.glob("*.json"):
            if f.name.startswith("."):
                continue
            try:
                candidates.append((f.stat().st_mtime, "" if folder == base else folder.name, f))
            except OSError:
                continue
    wanted = set(tasks) if tasks is not None else None
    out: dict[str, tuple[tuple[float, str], dict[str, Any]]] = {}
    for mtime, folder_name, f in candidates:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        problem = bad_number(data)
        if problem:  # treated as invalid: the task runs again
            log.warning("ignoring earlier result %s: %s is not a number", f, problem)
            continue
        name = data.get("repo_name") or f.stem
        if wanted is not None and name not in wanted:
            continue
        if not include_infra_errors and infer_outcome(data) == "infra_error":
            continue
        key = (mtime, folder_name)
        if name not in out or key >= out[name][0]:
            out[name] = (key, data)
    return {name: data for name, (_, data) in out.items()}


def _entry_key(entry: Mapping[str, Any]) -> str:  # the task, plus the attempt of an agent run's row
    return str(entry["repo_name"]) + (f".a{entry['attempt']}" if isinstance(entry.get("attempt"), int) else "")


def _entry_outcomes(entry: Mapping[str, Any]) -> dict[str, str]:
    """Outcome per profile of one entry ({"compat": ...} for a plain upstream dict)."""
    profiles = (entry.get("rgbridge") or {}).get("profiles") or {}
    if not profiles:
        return {"compat": infer_outcome(entry)}
    return {name: infer_outcome(prof) for name, prof in profiles.items()}


class RunWriter:
    """Writes a run's intermediate files as repos finish, then the final report. Thread-safe."""

    def __init__(self, output_dir: Path | str, run_id: str | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.run_id = _check_name(run_id or new_run_id(), "run id")
        self.intermediate_dir = self.output_dir / "intermediate" / self.run_id
        self._results: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def report_path(self) -> Path:
        return self.output_dir / f"report_{self.run_id}.json"

    @property
    def results(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._results[k] for k in sorted(self._results)]

    def record(
        self,
        result: ScoreResult | ReportRow | Mapping[str, Any],
        primary: str | None = None,
        *,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Store one repo's entry (a ScoreResult, a row, or a row's JSON) and write it at once; `key`
        names its file when a task has several (an agent run's attempts: `<task>.a<k>`)."""
        if isinstance(result, ScoreResult):
            entry = build_entry(result, primary)
        else:
            entry = result.to_json() if isinstance(result, ReportRow) else dict(result)
        name = _check_name(key or str(entry.get("repo_name", "")), "task name")
        with self._lock:
            write_json_atomic(self.intermediate_dir / f"{name}.json", entry)
            self._results[name] = entry
        return entry

    def adopt(self, previous: Mapping[str, Mapping[str, Any]]) -> None:
        """Take over resumed results (from `load_previous`) without overriding newer ones.

        They are also written into this run's folder so the folder is complete by itself.
        """
        for name, entry in previous.items():
            _check_name(name, "task name")
            with self._lock:
                if name in self._results:
                    continue
                target = self.intermediate_dir / f"{name}.json"
                if not target.exists():
                    write_json_atomic(target, dict(entry))
                self._results[name] = dict(entry)

    def finalize(self, metadata: Mapping[str, Any] | None = None) -> Path:
        """Write `report_<run_id>.json` = {metadata, summary, results} + our fields."""
        results = self.results
        meta: dict[str, Any] = dict(metadata or {})
        meta.setdefault("timestamp", datetime.now().isoformat())
        meta.setdefault("harness_version", HARNESS_VERSION)
        meta.setdefault("run_id", self.run_id)
        meta.setdefault("grader_version", GRADER_VERSION)
        meta.setdefault("rgbridge_version", exact_version())
        report = {
            "metadata": meta,
            "summary": summarize_upstream(scored_entries(results)),
            "results": results,
            "strict_summary": summarize_strict(profile_rows(results, "strict")),
            "compat_strict_view": summarize_strict(profile_rows(results, "compat")),
            "outcomes": {_entry_key(e): _entry_outcomes(e) for e in results},
        }
        write_json_atomic(self.report_path, report)
        return self.report_path
