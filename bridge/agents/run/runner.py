"""`rgbridge run`: an agent over tasks × attempts, unattended, into a run folder in the `evaluate`
schema (bridge/scoring/run/reporting.py): `intermediate/<run_id>/<task>.a<k>.json` per attempt as it is
scored, `report_<run_id>.json` with both profiles, agent name, version and model in every row.

`run.json` holds the plan (pydantic, the boundary a resume reads back); `--resume` with the same
output folder and run id keeps every scored attempt (it is never scored twice), finishes the
ones whose agent had ended, and redoes the ones cut before their agent ended.

Before any agent starts (`agent_checks`): the adapter's model key must be in the environment unless
`--model-base-url` names another endpoint, the CLI must print its version (and match
`--agent-version`), and `config.json` pins the run's configuration (`run_config`: CLI version,
model, prompt template hash, time limit, attempts, sandbox, bridge version; its hash); a resume
whose configuration changed is refused with what differs.

An attempt the agent's CLI failed (`agent_error`: bridge/agents/adapters/failures.py) is kept aside
(`a<k>.agent-error-<n>` beside the attempt and its recording), retried after a backoff up to
`retries` times, never counted in the means, and listed in the report's `errored_attempts`;
`EXIT_AGENT_ERRORS` is `rgbridge run`'s exit code when some remain. `max_cost` stops starting
attempts once the run's reported cost reaches it (attempts in flight finish).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from bridge.agents.adapters.failures import Failure
from bridge.agents.adapters.registry import adapter as find_adapter
from bridge.agents.attempt.lifecycle import Abandoned, Attempt, Stopped, attempt_key
from bridge.agents.gateway.door import check_cost_caps
from bridge.agents.ray.driver import RayAttempts
from bridge.agents.run.agent_checks import check_cli, check_key
from bridge.agents.run.backend import AgentBackend
from bridge.agents.run.config import CONFIG_FILE, CONFIG_METADATA, check_config, config_line, run_config
from bridge.agents.run.local import LocalAttempts
from bridge.agents.run.options import RUN_FILE, RunOptions
from bridge.agents.run.planned import check_planned, unscored_row
from bridge.agents.run.prompt import load_template
from bridge.agents.run.retries import Budget, backoff, row_cost, set_aside
from bridge.agents.run.settings import RunSettings, sandbox_metadata, settings_for
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.release import exact_version
from bridge.scoring.run.backend import BACKENDS
from bridge.scoring.run.report_row import ReportRow, RetriedTry
from bridge.scoring.run.reporting import RunWriter, bad_number, cost_metadata
from bridge.tasks.catalog import Catalog

#: `rgbridge run`'s exit code when attempts remain `agent_error` after their retries (without
#: --allow-errors); 2 is a refusal or an error of the bridge, 130 a Ctrl-C
EXIT_AGENT_ERRORS = 3

#: the agent backends, one per name of `BACKENDS` (tests/test_agent_backend.py checks it)
_BACKENDS: tuple[type[LocalAttempts] | type[RayAttempts], ...] = (LocalAttempts, RayAttempts)


Progress = Callable[[dict[str, Attempt], dict[str, dict[str, Any]]], None]


def execute(
    options: RunOptions,
    catalog: Catalog,
    output_dir: Path,
    *,
    resume: bool,
    progress: Progress | None = None,
    on_event: Callable[[str, str], None] | None = None,
    backend: AgentBackend | None = None,
) -> tuple[Path, list[dict[str, Any]]]:
    """Run (or finish) the plan; the report path and its rows. KeyboardInterrupt stops every agent.
    `backend`: where the attempts run (default: the one `options.backend` names)."""
    backend = backend or backend_for(options)
    settings, writer, done = prepare(options, catalog, output_dir, resume=resume, on_event=on_event, backend=backend)
    run = Schedule(options, settings, writer, done, on_event, backend)
    for key in done:
        if key in run.attempts:
            run.attempts[key].live.state = "done (earlier)"
    ctrl_c: list[int] = []
    restore = _catch_ctrl_c(ctrl_c)
    pool = ThreadPoolExecutor(max_workers=run.workers, thread_name_prefix="rgbridge-run")
    futures: set[Future[None]] = {pool.submit(run.task_attempts, queue) for queue in run.todo().values()}
    try:
        while futures and not ctrl_c:
            finished, futures = wait(futures, timeout=0.5, return_when=FIRST_COMPLETED)
            for f in finished:
                f.result()
            if progress:
                progress(run.attempts, {e["_key"]: e for e in _keyed(writer)})
        if ctrl_c:
            raise KeyboardInterrupt
        pool.shutdown(wait=True)
        rows = writer.results
        report = writer.finalize(report_metadata(run, rows, output_dir))
    except KeyboardInterrupt:
        restore()  # a second Ctrl-C while the agents are being stopped interrupts at once
        run.stop.set()  # every agent's group is ended, scoring waits stop; `--resume` carries on
        for f in futures:
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        restore()
        run.close()
    if ctrl_c:  # pressed while the last attempt finished or the report was written: still interrupted
        raise KeyboardInterrupt
    return report, rows


def prepare(
    options: RunOptions,
    catalog: Catalog,
    output_dir: Path,
    *,
    resume: bool,
    on_event: Callable[[str, str], None] | None = None,
    backend: AgentBackend | None = None,
) -> tuple[RunSettings, RunWriter, dict[str, ReportRow]]:
    """Before any attempt: the backend's and the agent's checks, the prompt, the settings every
    attempt shares, the run's configuration (a resume under another one is refused), the run
    files, and the entries an earlier part of the run scored (`resume`), recorded again."""
    (backend or backend_for(options)).check()  # locally the model key; on Ray the nodes' (ray/checks.py)
    template = load_template(
        options.prompt,
        prompt_file=Path(options.prompt_file) if options.prompt_file else None,
        tasks=[catalog.get(t) for t in options.tasks],
        upstream_function=library_function(options.agent),
    )
    check_planned(template, [catalog.get(t) for t in options.tasks], options.time_limit)  # issue 38, item 8
    output_dir.mkdir(parents=True, exist_ok=True)
    settings = settings_for(options, catalog, output_dir)
    check_cli(options, settings)
    check_cost_caps(settings.adapter, options.model, options.max_cost_per_attempt, options.max_cost, settings.cost)
    config = run_config(options, settings, template)
    check_config(output_dir / CONFIG_FILE, config, resume=resume)
    settings = replace(settings, prompt=template, run_config=config)
    if on_event:
        on_event("run", f"configuration {config['hash'][:16]} ({config_line(config)})")
    write_json_atomic(output_dir / RUN_FILE, options.model_dump(mode="json"))
    write_json_atomic(output_dir / CONFIG_FILE, config)
    writer = RunWriter(output_dir, options.run_id)
    done = previous_entries(writer) if resume else {}
    for key, entry in done.items():
        writer.record(entry, key=key)
    return settings, writer, done


class Schedule:
    """The run's attempts and what runs them: where (the backend: here, or one Ray task each),
    how many at once, each attempt's tries (an `agent_error` retried after a backoff), the cost
    cap, and the refused key that stops the run."""

    def __init__(
        self,
        options: RunOptions,
        settings: RunSettings,
        writer: RunWriter,
        done: dict[str, ReportRow],
        on_event: Callable[[str, str], None] | None,
        backend: AgentBackend,
    ) -> None:
        self.options, self.writer, self.done, self.on_event = options, writer, done, on_event
        self.stop = threading.Event()
        # A provider that refuses the key refuses it for every attempt: the run stops at the first
        # refusal; what was not started is listed as not run (issue 38, item 4).
        self.auth_stop = threading.Event()
        self.auth: list[tuple[str, Failure]] = []
        self.not_run: list[str] = []
        self.backend = backend
        spent = sum(row_cost(e) for e in done.values())
        try:  # the run's gateway, or the cluster joined and its nodes checked
            self.settings = settings = backend.prepare(settings, spent=spent, on_auth=self.on_auth)
        except BaseException:
            backend.close()
            raise
        self.workers = backend.workers()
        catalog = settings.catalog
        self.attempts = {
            attempt_key(t, k): backend.attempt(settings, catalog.get(t), k, self.stop)
            for t in options.tasks
            for k in range(1, options.attempts + 1)
        }
        self.started = time.monotonic()
        self.failures: dict[str, str] = {}
        self.budget = Budget(options.max_cost, spent)

    def todo(self) -> dict[str, list[Attempt]]:
        """The attempts left, by task. One task's attempts run one after another: opening a
        session copies the task's golden files (bridge/sessions/contamination.py), which an open
        session of the same task would record as contamination. `--workers` runs different tasks
        at once."""
        todo: dict[str, list[Attempt]] = {}
        for key, a in self.attempts.items():
            if key not in self.done:
                todo.setdefault(a.task.id, []).append(a)
        return todo

    def say(self, key: str, message: str) -> None:
        if self.on_event:
            self.on_event(key, message)

    def on_auth(self, key: str, failure: Failure) -> None:
        self.auth.append((key, failure))
        self.auth_stop.set()
        self.say(key, f"agent_error (auth): {failure.message}; the run stops")

    def close(self) -> None:
        self.backend.close()

    def task_attempts(self, queue: list[Attempt]) -> None:
        for attempt in queue:
            if self.auth_stop.is_set():  # not started: a row that says why (issue 38, item 8)
                attempt.live.state = "not run (the provider refused the key)"
                self.not_run.append(attempt.key)
                why = f"not started: the provider refused the key in {self.auth[0][0]} ({self.auth[0][1].message})"
                self.writer.record(
                    unscored_row(self.settings, attempt.task, attempt.number, "not_run", why), key=attempt.key
                )
            elif not self.stop.is_set():
                self.one(attempt)

    def one(self, attempt: Attempt) -> None:
        """One attempt's tries until a row stands (or the run stops): recorded with its retries."""
        retried: list[RetriedTry] = []
        if not self.budget.allows():
            attempt.live.state = "not started (cost cap)"
            self.budget.skipped.append(attempt.key)
            why = f"not started: the cost cap (--max-cost {self.options.max_cost}) was reached"
            self.writer.record(
                unscored_row(self.settings, attempt.task, attempt.number, "not_run", why), key=attempt.key
            )
            return
        while True:
            row = self.try_once(attempt)
            if row is None:
                return
            error = row.agent_error if row.outcome == "agent_error" else None
            # a refused key is not retried: it would be refused again
            if (
                error is None
                or len(retried) >= self.options.retries
                or self.stop.is_set()
                or error.cls in ("auth", "unpriced")
            ):
                break
            if not self.budget.allows():  # the cap stops retries too; this try's row stands
                self.budget.skipped.append(f"{attempt.key} (retry {len(retried) + 1})")
                break
            retried.append(set_aside(attempt, row, len(retried) + 1))
            if not self.wait_to_retry(attempt, error.cls, len(retried)):
                return
            fresh = self.backend.attempt(self.settings, attempt.task, attempt.number, self.stop)
            self.attempts[attempt.key] = fresh
            attempt = fresh
        if row.run is not None:
            row.run.retries, row.run.retried = len(retried), retried
        if error is not None:
            error.retries = len(retried)
        self.writer.record(row, key=attempt.key)
        self.say(attempt.key, f"agent_error ({error.cls})" if error is not None else "scored")

    def try_once(self, attempt: Attempt) -> ReportRow | None:
        """The attempt run once, its cost counted; None when it stopped or failed (said so)."""
        try:
            row = attempt.run()
        except Stopped:
            attempt.live.state = "stopped"
            return None
        except BridgeError as exc:
            attempt.live.state = "failed"
            self.failures[attempt.key] = str(exc)
            outcome = "not_run" if isinstance(exc, Abandoned) else "infra_error"  # every planned attempt a row
            self.writer.record(
                unscored_row(self.settings, attempt.task, attempt.number, outcome, str(exc)), key=attempt.key
            )
            self.say(attempt.key, f"failed: {exc}")
            return None
        self.budget.spend(row_cost(row))
        return row

    def wait_to_retry(self, attempt: Attempt, cls: str, tries: int) -> bool:
        """The backoff before retry `tries`; False when the run stopped meanwhile (`--resume`
        tries it again)."""
        delay = backoff(self.options.retry_backoff, tries)
        self.say(attempt.key, f"agent_error ({cls}): retry {tries} of {self.options.retries} in {delay:g}s")
        attempt.live.state = f"retry in {delay:g}s ({cls})"
        if self.stop.wait(delay):
            attempt.live.state = "stopped"
            return False
        return True


