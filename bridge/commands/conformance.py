"""`rgbridge conformance --dataset DIR`: every task of a checkout against two control repos."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.markup import escape
from rich.table import Table

from bridge.commands.common import (
    TaskSource,
    add_json_option,
    add_profile_option,
    add_task_source_options,
    at_least,
    console,
    load_catalog,
    print_json,
    stderr_console,
)

if TYPE_CHECKING:
    from bridge.scoring.run.conformance import ConformanceRow


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "conformance",
        help="collect every golden suite of a checkout and score an empty and an all-404 repo under both profiles",
    )
    add_task_source_options(parser)  # no default here: give one of the two
    parser.add_argument("--only", nargs="*", metavar="ID", help="only these task ids")
    parser.add_argument("--lang", choices=("python", "java"), help="only tasks of this language")
    parser.add_argument("--workers", type=at_least(1), default=2, help="tasks checked in parallel (default 2)")
    parser.add_argument("--work-dir", type=Path, metavar="DIR", help="control repos and per-task results")
    parser.add_argument("--no-cache", action="store_true", help="re-score even when results are cached")
    add_profile_option(parser)
    add_json_option(parser)
    parser.set_defaults(handler=cmd_conformance)


def cmd_conformance(args: argparse.Namespace) -> int:
    from bridge.scoring.run.conformance import row_dict, run_conformance

    if not TaskSource.from_args(args).given:
        stderr_console().print("[red]error:[/] give --dataset DIR (a RepoGenesis checkout) or --task-dir DIR")
        return 2
    catalog = load_catalog(args)
    tasks = [t for t in catalog if (not args.only or t.id in args.only) and (not args.lang or t.lang == args.lang)]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="rgbridge-conformance-"))
    err = stderr_console()
    started = time.monotonic()
    with err.status("conformance", spinner="dots") as status:

        def say(task_id: str, message: str) -> None:
            line = message.strip().splitlines()[-1] if message.strip() else ""
            if line and not args.json:
                status.update(escape(f"{task_id}: {line[:90]}"))

        rows = run_conformance(
            tasks, work_dir=work, profile=args.profile, workers=args.workers, use_cache=not args.no_cache, progress=say
        )
    seconds = round(time.monotonic() - started, 1)
    data = {"tasks": [row_dict(r) for r in rows], "seconds": seconds, "errors": catalog.errors, "work_dir": str(work)}
    (work / "conformance.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    if args.json:
        print_json(data)
    else:
        render(rows, seconds)
        console().print(f"details: {work / 'conformance.json'}")
    return 1 if any(r.infra_errors for r in rows) else 0


def render(rows: list[ConformanceRow], seconds: float) -> None:
    """One table row per task (ids never truncated), then each task's quirks and task errors on
    their own lines, so the table stays readable in 80 columns."""
    out = console()
    table = Table(title=f"conformance: {len(rows)} task(s) in {seconds:.0f}s", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("task", no_wrap=True, min_width=max([len(r.task) for r in rows] + [4]))
    table.add_column("items", justify="right")
    table.add_column("compat n\nempty/404", justify="right")
    table.add_column("empty repo\nstrict | compat")
    table.add_column("all-404 repo\nstrict | compat")
    for r in rows:
        items = "-" if r.strict_items is None else str(r.strict_items)
        if r.collection_errors:
            items += f" ({r.collection_errors} err)"
        compat_n = "/".join(str(r.compat_totals.get(c, "-")) for c in ("empty", "404"))
        cells = [" | ".join(r.outcomes.get(c, {}).get(p, "-") for p in ("strict", "compat")) for c in ("empty", "404")]
        table.add_row(r.task, items, compat_n, *cells)
    out.print(table)
    for r in rows:
        line = ", ".join(r.quirks) or "none"
        out.print(f"[bold]{escape(r.task)}[/] quirks: {escape(line)}", highlight=False, soft_wrap=True)
        if r.task_error:
            out.print(f"  [yellow]task error:[/] {escape(r.task_error)}", highlight=False, soft_wrap=True)
