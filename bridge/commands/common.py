"""Helpers shared by CLI verb groups: task-source options, JSON output, consoles."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from bridge.tasks.catalog import Catalog

if TYPE_CHECKING:
    from bridge.scoring.run.backend import Backend


def add_task_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks", type=Path, metavar="DIR", help="folder of native tasks (default: the shipped tasks/)"
    )
    parser.add_argument("--dataset", type=Path, metavar="DIR", help="a RepoGenesis checkout to serve tasks from")


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
        choices=("local", "ray"),
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
    catalog = Catalog.from_options(getattr(args, "tasks", None), getattr(args, "dataset", None))
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
