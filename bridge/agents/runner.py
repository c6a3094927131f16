"""`rgbridge run`: an agent over tasks × attempts, unattended, into a run folder in the `evaluate`
schema (bridge/scoring/run/reporting.py): `intermediate/<run_id>/<task>.a<k>.json` per attempt as it is
scored, `report_<run_id>.json` with both profiles, agent name, version and model in every row.

`run.json` holds the plan (pydantic, the boundary a resume reads back); `--resume` with the same
output folder and run id keeps every scored attempt (it is never scored twice), finishes the
ones whose agent had ended, and redoes the ones cut before their agent ended.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from bridge.agents.adapter import BASE_ENV_ALLOW, SERVER_ENV_ALLOW, AgentError, base_env
from bridge.agents.attempt import Attempt, RunSettings, Stopped, attempt_key, sandbox_metadata
from bridge.agents.command import words
from bridge.agents.registry import adapter as find_adapter
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.locations import cache_dir, data_home
from bridge.release import exact_version
from bridge.scoring.run.reporting import RunWriter, bad_number, new_run_id
from bridge.tasks.catalog import Catalog

RUN_FILE = "run.json"


class RunOptions(BaseModel):
    """The options of one run, as given (and as `run.json` keeps them for `--resume`)."""

    agent: str
    tasks: list[str]
    attempts: int = Field(1, gt=0)
    time_limit: float = Field(1800.0, gt=0)
    workers: int = Field(1, gt=0)
    model: str | None = None
    model_base_url: str | None = None
    agent_bin: str | None = None
    agent_cmd: str | None = None
    on_exit: Literal["submit", "abandon"] = "submit"
    profile: Literal["both", "strict", "compat"] = "both"
    run_id: str
    recordings: str
    server_args: list[str] = Field(default_factory=list)
    #: how each agent is confined (bridge/agents/confine/; `none` marks every row unconfined)
    sandbox: Literal["auto", "bwrap", "docker", "none"] = "auto"
    #: what else the agents may read (`--agent-bind`, read-only): absolute paths
    agent_binds: list[str] = Field(default_factory=list)


def server_env() -> dict[str, str]:
    """What the attempt's MCP server (started by the run, outside the agent's sandbox) needs of
    ours: the same data, caches and engine, HOME and the temp folder, the import path of this
    bridge. Never a token or an API key: the agent's keys stay with the agent."""
    names = (*BASE_ENV_ALLOW, "HOME", "TMPDIR", *SERVER_ENV_ALLOW)
    env = {k: os.environ[k] for k in names if os.environ.get(k)}
    env.update({k: v for k, v in os.environ.items() if k.startswith("RGBRIDGE_") and k not in ("RGBRIDGE_TOKEN",)})
    env["RGBRIDGE_HOME"] = str(data_home())
    env["RGBRIDGE_CACHE"] = str(cache_dir())
    return env


def load_options(output_dir: Path) -> RunOptions | None:
    path = output_dir / RUN_FILE
    if not path.is_file():
        return None
    try:
        return RunOptions.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BridgeError(f"{path}: not a run file this bridge can resume ({str(exc).splitlines()[0]})") from None


def settings_for(options: RunOptions, catalog: Catalog, output_dir: Path) -> RunSettings:
    agent = find_adapter(options.agent)
    if agent.name == "command":
        if not options.agent_cmd:
            raise AgentError("--agent command needs --agent-cmd TEMPLATE (with {prompt}, {workspace}, {mcp_config})")
        binary = options.agent_bin or words(options.agent_cmd)[0]
    else:
        binary = agent.find_binary(options.agent_bin)
    probe_home = output_dir / ".probe-home"
    probe_home.mkdir(parents=True, exist_ok=True)
    from bridge.agents.adapter import AttemptSetup, McpServer

    probe = AttemptSetup(binary, "", output_dir, probe_home, probe_home, McpServer("", [], {}))
    version = agent.version(binary, base_env(agent, probe)) if agent.name != "command" else "unknown"
    return RunSettings(
        adapter=agent,
        binary=binary,
        agent_version=version,
        catalog=catalog,
        output_dir=output_dir,
        recordings=Path(options.recordings),
        run_id=options.run_id,
        time_limit=options.time_limit,
        profile=options.profile,
        on_exit=options.on_exit,
        model=options.model,
        model_base_url=options.model_base_url,
        agent_cmd=options.agent_cmd,
        server_args=tuple(options.server_args),
        server_env=server_env(),
        sandbox=options.sandbox,
        agent_binds=tuple(Path(p) for p in options.agent_binds),
    )


