"""`rgbridge doctor` (is this environment able to score, and to confine agents? on a Ray cluster:
every node that runs agents), and the environment checks a long run makes first with the same
checks (`--no-preflight` skips them; `evaluate` and `run` share the option)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bridge.agents.adapters.registry import ADAPTERS
from bridge.commands.common import add_json_option, console, print_json, stderr_console
from bridge.commands.disk import add_disk_budget_option


def add_preflight_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the environment checks of `rgbridge doctor` (engine, disk space, images) before the run; "
        "an agent run still checks the agent's key and CLI and its sandbox",
    )


def check_environment_first(args: argparse.Namespace, *, java: bool = False, local: bool = True) -> None:
    """What a long run does first (`evaluate`, `run`): apply `--disk-budget`, then the environment
    checks of `rgbridge doctor` (unless `--no-preflight`, or the jobs run on other machines'
    engines: ``local=False``), printing warnings; a failed check raises. The run's other two
    checks are not skipped: the agent's (bridge/agents/run/agent_checks.py) and the sandbox's."""
    from bridge.scoring.doctor import preflight
    from bridge.scoring.images.disk import apply_budget_option

    apply_budget_option(getattr(args, "disk_budget", None))
    if getattr(args, "no_preflight", False) or not local:
        return
    for check in preflight(java=java):
        if not check.ok:
            stderr_console().print(f"[yellow]pre-flight warning:[/] {check.name}: {check.detail} (fix: {check.fix})")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