def report_metadata(run: Schedule, rows: list[dict[str, Any]], output_dir: Path) -> dict[str, Any]:
    """The report's metadata: the agent, the plan, what was resumed or failed, the configuration,
    cost and sandbox, and the cost cap's cut."""
    options, settings = run.options, run.settings
    reported = sorted({str((r.get("agent") or {}).get("model")) for r in rows if (r.get("agent") or {}).get("model")})
    meta: dict[str, Any] = {
        "agent": {"name": settings.adapter.name, "version": settings.agent_version, "model": options.model},
        "attempts": options.attempts,
        "time_limit_seconds": options.time_limit,
        "workers": options.workers,
        "backend": options.backend,
        "profile": options.profile,
        "tasks": options.tasks,
        "bridge_version": exact_version(),
        "total_elapsed_seconds": round(time.monotonic() - run.started, 2),
        "resumed": sorted(run.done),
        "failed_attempts": run.failures,
        # issue 38, item 8: planned attempts without a score (each is a row saying why)
        "planned_attempts": len(options.tasks) * options.attempts,
        "unscored_attempts": sorted(
            attempt_key(str(r.get("repo_name")), int(r.get("attempt") or 1)) for r in rows if r.get("unscored")
        ),
        "predictions_dir": str(output_dir / "attempts"),
        "config": {
            **{k: settings.run_config[k] for k in CONFIG_METADATA},
            "model": ", ".join(reported) or options.model,
            "model_requested": options.model,
        },
        "retries": options.retries,
        **cost_metadata(rows),
        **sandbox_metadata(settings),
    }
    # where the rows' costs come from (on Ray each attempt's own gateway used the same table)
    meta["gateway"] = {"prices": settings.cost.prices.source()}
    if options.max_cost_per_attempt is not None:
        meta["max_cost_per_attempt_usd"] = options.max_cost_per_attempt
    if run.auth:
        meta["stopped_by_auth"] = {"attempt": run.auth[0][0], "message": run.auth[0][1].message}
        meta["not_run"] = sorted(run.not_run)
    if options.max_cost is not None:
        meta["max_cost_usd"] = options.max_cost
        meta["cut_by_cost_cap"] = bool(run.budget.skipped)
        meta["not_started"] = sorted(run.budget.skipped)
    return meta