Progress = Callable[[dict[str, Attempt], dict[str, dict[str, Any]]], None]


def execute(
    options: RunOptions,
    catalog: Catalog,
    output_dir: Path,
    *,
    resume: bool,
    progress: Progress | None = None,
    on_event: Callable[[str, str], None] | None = None,
) -> tuple[Path, list[dict[str, Any]]]:
    """Run (or finish) the plan; the report path and its rows. KeyboardInterrupt stops every agent."""
    output_dir.mkdir(parents=True, exist_ok=True)
    settings = settings_for(options, catalog, output_dir)
    write_json_atomic(output_dir / RUN_FILE, options.model_dump(mode="json"))
    writer = RunWriter(output_dir, options.run_id)
    done = previous_entries(writer) if resume else {}
    for key, entry in done.items():
        writer.record(entry, key=key)
    stop = threading.Event()
    attempts = {
        attempt_key(t, k): Attempt(settings, catalog.get(t), k, stop)
        for t in options.tasks
        for k in range(1, options.attempts + 1)
    }
    for key in done:
        if key in attempts:
            attempts[key].live.state = "done (earlier)"
    # One task's attempts run one after another: opening a session copies the task's golden files
    # (bridge/sessions/contamination.py), which an open session of the same task would record as
    # contamination. `--workers` runs different tasks at once.
    todo: dict[str, list[Attempt]] = {}
    for key, a in attempts.items():
        if key not in done:
            todo.setdefault(a.task.id, []).append(a)
    started = time.monotonic()
    failures: dict[str, str] = {}

    def task_attempts(queue: list[Attempt]) -> None:
        for attempt in queue:
            if not stop.is_set():
                one(attempt)

    def one(attempt: Attempt) -> None:
        try:
            entry = attempt.run()
        except Stopped:
            attempt.live.state = "stopped"
            return
        except BridgeError as exc:
            attempt.live.state = "failed"
            failures[attempt.key] = str(exc)
            if on_event:
                on_event(attempt.key, f"failed: {exc}")
            return
        writer.record(entry, key=attempt.key)
        if on_event:
            on_event(attempt.key, "scored")

    pool = ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="rgbridge-run")
    futures: set[Future[None]] = {pool.submit(task_attempts, queue) for queue in todo.values()}
    try:
        while futures:
            finished, futures = wait(futures, timeout=0.5, return_when=FIRST_COMPLETED)
            for f in finished:
                f.result()
            if progress:
                progress(attempts, {e["_key"]: e for e in _keyed(writer)})
    except KeyboardInterrupt:
        stop.set()  # every agent's group is ended, scoring waits stop; `--resume` carries on
        for f in futures:
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    rows = writer.results
    meta = {
        "agent": {"name": settings.adapter.name, "version": settings.agent_version, "model": options.model},
        "attempts": options.attempts,
        "time_limit_seconds": options.time_limit,
        "workers": options.workers,
        "profile": options.profile,
        "tasks": options.tasks,
        "bridge_version": exact_version(),
        "total_elapsed_seconds": round(time.monotonic() - started, 2),
        "resumed": sorted(done),
        "failed_attempts": failures,
        "predictions_dir": str(output_dir / "attempts"),
        **sandbox_metadata(settings),
    }
    return writer.finalize(meta), rows


def _keyed(writer: RunWriter) -> list[dict[str, Any]]:
    return [{**e, "_key": attempt_key(str(e.get("repo_name")), int(e.get("attempt") or 1))} for e in writer.results]


def previous_entries(writer: RunWriter) -> dict[str, dict[str, Any]]:
    """Scored attempts of this run folder (`intermediate/<run_id>/<task>.a<k>.json`)."""
    import json

    out: dict[str, dict[str, Any]] = {}
    if not writer.intermediate_dir.is_dir():
        return out
    for path in sorted(writer.intermediate_dir.glob("*.a*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and not bad_number(data) and data.get("outcome") != "infra_error":
            out[path.stem] = data
    return out


def default_run_id() -> str:
    return new_run_id()
