"""`rgbridge agents install NAME` and `rgbridge agents list`: the library agents' environments
(bridge/agents/adapters/installs.py), one virtual environment per framework (bridge/locations.py `agents_home`),
from the version each adapter pins."""

from __future__ import annotations

import argparse
import json

from bridge.agents.adapters.installs import install, installed
from bridge.agents.adapters.library import env_dir
from bridge.agents.adapters.registry import FRAMEWORKS
from bridge.commands.common import stderr_console


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("agents", help="library agents' environments (MetaGPT, Qwen-Agent, MS-Agent, DeepCode)")
    sub = p.add_subparsers(dest="agents_command", metavar="ACTION", required=True)
    i = sub.add_parser("install", help="build a framework's own virtual environment from its pinned version")
    i.add_argument("names", nargs="+", choices=sorted(FRAMEWORKS), metavar="NAME", help=", ".join(sorted(FRAMEWORKS)))
    i.add_argument("--python", metavar="PATH", help="the interpreter of the environment (default: the bridge's)")
    i.add_argument("--force", action="store_true", help="build it again even when it is complete")
    i.add_argument("--json", action="store_true", help="print what was installed as JSON")
    i.set_defaults(handler=cmd_install)
    ls = sub.add_parser("list", help="the library agents, their pinned versions and what is installed")
    ls.set_defaults(handler=cmd_list)


def cmd_install(args: argparse.Namespace) -> int:
    err = stderr_console()
    done = []
    for name in dict.fromkeys(args.names):
        record = install(
            FRAMEWORKS[name], python=args.python, force=args.force, say=lambda line: err.print(line, markup=False)
        )
        done.append(record.__dict__)
    if args.json:
        print(json.dumps(done, indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for name, framework in sorted(FRAMEWORKS.items()):
        record = installed(framework)
        state = (
            f"{record.version} in {record.env} ({record.bytes / 1e6:.0f} MB, {record.seconds:g} s to install)"
            if record
            else f"not installed (would go to {env_dir(framework)})"
        )
        print(f"{name:<11} pinned {framework.requirement:<40} {state}")
    return 0