def _catch_ctrl_c(hits: list[int]) -> Callable[[], None]:
    """Ctrl-C (SIGINT) appends to `hits` instead of raising KeyboardInterrupt wherever the main
    thread happens to be: Python reports and drops an exception raised inside a finalizer
    (`__del__`, a weakref callback: "Exception ignored in"), so an interrupt landing there was lost
    and the run went on to exit 0. The run polls `hits` instead. The returned function puts the
    previous handler back (once); off the main thread nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: hits.append(signum)) or signal.default_int_handler
    restored: list[bool] = []

    def restore() -> None:
        if not restored:
            restored.append(True)
            signal.signal(signal.SIGINT, previous)

    return restore


def _keyed(writer: RunWriter) -> list[dict[str, Any]]:
    return [{**e, "_key": attempt_key(str(e.get("repo_name")), int(e.get("attempt") or 1))} for e in writer.results]


def previous_entries(writer: RunWriter) -> dict[str, ReportRow]:
    """Scored attempts of this run folder (`intermediate/<run_id>/<task>.a<k>.json`); a file that
    is no row is not one: its attempt runs again."""

    out: dict[str, ReportRow] = {}
    if not writer.intermediate_dir.is_dir():
        return out
    for path in sorted(writer.intermediate_dir.glob("*.a*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            row = ReportRow.model_validate(data)
        except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
            continue
        # neither an engine's fault nor the agent CLI's failure is a result: resume runs them again
        if not bad_number(data) and row.outcome not in ("infra_error", "agent_error", "not_run"):
            out[path.stem] = row
    return out


def backend_for(options: RunOptions) -> AgentBackend:
    """The backend `options.backend` names (each declares its name: none is spelled here)."""
    for kind in _BACKENDS:
        if kind.name == options.backend:
            return kind(options)
    raise BridgeError(f"no agent backend named {options.backend!r} (known: {', '.join(BACKENDS)})")


def library_function(agent: str) -> str | None:
    """A library agent's function in upstream's generation scripts (its prompt), else None."""
    framework = find_adapter(agent).library
    return str(framework.upstream_function) if framework is not None else None


def preview_config(options: RunOptions, catalog: Catalog) -> dict[str, Any]:
    """The configuration (and its hash) a run with these options would have (`--show-config`):
    the same checks as a run, and no agent started."""
    import tempfile

    check_key(options)
    template = load_template(
        options.prompt,
        prompt_file=Path(options.prompt_file) if options.prompt_file else None,
        tasks=[catalog.get(t) for t in options.tasks],
        upstream_function=library_function(options.agent),
    )
    check_planned(template, [catalog.get(t) for t in options.tasks], options.time_limit)
    with tempfile.TemporaryDirectory(prefix="rgbridge-config-") as scratch:
        settings = settings_for(options, catalog, Path(scratch))
    check_cli(options, settings)
    return run_config(options, settings, template)
