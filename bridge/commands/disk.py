"""`rgbridge cache stats/prune` (what the bridge keeps on disk, what a prune frees), plus the
`--disk-budget` option other verbs share (`evaluate`, `serve`, `run`, `doctor`)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from bridge.commands.common import add_json_option, console, print_json

BUDGET_HELP = (
    "cap on what the bridge keeps on disk (dependency sets, Java layers, package and Maven caches, "
    "staged archives), e.g. 20G or 500M; least recently used sets are evicted first "
    "(default: $RGBRIDGE_DISK_BUDGET, else half of the bridge's kept total plus the free space "
    "on the engine's data root)"
)


def add_disk_budget_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--disk-budget", metavar="SIZE", help=BUDGET_HELP)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cache = subparsers.add_parser("cache", help="what the bridge keeps on disk: stats and prune")
    verbs = cache.add_subparsers(dest="cache_command", metavar="VERB", required=True)
    stats = verbs.add_parser("stats", help="kept sets, caches and images: size, last use, in use")
    stats.add_argument("--max-size", metavar="SIZE", help="also say what `prune --max-size SIZE` would free")
    stats.add_argument("--older-than", metavar="AGE", help="also say what `prune --older-than AGE` would free")
    add_json_option(stats)
    stats.set_defaults(handler=cmd_cache_stats)
    prune = verbs.add_parser("prune", help="remove unused sets (least recently used first)")
    prune.add_argument("--max-size", metavar="SIZE", help="remove until the kept total is at most SIZE (e.g. 10G)")
    prune.add_argument("--older-than", metavar="AGE", help="remove sets unused for AGE (e.g. 7d, 12h)")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    add_json_option(prune)
    prune.set_defaults(handler=cmd_cache_prune)


def _limits(args: argparse.Namespace) -> tuple[int | None, float | None]:
    from bridge.scoring.images.disk import parse_age, parse_size

    size = parse_size(args.max_size) if args.max_size else None
    age = parse_age(args.older_than) if args.older_than else None
    return size, age


def _ago(epoch: float) -> str:
    seconds = max(0.0, time.time() - epoch)
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.1f}{unit} ago"
    return f"{seconds:.0f}s ago"


def cmd_cache_stats(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from bridge.scoring.images.disk import format_size, kept_inventory, prune, resolve_budget
    from bridge.scoring.sandbox.docker_client import require_engine

    client = require_engine()
    size, age = _limits(args)
    inv = kept_inventory(client)
    budget = resolve_budget(client, inv.budgeted_bytes)
    would = prune(client, max_bytes=size, older_than=age, dry_run=True) if size is not None or age is not None else None
    data: dict[str, Any] = {
        "kept_bytes": inv.budgeted_bytes,
        "budget_bytes": budget.bytes,
        "budget_source": budget.source,
        "untracked_sets": inv.untracked,
        "items": [asdict(i) for i in sorted(inv.items, key=lambda i: (i.kind, -i.last_used))],
        "prune_would_free_bytes": (would.kept_before - would.kept_after) if would else None,
        "prune_would_remove": [i.name for i in would.evicted] if would else None,
    }
    if args.json:
        print_json(data)
        return 0
    out = console()
    for item in data["items"]:
        flags = ("in use " if item["in_use"] else "") + ("" if item["budgeted"] else "(not counted)")
        out.print(
            f"{item['kind']:<13} {format_size(item['bytes']):>8}  {_ago(item['last_used']):>10}  {item['name']}  {flags}",
            highlight=False,
            soft_wrap=True,
        )
    out.print(f"kept (counted): {format_size(inv.budgeted_bytes)}; budget: {budget.describe()}", soft_wrap=True)
    if inv.untracked:
        out.print(f"{inv.untracked} set(s) on the engine were not used through this cache folder (not counted)")
    if would is not None:
        out.print(
            f"prune would remove {len(would.evicted)} set(s), freeing {format_size(would.kept_before - would.kept_after)}"
        )
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from bridge.errors import BridgeError
    from bridge.scoring.images.disk import format_size, prune
    from bridge.scoring.sandbox.docker_client import require_engine

    size, age = _limits(args)
    if size is None and age is None:
        raise BridgeError("cache prune needs --max-size SIZE and/or --older-than AGE")
    report = prune(require_engine(), max_bytes=size, older_than=age, dry_run=args.dry_run)
    freed = report.kept_before - report.kept_after
    data = {
        "dry_run": args.dry_run,
        "removed": [i.name for i in report.evicted],
        "freed_bytes": freed,
        "kept_bytes": report.kept_after,
    }
    if args.json:
        print_json(data)
    else:
        verb = "would remove" if args.dry_run else "removed"
        console().print(
            f"{verb} {len(report.evicted)} set(s), {format_size(freed)}; kept now {format_size(report.kept_after)}"
        )
    return 0
