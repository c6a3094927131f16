"""`rgbridge plan TASK [--profile strict|compat] [--deploy-only]`: what scoring will do, as JSON.

Prints the task's `ScoringPlan` (bridge/scoring/plan.py): the images, the sandboxes (command,
env, limits, network, what is copied in) and the steps (argv, timeout, output cap, what counts
as failure). Reads the task only: no Docker engine, no repo, nothing golden is printed beyond
the test command line.
"""

from __future__ import annotations

import argparse

from bridge.commands.common import add_task_source_options, load_catalog


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("plan", help="print what scoring a task will do (images, sandboxes, steps) as JSON")
    parser.add_argument("task_id", metavar="TASK")
    add_task_source_options(parser)
    parser.add_argument("--profile", choices=("strict", "compat"), default="strict", help="strict (default) or compat")
    parser.add_argument("--deploy-only", action="store_true", help="strict: the practice check (DSR only)")
    parser.set_defaults(handler=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from bridge.scoring.run.runner import plan_for

    task = load_catalog(args, report_errors=False).get(args.task_id)
    print(plan_for(task, args.profile, deploy_only=args.deploy_only).to_json())
    return 0
