"""`rgbridge run --agent NAME`: an agent CLI over tasks × attempts, unattended (bridge/agents/).

Exit codes: 0 done (every attempt scored, or `--allow-errors`), 2 refused or failed (no model
key, no CLI version, a changed configuration on `--resume`, ...), 3 (`EXIT_AGENT_ERRORS`) some
attempts stayed `agent_error` after their retries, 4 (`EXIT_UNSCORED`) some planned attempts have
no score (they could not start, were not started under the cost cap, or were abandoned: each is a
row saying why), 130 stopped by Ctrl-C."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bridge.agents.adapters.registry import ADAPTERS
from bridge.agents.attempt.lifecycle import Attempt
from bridge.agents.confine import KINDS
from bridge.agents.ray.driver import RayAttempts
from bridge.agents.run.local import LocalAttempts
from bridge.agents.run.options import RunOptions
from bridge.agents.run.plan import RunRequest, absolute, plan_run, select_tasks
from bridge.agents.run.planned import EXIT_UNSCORED
from bridge.agents.run.prompt import PROMPT_KINDS, load_template
from bridge.agents.run.runner import EXIT_AGENT_ERRORS, execute, library_function, preview_config
from bridge.commands.common import (
    PROFILE_CHOICES,
    TaskSource,
    add_task_source_options,
    at_least,
    positive_seconds,
    stderr_console,
)
from bridge.commands.disk import add_disk_budget_option
from bridge.commands.doctor import add_preflight_option, check_environment_first
from bridge.errors import BridgeError
from bridge.fs.walk import walk_files_at
from bridge.reports.leaderboard import leaderboard_lines
from bridge.reports.table import render_table
from bridge.scoring.images.disk import parse_size
from bridge.scoring.run.backend import BACKENDS
from bridge.tasks.catalog import Catalog


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("run", help="run an agent CLI over tasks × attempts: isolated, timed, recorded, scored")
    p.add_argument("--agent", choices=sorted(ADAPTERS), help="the agent adapter")
    add_task_source_options(p, task_ids=True)
    p.add_argument("--lang", choices=("python", "java"), help="only tasks of this language")
    p.add_argument("--attempts", type=at_least(1), default=1, metavar="N", help="attempts per task (default 1)")
    p.add_argument("--time-limit", type=positive_seconds, default=1800.0, metavar="S", help="agent wall time (s)")
    p.add_argument("--workers", type=at_least(1), default=1, metavar="N", help="attempts at once (default 1)")
    p.add_argument("--model", metavar="NAME", help="the model the agent is asked to use")
    p.add_argument("--model-base-url", metavar="URL", help="model endpoint (keys stay in the environment)")
    p.add_argument("--agent-bin", metavar="PATH", help="the agent's binary (default: PATH, then the PyPI wheel)")
    p.add_argument(
        "--agent-home",
        type=Path,
        metavar="DIR",
        help="a library agent's own virtual environment (default: the one `rgbridge agents install` built)",
    )
    p.add_argument("--agent-cmd", metavar="TEMPLATE", help="--agent command: {prompt} {workspace} {mcp_config}")
    p.add_argument("--on-exit", choices=("submit", "abandon"), default="submit", help="an agent ending unsubmitted")
    p.add_argument("--profile", choices=PROFILE_CHOICES, default="both", help="scoring profile(s) (default both)")
    p.add_argument("--output-dir", type=Path, metavar="OUT", help="the run folder (default runs/<run id>)")
    p.add_argument(
        "--recordings", type=Path, metavar="DIR", help="where sessions are recorded (default OUT/recordings)"
    )
    p.add_argument("--run-id", metavar="ID", help="the run's id (default: the time)")
    p.add_argument(
        "--sandbox",
        choices=KINDS,
        default="auto",
        help="how each agent is confined (default auto: bubblewrap where it works, else Docker; "
        "none runs it unconfined and marks every row so)",
    )
    p.add_argument(
        "--network",
        choices=("closed", "allow", "host"),
        help="what the agent reaches (default closed: only its MCP server and the model gateway, through "
        "doors; allow: also the --allow-host names through a logging proxy; host: the host's network, "
        "rows marked; --sandbox none implies host)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="with --network allow: a host name the agent may reach (repeatable; exact match)",
    )
    p.add_argument(
        "--agent-bind",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a path the agent may also read (read-only; repeatable), e.g. its own virtual environment",
    )
    p.add_argument("--agent-memory", type=_size, metavar="SIZE", help="memory of one attempt's processes (default 4G)")
    p.add_argument(
        "--agent-pids", type=at_least(8), metavar="N", help="processes of one attempt at once (default 1024)"
    )
    p.add_argument("--agent-disk", type=_size, metavar="SIZE", help="disk of one attempt's folders (default 2G)")
    p.add_argument("--resume", action="store_true", help="finish a stopped run in OUT (scored attempts are kept)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="where attempts run: here (local, the default) or on a Ray cluster's nodes offering 'agent'",
    )
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--show-prompt", action="store_true", help="print the prompt of the first task and exit")
    p.add_argument(
        "--prompt",
        choices=PROMPT_KINDS,
        default="bridge",
        help="bridge (default); upstream: the RepoGenesis generation script's template (needs --dataset); file",
    )
    p.add_argument("--prompt-file", type=Path, metavar="F", help="--prompt file: a template with {readme}, ...")
    p.add_argument(
        "--retries", type=at_least(0), default=2, metavar="N", help="retries of an agent_error attempt (default 2)"
    )
    p.add_argument(
        "--retry-backoff",
        type=_delays,
        default=[5.0, 20.0],
        metavar="S[,S...]",
        help="seconds before each retry, the last repeated (default 5,20)",
    )
    p.add_argument(
        "--allow-errors",
        action="store_true",
        help=f"exit 0 even when attempts stay agent_error (else {EXIT_AGENT_ERRORS})",
    )
    p.add_argument("--agent-version", metavar="V", help="refuse to run unless the CLI's version is V")
    p.add_argument("--max-cost", type=_usd, metavar="USD", help="start no attempt once the run has spent USD")
    p.add_argument(
        "--max-cost-per-attempt", type=_usd, metavar="USD", help="end each attempt (cost_limit) once it has spent USD"
    )
    p.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="MODEL=IN,OUT",
        help="a model's price, USD per million tokens (IN,OUT[,CACHE_READ,CACHE_WRITE]); repeatable",
    )
    p.add_argument("--show-config", action="store_true", help="print the run's configuration and its hash, and exit")
    add_disk_budget_option(p)
    add_preflight_option(p)
    p.set_defaults(handler=cmd_run)


def _catalog(args: argparse.Namespace) -> Catalog:
    return TaskSource.from_args(args).catalog()


def _request(args: argparse.Namespace) -> RunRequest:
    """The command line's values as the plan takes them (bridge/agents/run/plan.py)."""
    given = {f.name: getattr(args, f.name) for f in fields(RunRequest) if hasattr(args, f.name)}
    return RunRequest(**{**given, "server_args": TaskSource.from_args(args).server_args()})


