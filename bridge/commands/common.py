"""Helpers shared by CLI verb groups: task-source options, JSON output, consoles."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from bridge.scoring.run.backend import BACKENDS
from bridge.tasks.catalog import Catalog

if TYPE_CHECKING:
    from bridge.scoring.run.backend import Backend


#: the options that name a task source, as every verb and the attempt's server take them
TASK_DIR_OPTION = "--task-dir"
DATASET_OPTION = "--dataset"
#: `--tasks DIR`, the folder before `--task-dir` (it still works for one release, with a warning)
OLD_TASKS_OPTION = "--tasks"
TASKS_DIR_DEPRECATED = (
    "--tasks DIR is deprecated: use --task-dir DIR (--tasks will take task ids, as in `rgbridge run`)"
)


@dataclass(frozen=True)
class TaskSource:
    """Where a verb's tasks come from: a folder of native tasks (`--task-dir`), a RepoGenesis
    checkout (`--dataset`), both, or neither (the shipped tasks)."""

    task_dir: Path | None = None
    dataset: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TaskSource:
        return cls(_absolute(getattr(args, "task_dir", None)), _absolute(getattr(args, "dataset", None)))

    @property
    def given(self) -> bool:
        return self.task_dir is not None or self.dataset is not None

    def catalog(self) -> Catalog:
        return Catalog.from_options(self.task_dir, self.dataset)

    def server_args(self) -> list[str]:
        """The same source as options of the MCP server (`serve`) the verb starts or configures."""
        args: list[str] = []
        if self.task_dir is not None:
            args += [TASK_DIR_OPTION, str(self.task_dir)]
        if self.dataset is not None:
            args += [DATASET_OPTION, str(self.dataset)]
        return args


def _absolute(path: Path | None) -> Path | None:
    return None if path is None else Path(os.path.abspath(os.path.expanduser(str(path))))


def old_spelling(message: str) -> type[argparse.Action]:
    """The argparse action of an option's old name (one release): it stores as the new name
    does, and says `message` on stderr."""

    class OldSpelling(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: str | Sequence[object] | None,
            option_string: str | None = None,
        ) -> None:
            print(f"{parser.prog}: warning: {message}", file=sys.stderr)
            setattr(namespace, self.dest, values)

    return OldSpelling


def add_task_source_options(
    parser: argparse.ArgumentParser, *, task_ids: bool = False, passed_through: bool = False
) -> None:
    """`--task-dir DIR` and `--dataset DIR` (a TaskSource, `TaskSource.from_args`), the same on
    every verb. `task_ids`: `--tasks ID ...` picks tasks (`run`); otherwise `--tasks DIR` is the
    deprecated spelling of `--task-dir`. `passed_through`: the verb only hands them to a server."""
    through = "passed through to the server; " if passed_through else ""
    parser.add_argument(
        TASK_DIR_OPTION,
        type=Path,
        metavar="DIR",
        help=through + "folder of native tasks (default: the shipped tasks/)",
    )
    parser.add_argument(
        DATASET_OPTION, type=Path, metavar="DIR", help=through + "a RepoGenesis checkout to take tasks from"
    )
    if task_ids:
        parser.add_argument(
            OLD_TASKS_OPTION, nargs="+", metavar="ID", help="task ids (default with --dataset: all of them)"
        )
    else:
        parser.add_argument(
            OLD_TASKS_OPTION,
            type=Path,
            metavar="DIR",
            dest="task_dir",
            action=old_spelling(TASKS_DIR_DEPRECATED),
            help=argparse.SUPPRESS,
        )


PROFILE_CHOICES = ("both", "strict", "compat")

#: the help of every `--recordings DIR` (the folder is bridge/locations.py's default_recordings_dir)
RECORDINGS_HELP = "where sessions are recorded (default: $RGBRIDGE_RECORDINGS, else <data home>/recordings)"


def add_profile_option(parser: argparse.ArgumentParser, default: str | None = "both") -> None:
    parser.add_argument(
        "--profile",
        choices=PROFILE_CHOICES,
        default=default,
        help="scoring profile(s): both (default), strict or compat",
    )


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="where scoring jobs run: this machine (default) or a Ray cluster (extra 'ray')",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster to join (default: $RAY_ADDRESS, else the cluster started on this machine)",
    )


def open_backend(args: argparse.Namespace) -> Backend | None:
    """The backend of `--backend/--ray-address` (None for local: the engine's default)."""
    from bridge.scoring.run.engine import make_backend

    if args.backend == "local" and not args.ray_address:
        return None
    return make_backend(args.backend, ray_address=args.ray_address)


def at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """The argparse `type` of every whole-number option: one rule and one message everywhere
    (`--workers 0` and `--workers -1` are refused alike)."""
    bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be a whole number {bound}, not {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def positive_seconds(text: str) -> float:
    """The argparse `type` of every duration option: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def load_catalog(args: argparse.Namespace, *, report_errors: bool = True) -> Catalog:
    catalog = TaskSource.from_args(args).catalog()
    if report_errors and catalog.errors:
        err = stderr_console()
        for line in catalog.errors:
            err.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    return catalog


def print_json(data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a non-UTF-8 file name (lone surrogates): JSON escapes keep its bytes
        text = json.dumps(data, indent=2, ensure_ascii=True, default=str)
    sys.stdout.write(text + "\n")


def print_scores(entries: list[dict[str, Any]], out: Console | None = None) -> None:
    """The terminal result of any score: the table of both profiles, then why each repo missed
    full marks (tests not passed with their message lines, AC disagreement)."""
    from bridge.reports.table import render_table
    from bridge.scoring.explanations import render_explanations

    out = out or console()
    render_table(entries, out)
    render_explanations(entries, out)


def console() -> Console:
    return Console()


def stderr_console() -> Console:
    return Console(stderr=True)
