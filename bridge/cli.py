"""The `rgbridge` command line: a thin adapter over the bridge library.

Verb groups live in `bridge/commands/*.py`, each with `register(subparsers)`. Adapters outside
`bridge/` (the MCP server's `serve` and `ide-config`) register through the `rgbridge.commands`
entry-point group, so `bridge/` never imports them.
"""

from __future__ import annotations

import argparse
import gc
import sys
from importlib import metadata

from rich.console import Console
from rich.markup import escape

from bridge import __version__
from bridge.commands import (
    agents,
    conformance,
    disk,
    doctor,
    plan,
    recordings,
    report,
    run,
    scoring,
    sessions,
    tasks,
    view,
)
from bridge.errors import BridgeError

BUILTIN_GROUPS = (tasks, scoring, disk, doctor, plan, sessions, recordings, report, conformance, run, view, agents)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rgbridge",
        description="Evaluate IDE agents on RepoGenesis tasks: MCP bridge, recorder, containerized scoring.",
    )
    parser.add_argument("--version", action="version", version=f"rgbridge {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in BUILTIN_GROUPS:
        group.register(subparsers)
    for entry in metadata.entry_points(group="rgbridge.commands"):
        try:
            entry.load()(subparsers)
        except Exception as exc:  # a broken plugin must not take the whole CLI down
            print(f"rgbridge: warning: command {entry.name!r} unavailable: {exc}", file=sys.stderr)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        result = handler(args)
    except BridgeError as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, markup=True, soft_wrap=True
        )
        return 2
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted")
        return 130
    return int(result or 0)


def entry() -> None:
    """The `rgbridge` program: ``main``, then the process ends. Its objects die with it, so they
    are frozen first: the interpreter's exit then skips a garbage collection over all of them,
    which took 0.3-0.7 s after a never-seen set's score, beside the set's bytecode compile
    (docs/measurements.md). ``main`` itself stays free of this for callers in a process that
    goes on (tests, embedding)."""
    code = main()
    sys.stdout.flush()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
