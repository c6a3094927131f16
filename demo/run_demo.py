"""Demo: a scripted "agent" solves a shipped task through the bridge's MCP server and gets scored.

    python demo/run_demo.py [--task kv-ledger] [--profile both] [--workspace DIR] [--recordings DIR]

It launches `python -m mcp_server` over stdio exactly as an IDE would, lists the tasks, starts a
session, writes the task's reference solution into the workspace (the demo agent is an oracle
by design: it reads `solution/` from the tasks folder on the host, never through MCP, and before
the session opens: a read while it is open would be recorded as `golden_access`), submits,
polls get_result until scoring finishes, and prints the result per profile and where the
recording is. Exit code 0 only when the result arrived and Pass@1 = 1.0 in every profile scored.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
try:
    import bridge  # noqa: F401
except ImportError:  # running from a checkout that was not pip-installed
    sys.path.insert(0, str(REPO_ROOT))

import anyio
from mcp import Client, StdioServerParameters, stdio_client
from rich.console import Console
from rich.table import Table

from bridge.tasks.catalog import Catalog

console = Console()


class DemoError(Exception):
    pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="kv-ledger", help="task id (default kv-ledger, stdlib-only)")
    parser.add_argument("--tasks", type=Path, default=None, help="tasks folder (default: the shipped tasks/)")
    parser.add_argument("--workspace", type=Path, default=None, help="workspace (default: a fresh temp dir)")
    parser.add_argument("--recordings", type=Path, default=None, help="recordings dir (default: a fresh temp dir)")
    parser.add_argument("--profile", choices=("strict", "compat", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up waiting for the result after S seconds")
    return parser.parse_args(argv)


def read_solution(solution: Path) -> dict[str, tuple[bytes, int]]:
    """relative path -> (bytes, mode) of the oracle solution, read before any session opens."""
    out = {}
    for path in sorted(solution.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        out[path.relative_to(solution).as_posix()] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


def write_solution(files: dict[str, tuple[bytes, int]], workspace: Path) -> list[str]:
    for rel, (data, mode) in files.items():
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)
    return list(files)


def result_table(summary: dict[str, Any]) -> Table:
    table = Table(title="Score")
    for column in ("profile", "outcome", "DSR", "Pass@1", "passed/total", "AC"):
        table.add_column(column)
    for profile, row in summary.items():
        p1 = row.get("pass_at_1")
        ac = row.get("api_coverage")
        table.add_row(
            profile,
            str(row.get("outcome")),
            str(row.get("dsr")),
            "-" if p1 is None else f"{p1:.3f}",
            f"{row.get('passed')}/{row.get('total')}",
            "-" if ac is None else f"{ac:.3f}",
        )
    return table


def server_params(args: argparse.Namespace, workspace: Path, recordings: Path) -> StdioServerParameters:
    """How the demo starts the bridge's MCP server, as an IDE would (stdio)."""
    server_args = ["-m", "mcp_server", "--workspace", str(workspace), "--recordings", str(recordings)]
    server_args += ["--profile", args.profile]
    if args.tasks is not None:
        server_args += ["--tasks", str(args.tasks.resolve())]
    # The MCP client hands a server only a few variables by default; our own server gets the
    # caller's environment, so DOCKER_HOST and the bridge's settings (RGBRIDGE_*) reach its scoring.
    return StdioServerParameters(command=sys.executable, args=server_args, cwd=str(REPO_ROOT), env=dict(os.environ))


