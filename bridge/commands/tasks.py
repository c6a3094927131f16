"""`rgbridge tasks list|show`."""

from __future__ import annotations

import argparse

from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table

from bridge.commands.common import add_json_option, add_task_source_options, console, load_catalog, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="list and show benchmark tasks")
    verbs = parser.add_subparsers(dest="tasks_command", metavar="VERB", required=True)

    ls = verbs.add_parser("list", help="list tasks")
    add_task_source_options(ls)
    add_json_option(ls)
    ls.set_defaults(handler=cmd_list)

    show = verbs.add_parser("show", help="show one task's manifest and README (never tests or solution)")
    show.add_argument("task_id", metavar="ID")
    add_task_source_options(show)
    add_json_option(show)
    show.set_defaults(handler=cmd_show)


def cmd_list(args: argparse.Namespace) -> int:
    catalog = load_catalog(args)
    from bridge.scoring.engine import SCORABLE_LANGS

    rows = [task.summary() | {"scorable": task.lang in SCORABLE_LANGS} for task in catalog]
    if args.json:
        print_json({"tasks": rows, "errors": catalog.errors})
    else:
        table = Table(title=f"{len(rows)} task(s)")
        columns = ("id", "title", "lang", "framework", "port", "difficulty", "source", "scorable")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*("yes" if row[c] is True else "no" if row[c] is False else str(row[c]) for c in columns))
        console().print(table)
    return 1 if catalog.errors else 0


def cmd_show(args: argparse.Namespace) -> int:
    task = load_catalog(args, report_errors=False).get(args.task_id)
    info = task.summary() | {"timeouts": task.manifest.timeouts.model_dump(), "seed_files": sorted(task.seed_files)}
    if args.json:
        print_json(info | {"readme": task.readme})
        return 0
    out = console()
    meta = "\n".join(f"[bold]{k}[/]: {v}" for k, v in info.items())
    out.print(Panel(meta, title=task.id, highlight=False))
    out.print(Markdown(task.readme))
    return 0