def _delays(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(not (0 <= v <= 3600) for v in values):
        raise argparse.ArgumentTypeError(f"must be seconds (0 to 3600) separated by commas, not {text!r}")
    return values


def _usd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be an amount of US dollars above 0, not {text!r}")
    return value


def cmd_run(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    if args.show_prompt:
        return _show_prompt(args, catalog)
    options, out = plan_run(_request(args), catalog)
    if args.show_config:
        sys.stdout.write(json.dumps(preview_config(options, catalog), indent=2) + "\n")
        return 0
    java = any(catalog.get(t).lang == "java" for t in options.tasks)
    check_environment_first(args, java=java, local=options.backend == LocalAttempts.name)  # Ray: each node instead
    err = stderr_console()
    live = Live(Table(), console=err, refresh_per_second=2, transient=False) if err.is_terminal else None
    if live is not None:
        live.start()

    def progress(attempts: dict[str, Attempt], done: dict[str, dict[str, Any]]) -> None:
        if live is not None:
            live.update(_table(attempts, node=options.backend == RayAttempts.name))

    def on_event(key: str, what: str) -> None:
        if live is None:
            print(f"rgbridge run: {key} {what}", file=sys.stderr, flush=True)

    try:
        report, rows = execute(options, catalog, out, resume=args.resume, progress=progress, on_event=on_event)
    finally:
        if live is not None:
            live.stop()
    return _print_outcome(report, rows, options)


def _show_prompt(args: argparse.Namespace, catalog: Catalog) -> int:
    """`--show-prompt`: the first task's prompt, printed; no run."""
    tasks = select_tasks(catalog, args.tasks, args.lang, args.dataset is not None)
    template = load_template(
        args.prompt,
        prompt_file=absolute(args.prompt_file) if args.prompt_file else None,
        tasks=[catalog.get(tasks[0])],
        upstream_function=library_function(args.agent) if args.agent else None,
    )
    sys.stdout.write(template.render(catalog.get(tasks[0]), args.time_limit) + "\n")
    return 0


def _print_outcome(report: Path, rows: list[dict[str, Any]], options: RunOptions) -> int:
    """The report's table, leaderboard, configuration, cost and cuts printed; the run's exit code."""
    console = Console()
    render_table(rows, console)
    data = _load(report)
    for line in leaderboard_lines(data):
        console.print(Text(line))
    meta = _dict(data.get("metadata"))
    config = _dict(meta.get("config"))
    console.print(Text(f"configuration: {config.get('hash')}"))
    console.print(Text(_spent(meta)))
    if meta.get("cut_by_cost_cap"):
        console.print(
            Text(
                f"cut by the cost cap (--max-cost {meta.get('max_cost_usd')}): not started: {', '.join(meta['not_started'])}"
            )
        )
    console.print(Text(f"report: {report}"))
    stopped = _dict(meta.get("stopped_by_auth"))
    if stopped:  # the key is refused: no attempt can succeed, whatever --allow-errors says
        not_run = ", ".join(meta.get("not_run") or []) or "none"
        console.print(Text(f"the run stopped: {stopped.get('attempt')}: {stopped.get('message')}; not run: {not_run}"))
        print(f"rgbridge run: the provider refused the key: {stopped.get('message')}", file=sys.stderr, flush=True)
        return EXIT_AGENT_ERRORS
    errored = meta.get("errored_attempts") or []
    if errored and not options.allow_errors:
        console.print(
            Text(
                f"{len(errored)} attempt(s) stayed agent_error after {options.retries} retries: {', '.join(errored)}"
                f" (exit {EXIT_AGENT_ERRORS}; --allow-errors accepts them)"
            )
        )
        return EXIT_AGENT_ERRORS
    unscored = meta.get("unscored_attempts") or []
    if unscored:  # issue 38, item 8: every planned attempt has a score, or the exit says so
        console.print(
            Text(f"{len(unscored)} planned attempt(s) have no score: {', '.join(unscored)} (exit {EXIT_UNSCORED})")
        )
        return EXIT_UNSCORED
    return 0


def _spent(meta: dict[str, Any]) -> str:
    tokens = _dict(meta.get("tokens"))
    cost = meta.get("cost_usd")
    parts = [f"{k.replace('_', ' ')} {v}" for k, v in tokens.items() if isinstance(v, int)]
    return (
        "cost: "
        + (f"${cost:.4f}" if isinstance(cost, int | float) else "not reported")
        + (f" ({', '.join(parts)} tokens)" if parts else "")
    )


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _table(attempts: dict[str, Attempt], *, node: bool = False) -> Table:
    table = Table(title="rgbridge run")
    for col in ("attempt", "state", *(("node",) if node else ()), "elapsed", "tool calls", "files"):
        table.add_column(col)
    now = time.monotonic()
    for key, a in attempts.items():
        live = a.live
        elapsed = "" if live.started is None else f"{(live.ended or now) - live.started:.0f}s"
        where = (Text(live.node),) if node else ()
        table.add_row(
            Text(key), Text(live.state), *where, elapsed, str(_tool_calls(live.stream)), str(_files(live.workspace))
        )
    return table


def _tool_calls(stream: Path | None) -> int:
    # A cheap live count: lines of the stream that mention a tool call (the exact count is the parser's).
    try:
        with open(stream or "", "rb") as fh:
            data = fh.read(8 * 1024 * 1024)
    except OSError:
        return 0
    return sum(data.count(m) for m in (b'"tool_use"', b'"mcp_tool_call"', b'"command_execution"', b'"tool_call"'))


def _files(workspace: Path | None) -> int:
    # The agent's workspace is untrusted: walked like the recorder walks it (bridge/fs: no symlink
    # followed, the same ignore rules), counted up to a cap.
    if workspace is None:
        return 0
    return sum(1 for _ in itertools.islice(walk_files_at(workspace), _FILES_CAP))


_FILES_CAP = 10000


def _size(text: str) -> int:
    try:
        size = parse_size(text)
    except BridgeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size above zero (e.g. 4G, 512M)")
    return size