async def run(args: argparse.Namespace, workspace: Path, recordings: Path, server_log: Path) -> int:
    catalog = Catalog.from_options(args.tasks, None)
    task = catalog.get(args.task)
    if task.solution_dir is None or not task.solution_dir.is_dir():
        raise DemoError(f"task {task.id} ships no solution/ for the oracle agent")
    oracle = read_solution(task.solution_dir)  # before the session's golden watch starts
    params = server_params(args, workspace, recordings)
    server_args = list(params.args)
    console.print(f"[bold]server[/]: {sys.executable} {' '.join(server_args)}  (stderr → {server_log})")
    with server_log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            console.print(f"[bold]tools[/]: {', '.join(tools)}")
            listed = await client.call_tool("list_tasks", {})
            ids = [t["id"] for t in listed.structured_content["tasks"]]
            console.print(f"[bold]tasks[/]: {', '.join(ids)}")

            started = await client.call_tool("start_task", {"task_id": task.id})
            if started.is_error:
                raise DemoError(started.content[0].text)
            session = started.structured_content
            console.print(
                f"[bold]session[/] {session['session_id']} in {session['workspace']} "
                f"(workspace from {session['workspace_source']})"
            )

            files = write_solution(oracle, Path(session["workspace"]))
            console.print(f"[bold]oracle agent[/] wrote {len(files)} file(s): {', '.join(files)}")
            await client.call_tool("add_note", {"text": "demo: oracle solution copied from the host tasks folder"})

            submitted = await client.call_tool("submit_task", {})
            if submitted.is_error:
                raise DemoError(submitted.content[0].text)
            receipt = submitted.structured_content
            console.print(
                f"[bold]submitted[/]: job {receipt['job_id']}, snapshot {receipt['tree_hash'][:16]}… "
                f"(stable={receipt['stable']})"
            )

            last_message = {"text": ""}

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                if message and message != last_message["text"]:
                    last_message["text"] = message
                    console.print(f"  … {message}", highlight=False)

            deadline = time.monotonic() + args.timeout
            started_wait = time.monotonic()
            while True:
                polled = await client.call_tool("get_result", {"wait_seconds": 50}, progress_callback=on_progress)
                if polled.is_error:
                    raise DemoError(polled.content[0].text)
                status = polled.structured_content
                if status["state"] in ("done", "failed"):
                    break
                if time.monotonic() > deadline:
                    raise DemoError(f"no result after {args.timeout:.0f}s (state {status['state']})")
            waited = time.monotonic() - started_wait

    recording = Path(session["recording"])
    if status["state"] == "failed":
        console.print(f"[bold red]scoring failed[/]: {status['message']}")
        console.print(f"recording: {recording}")
        return 1
    summary = status.get("summary") or {}
    console.print(result_table(summary))
    console.print(f"scored in {waited:.1f}s after submit")
    if status.get("contaminated"):  # golden files opened while the session was open
        paths = sorted({e["path"] for e in status.get("contamination") or []})
        console.print(f"[bold red]contaminated[/]: {', '.join(paths)}", highlight=False)
    else:
        console.print("contaminated: no (no golden file was opened while the session was open)")
    console.print(f"[bold]recording[/]: {recording}  (session.json, events.jsonl, store/, results/)")
    console.print(f"[bold]workspace[/]: {session['workspace']}")
    perfect = bool(summary) and all(row.get("pass_at_1") == 1.0 for row in summary.values())
    console.print(
        "[bold green]PASS[/]: Pass@1 = 1.0 in every profile" if perfect else "[bold red]FAIL[/]: Pass@1 below 1.0"
    )
    return 0 if perfect else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="rgbridge-demo-"))
    workspace = (args.workspace or base / "workspace").absolute()
    recordings = (args.recordings or base / "recordings").absolute()
    recordings.mkdir(parents=True, exist_ok=True)
    server_log = recordings / "demo-server.log"
    try:
        return anyio.run(run, args, workspace, recordings, server_log)
    except DemoError as exc:
        console.print(f"[bold red]demo failed[/]: {exc}")
    except Exception as exc:  # show the server's side of the story too
        console.print(f"[bold red]demo failed[/]: {type(exc).__name__}: {exc}")
    if server_log.exists():
        tail = server_log.read_text(errors="replace").splitlines()[-20:]
        console.print("[dim]server log (last lines):[/]\n" + "\n".join(tail), highlight=False)
    return 1


if __name__ == "__main__":
    sys.exit(main())
