"""The plan of one `rgbridge run` from what was asked: the options of a new run (`RunRequest`, the
command line's values as given), or those `run.json` keeps for `--resume`, merged with what a
resume may change (the backend, the Ray address, `--allow-errors`). `rgbridge run`
(bridge/commands/run.py) only parses, calls this and the runner, and prints."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bridge.agents.adapters.library import home_python
from bridge.agents.adapters.registry import ADAPTERS
from bridge.agents.confine.choose import SandboxKind
from bridge.agents.gateway.prices import parse_price
from bridge.agents.run.options import RunOptions, load_options
from bridge.errors import BridgeError
from bridge.scoring.run.backend import BackendName
from bridge.scoring.run.reporting import new_run_id
from bridge.sessions.attempts import check_run_id
from bridge.tasks.catalog import Catalog


@dataclass(frozen=True)
class RunRequest:
    """What `rgbridge run` was asked, as given (names as its flags'; paths as typed, made
    absolute here). `server_args`: the task source's options for the agent's MCP server."""

    agent: str | None = None
    tasks: list[str] | None = None
    lang: str | None = None
    dataset: Path | None = None
    server_args: list[str] = field(default_factory=list)
    attempts: int = 1
    time_limit: float = 1800.0
    workers: int = 1
    model: str | None = None
    model_base_url: str | None = None
    agent_bin: str | None = None
    agent_home: Path | None = None
    agent_cmd: str | None = None
    on_exit: str = "submit"
    profile: str = "both"
    output_dir: Path | None = None
    recordings: Path | None = None
    run_id: str | None = None
    sandbox: SandboxKind = "auto"
    network: str | None = None
    allow_host: list[str] = field(default_factory=list)
    agent_bind: list[Path] = field(default_factory=list)
    agent_memory: int | None = None
    agent_pids: int | None = None
    agent_disk: int | None = None
    resume: bool = False
    backend: BackendName | None = None
    ray_address: str | None = None
    prompt: str = "bridge"
    prompt_file: Path | None = None
    retries: int = 2
    retry_backoff: list[float] = field(default_factory=lambda: [5.0, 20.0])
    allow_errors: bool = False
    agent_version: str | None = None
    max_cost: float | None = None
    max_cost_per_attempt: float | None = None
    #: `--price MODEL=IN,OUT[,CACHE_READ,CACHE_WRITE]` as given (parsed here)
    price: list[str] = field(default_factory=list)


def plan_run(request: RunRequest, catalog: Catalog) -> tuple[RunOptions, Path]:
    """The run's options and its folder: a resumed run's (`run.json`, merged with what a resume
    may change), else a new one's from the request."""
    if request.resume:
        if request.output_dir is None:
            raise BridgeError("--resume needs --output-dir OUT (the run folder to finish)")
        out = absolute(request.output_dir)
        return resumed_options(out, request), out
    return new_options(request, catalog)


def resumed_options(out: Path, request: RunRequest) -> RunOptions:
    """The options `run.json` in `out` keeps; `--resume` goes on with the backend (and Ray
    address) given now, else the run's own, and `--allow-errors` given now holds too."""
    previous = load_options(out)
    if previous is None:
        raise BridgeError(f"--resume: {out} holds no run (no run.json)")
    return previous.model_copy(
        update={
            "allow_errors": previous.allow_errors or request.allow_errors,
            "backend": request.backend or previous.backend,
            "ray_address": request.ray_address or previous.ray_address,
        }
    )


def new_options(request: RunRequest, catalog: Catalog) -> tuple[RunOptions, Path]:
    """A new run's options (validated: RunOptions is the boundary) and its folder (default
    runs/<run id>)."""
    if not request.agent:
        raise BridgeError("--agent is required (choose from " + ", ".join(sorted(ADAPTERS)) + ")")
    run_id = check_run_id(request.run_id or new_run_id())
    out = absolute(request.output_dir) if request.output_dir is not None else Path("runs").absolute() / run_id
    options = RunOptions.model_validate(
        {
            "agent": request.agent,
            "tasks": select_tasks(catalog, request.tasks, request.lang, request.dataset is not None),
            "attempts": request.attempts,
            "time_limit": request.time_limit,
            "workers": request.workers,
            "model": request.model,
            "model_base_url": request.model_base_url,
            "agent_bin": request.agent_bin or home_python(request.agent_home),
            "agent_cmd": request.agent_cmd,
            "on_exit": request.on_exit,
            "profile": request.profile,
            "run_id": run_id,
            "recordings": str(absolute(request.recordings) if request.recordings else out / "recordings"),
            "server_args": request.server_args,
            "retries": request.retries,
            "retry_backoff": request.retry_backoff,
            "allow_errors": request.allow_errors,
            "prompt": request.prompt,
            "prompt_file": str(absolute(request.prompt_file)) if request.prompt_file else None,
            "agent_version": request.agent_version,
            "max_cost": request.max_cost,
            "max_cost_per_attempt": request.max_cost_per_attempt,
            "prices": dict(parse_price(p) for p in request.price),
            "sandbox": request.sandbox,
            "agent_binds": [str(absolute(p)) for p in request.agent_bind],
            "network": request.network,
            "allow_hosts": list(request.allow_host),
            "limits": limits_option(request.agent_memory, request.agent_pids, request.agent_disk),
            "ray_address": request.ray_address,
            **({"backend": request.backend} if request.backend else {}),  # else RunOptions' default
        }
    )
    return options, out


def select_tasks(catalog: Catalog, ids: list[str] | None, lang: str | None, dataset: bool) -> list[str]:
    """The run's task ids: those given (every one known), else the dataset's; only `lang`'s."""
    if not ids:
        if not dataset:
            raise BridgeError("give --tasks ID... or --dataset DIR")
        ids = sorted(catalog.tasks)
    for task_id in ids:
        if task_id not in catalog.tasks:
            raise BridgeError(f"unknown task {task_id!r}{catalog.did_you_mean(task_id)}")
    chosen = [t for t in dict.fromkeys(ids) if lang is None or catalog.tasks[t].lang == lang]
    if not chosen:
        raise BridgeError(f"no {lang} task among {', '.join(ids)}")
    return chosen


def limits_option(memory: int | None, pids: int | None, disk: int | None) -> dict[str, int]:
    """`--agent-memory/--agent-pids/--agent-disk` as RunOptions.limits: only what was given (the
    rest keeps Limits' documented defaults)."""
    given = {"memory_bytes": memory, "pids": pids, "workspace_bytes": disk}
    return {k: v for k, v in given.items() if v is not None}


def absolute(path: Path) -> Path:
    """`path` with `~` expanded, made absolute (not resolved: a link the user named stays one)."""
    return Path(os.path.abspath(os.path.expanduser(str(path))))
