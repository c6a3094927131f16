"""`rgbridge tasks list|show`."""

from __future__ import annotations

import argparse

from rich import box
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from bridge.commands.common import (
    add_json_option,
    add_task_source_options,
    console,
    load_catalog,
    print_json,
    stderr_console,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    from bridge.scoring.run.engine import SCORABLE_LANGS

    rows = [task.summary() | {"scorable": task.lang in SCORABLE_LANGS} for task in catalog]
    if args.json:
        print_json({"tasks": rows, "errors": catalog.errors, "warnings": catalog.warnings})
        return 1 if catalog.errors else 0
    out = console()
    for line in catalog.warnings:
        stderr_console().print(f"[yellow]note:[/] {escape(line)}", highlight=False, soft_wrap=True)
    out.print(task_table(rows, out.width))
    if getattr(args, "dataset", None) is not None and getattr(args, "task_dir", None) is None:
        # Intended: --dataset serves the checkout's tasks under their upstream names, alone.
        out.print("[dim]shipped tasks are not listed with --dataset; add --task-dir DIR to serve both[/]")
    return 1 if catalog.errors else 0


def task_table(rows: list[dict[str, object]], width: int) -> Table:
    """Ids are what users type: their column never wraps or truncates. The title is the last
    column and only shown when the terminal is wide enough for it (`tasks show ID` has it);
    it is dropped anyway when every title is the id, as for dataset tasks."""
    columns = ["id", "lang", "framework", "port", "difficulty", "source", "scorable", "title"]
    natural = {c: max([len(str(_cell(r.get(c)))) for r in rows] + [len(c)]) for c in columns}
    # Widths come from the data (a new framework name must not push the table past the terminal);
    # at most one space of padding on each side of every column (collapsed between columns).
    fixed = sum(natural[c] for c in columns if c != "title") + 2 * len(columns)
    if (rows and all(r["title"] == r["id"] for r in rows)) or width - fixed < 20:
        columns.remove("title")
    table = Table(title=f"{len(rows)} task(s)", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in columns:
        if column == "id":
            table.add_column("id", no_wrap=True, min_width=natural["id"])
        elif column == "title":
            table.add_column("title", overflow="fold")
        else:
            # Folded (never cut with an ellipsis) only when even the natural widths do not fit.
            table.add_column(column, min_width=natural[column], overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table


def _cell(value: object) -> Text:
    """A table cell as plain text (dataset titles and names are input, never markup)."""
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    return Text("" if value is None else str(value))


def cmd_show(args: argparse.Namespace) -> int:
    from bridge.sessions.rules import rules_text

    task = load_catalog(args, report_errors=False).get(args.task_id)
    info = task.summary() | {"timeouts": task.manifest.timeouts.model_dump(), "seed_files": sorted(task.seed_files)}
    rules = rules_text(task)  # what get_task and start_task give the agent
    if args.json:
        print_json(info | {"readme": task.readme, "rules": rules})
        return 0
    out = console()
    meta = "\n".join(f"[bold]{escape(str(k))}[/]: {escape(str(v))}" for k, v in info.items())
    out.print(Panel(meta, title=Text(task.id), highlight=False))
    out.print(Panel(Text(rules), title="rules the agent is given", highlight=False))
    out.print(Markdown(task.readme))
    return 0
