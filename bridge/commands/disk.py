"""`rgbridge cache stats/prune` (what the bridge keeps on disk, what a prune frees) and
`rgbridge doctor` (is this environment able to score, and to confine agents?), plus the `--disk-budget` and
`--no-preflight` options other verbs share (`evaluate`, `serve`, `run`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bridge.agents.adapters.registry import ADAPTERS
from bridge.commands.common import add_json_option, console, print_json, stderr_console

BUDGET_HELP = (
    "cap on what the bridge keeps on disk (dependency sets, Java layers, package and Maven caches, "
    "staged archives), e.g. 20G or 500M; least recently used sets are evicted first "
    "(default: $RGBRIDGE_DISK_BUDGET, else half of the bridge's kept total plus the free space "
    "on the engine's data root)"
)


def add_disk_budget_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--disk-budget", metavar="SIZE", help=BUDGET_HELP)


def add_preflight_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-preflight", action="store_true", help="skip the pre-flight checks of `rgbridge doctor` before the run"
    )


def apply_run_options(args: argparse.Namespace, *, java: bool = False, local: bool = True) -> None:
    """What a long run does first with these options (`evaluate`; `run` calls it too): apply
    `--disk-budget`, then (unless `--no-preflight`, or the jobs run on other machines' engines:
    ``local=False``) the pre-flight checks, printing warnings; a failed check raises."""
    from bridge.scoring.doctor import preflight
    from bridge.scoring.images.disk import apply_budget_option

    apply_budget_option(getattr(args, "disk_budget", None))
    if getattr(args, "no_preflight", False) or not local:
        return
    for check in preflight(java=java):
        if not check.ok:
            stderr_console().print(f"[yellow]pre-flight warning:[/] {check.name}: {check.detail} (fix: {check.fix})")


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

    doctor = subparsers.add_parser("doctor", help="check the environment before long runs, with fixes")
    doctor.add_argument("--path", type=Path, metavar="DIR", help="check free space here (default: engine data root)")
    doctor.add_argument("--no-index", action="store_true", help="skip the package-index probe (a container)")
    doctor.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="check every node of this Ray cluster that offers 'agent' (engine, agent CLIs and versions, sandbox, keys)",
    )
    doctor.add_argument(
        "--agent", choices=sorted(ADAPTERS), help="with --ray-address: the agent whose CLI every node needs"
    )
    doctor.add_argument("--agent-bin", metavar="PATH", help="with --ray-address: the agent's binary on the nodes")
    add_disk_budget_option(doctor)
    add_json_option(doctor)
    doctor.set_defaults(handler=cmd_doctor)


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


def cmd_doctor(args: argparse.Namespace) -> int:
    from bridge.agents.confine import sandbox_check
    from bridge.scoring.doctor import run_checks
    from bridge.scoring.images.disk import apply_budget_option

    apply_budget_option(args.disk_budget)
    if args.ray_address:  # the nodes that run agents, each named (bridge/agents/ray/checks.py)
        from bridge.agents.ray.checks import cluster_checks

        checks = cluster_checks(args.ray_address, args.agent, args.agent_bin)
    else:  # scoring's checks, then the sandbox `rgbridge run` confines its agents in
        checks = [*run_checks(path=args.path, index=not args.no_index), sandbox_check()]
    failed = any(not c.ok and c.severity == "error" for c in checks)
    if args.json:
        print_json({"ok": not failed, "checks": [c.as_dict() for c in checks]})
    else:
        out = console()
        for c in checks:
            mark = (
                "[green]ok[/]   "
                if c.ok and not c.fix
                else ("[yellow]warn[/] " if c.ok or c.severity == "warning" else "[red]FAIL[/] ")
            )
            out.print(f"{mark} {c.name:<8} {c.detail}", highlight=False, soft_wrap=True)
            if c.fix and (not c.ok or c.severity == "warning"):
                out.print(f"       fix: {c.fix}", highlight=False, soft_wrap=True)
    return 1 if failed else 0
