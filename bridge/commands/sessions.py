"""`rgbridge session start|status|list` and `rgbridge submit`: sessions without an MCP client.

Human-in-the-loop: `session start --human` runs the recorder and clock in this process while
the person edits in any IDE; the live panel (bridge/commands/panel.py) shows the clock and files
changed and takes keys. The sentinel file `.rgbridge/SUBMIT` and `rgbridge submit --workspace DIR`
also submit.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bridge.commands.common import (
    RECORDINGS_HELP,
    add_json_option,
    add_profile_option,
    add_task_source_options,
    console,
    load_catalog,
    positive_seconds,
    print_json,
    stderr_console,
)
from bridge.commands.panel import fmt_clock, run_panel
from bridge.errors import PathError, SessionError
from bridge.locations import default_recordings_dir
from bridge.scoring.result import summarize_result
from bridge.sessions.answers import StartTaskResult
from bridge.sessions.attach import META_DIR
from bridge.sessions.attempts import pass_at_k_table
from bridge.sessions.live import (
    find_recording_for_workspace,
    load_record,
)
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import (
    SENTINEL,
    ClientInfo,
    ResultStatus,
    SessionStatus,
    result_status,
)
from bridge.sessions.ownership import held_elsewhere
from bridge.sessions.settings import SessionSettings
from bridge.sessions.verbs import START, VERBS
from bridge.sessions.verbspec import CallContext

# Every session verb of this module goes through the verb table (bridge/sessions/verbs.py), as
# the MCP tools do; `signal="cli"` records how a submit reached the bridge.
CLI = CallContext(client=ClientInfo(name="rgbridge-cli", version=""), signal="cli")


def _status(mgr: SessionManager, sid: str) -> SessionStatus:
    return cast(SessionStatus, VERBS["status"].invoke(mgr, sid, context=CLI))


def _result(mgr: SessionManager, sid: str, wait_seconds: float = 0.0) -> ResultStatus:
    return cast(ResultStatus, VERBS["result"].invoke(mgr, sid, context=CLI, wait_seconds=wait_seconds))


def _recordings(args: argparse.Namespace) -> Path:
    return Path(args.recordings) if args.recordings else default_recordings_dir()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    session = subparsers.add_parser("session", help="run a benchmark session without an MCP client")
    verbs = session.add_subparsers(dest="session_command", metavar="VERB", required=True)

    start = verbs.add_parser("start", help="start a session in a workspace (--human: live panel)")
    start.add_argument("--task", required=True, metavar="ID")
    start.add_argument("--workspace", required=True, type=Path, metavar="DIR")
    start.add_argument("--human", action="store_true", help="a person works in the workspace (timed, pausable)")
    start.add_argument("--allow-nonempty", action="store_true", help="accept a workspace that already has files")
    start.add_argument("--recordings", type=Path, metavar="DIR", help=RECORDINGS_HELP)
    add_profile_option(start)
    add_task_source_options(start)
    start.set_defaults(handler=cmd_session_start)

    status = verbs.add_parser("status", help="state of the session in a workspace")
    status.add_argument("--workspace", required=True, type=Path, metavar="DIR")
    status.add_argument("--recordings", type=Path, metavar="DIR", help=RECORDINGS_HELP)
    add_json_option(status)
    status.set_defaults(handler=cmd_session_status)

    ls = verbs.add_parser("list", help="recorded sessions")
    ls.add_argument("--recordings", type=Path, metavar="DIR", help=RECORDINGS_HELP)
    add_json_option(ls)
    ls.set_defaults(handler=cmd_session_list)

    submit = subparsers.add_parser("submit", help="submit the open session of a workspace for scoring")
    submit.add_argument("--workspace", required=True, type=Path, metavar="DIR")
    submit.add_argument("--recordings", type=Path, metavar="DIR", help=RECORDINGS_HELP)
    submit.add_argument("--no-wait", action="store_true", help="do not wait for the score")
    submit.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="give up waiting after this long (default: wait as long as scoring takes)",
    )
    add_task_source_options(submit)
    add_json_option(submit)
    submit.set_defaults(handler=cmd_submit)


def cmd_session_start(args: argparse.Namespace) -> int:
    catalog = load_catalog(args)
    # Ctrl-C here (and Ctrl-C or --timeout in `submit`) stops waiting; the detached scoring process scores on
    mgr = SessionManager(
        catalog,
        recordings_dir=_recordings(args),
        settings=SessionSettings(profile=args.profile, reattach=False, finish_jobs_at_exit=False),
    )
    try:
        status = cast(
            StartTaskResult,
            START.invoke(
                mgr,
                None,
                context=replace(CLI, allow_nonempty=args.allow_nonempty),
                task_id=args.task,
                workspace=str(args.workspace),
                mode="human" if args.human else "agent",
            ),
        )
        if not args.human:
            console().print(
                f"session {status.session_id} started in {status.workspace}; "
                "this process records until you submit (Ctrl-C detaches; `rgbridge submit` resumes it)."
            )
        port = catalog.tasks[status.task_id].port if status.task_id in catalog.tasks else None
        return run_panel(mgr, status.session_id, CLI, port=port)
    finally:
        mgr.close()


# ----------------------------------------------------------------------------- status / submit


def _open_recording(args: argparse.Namespace) -> Path:
    workspace = args.workspace.resolve()
    rec = find_recording_for_workspace(_recordings(args).resolve(), workspace)
    if rec is None:
        raise SessionError(f"no session recorded for workspace {workspace}")
    return rec


def cmd_session_status(args: argparse.Namespace) -> int:
    rec_dir = _open_recording(args)
    record = load_record(rec_dir)
    data = record.model_dump(mode="json") | {
        "recording": str(rec_dir),
        "working_seconds": record.clock.elapsed(),
        "owned_by_live_process": held_elsewhere(rec_dir),
    }
    if args.json:
        print_json(data)
    else:
        console().print(
            f"{record.session_id}: {record.state}, task {record.task_id}, "
            f"working time {fmt_clock(record.clock.elapsed())}, job "
            f"{record.job.state if record.job else 'none'}"
        )
    return 0


def cmd_session_list(args: argparse.Namespace) -> int:
    root = _recordings(args)
    rows: list[dict[str, object]] = []
    attempts = []
    for rec_dir in sorted(root.glob("*/session.json")) if root.is_dir() else []:
        try:
            record = load_record(rec_dir.parent)
            summary = result_status(record, rec_dir.parent).summary
        except (SessionError, PathError, OSError, ValueError) as exc:
            rows.append({"session_id": rec_dir.parent.name, "error": str(exc)})
            continue
        rows.append(
            {
                "session_id": record.session_id,
                "task": record.task_id,
                "state": record.state,
                "mode": record.mode,
                "created_at": record.created_at,
                "attempt": record.attempt,
                "working_seconds": round(record.clock.elapsed(), 1),
            }
        )
        attempts.append({"run_id": record.run_id, "task_id": record.task_id, "summary": summary})
    # Pass@k where a run made more than one scored attempt of a task (bridge/sessions/attempts.py)
    pass_k = [row for profile in ("strict", "compat") for row in pass_at_k_table(attempts, profile)]
    if args.json:
        print_json({"sessions": rows, "pass_at_k": pass_k})
    else:
        cols = ("session_id", "task", "state", "attempt", "mode", "created_at", "working_seconds")
        table = Table(title=escape(f"recordings in {root}"))
        for col in cols:
            table.add_column(col)
        for row in rows:
            table.add_row(*(Text(str(row.get(c, row.get("error", "")))) for c in cols))
        console().print(table)
        for row in pass_k:
            table_k: dict[str, object] = row["pass_at_k"]  # type: ignore[assignment]
            ks = "  ".join(f"pass@{k} {v}" for k, v in table_k.items())
            console().print(
                Text(
                    f"{row['task_id']} ({row['profile']}, run {row['run_id']}): "
                    f"{row['c']}/{row['n']} attempts solved  {ks}"
                )
            )
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    rec_dir = _open_recording(args)
    record = load_record(rec_dir)
    if record.state not in ("active", "paused"):
        raise SessionError(f"session {record.session_id} is already {record.state}")
    err = stderr_console()
    if held_elsewhere(rec_dir):
        # Another bridge process records this workspace: signal it through the sentinel file.
        sentinel = Path(record.workspace) / META_DIR / SENTINEL
        sentinel.parent.mkdir(exist_ok=True)
        sentinel.write_text(f"submitted by rgbridge submit at {time.time():.0f}\n", encoding="utf-8")
        err.print(f"signalled the running bridge (pid owns {rec_dir.name}) via {sentinel}")
        if args.no_wait:
            return 0
        return _wait_on_disk(rec_dir, args)
    catalog = load_catalog(args, report_errors=False)
    # Only the named session is re-attached: other open sessions in the folder are not ours.
    mgr = SessionManager(
        catalog,
        recordings_dir=rec_dir.parent,
        settings=SessionSettings(reattach=False, finish_jobs_at_exit=False),
    )
    try:
        sid = mgr.attach(record.session_id)
        receipt = VERBS["submit"].invoke(mgr, sid, context=CLI)
        err.print(getattr(receipt, "message", ""))
        if args.no_wait:  # the job scores in a detached process (bridge/sessions/score_process.py), not here
            return 0
        result = _wait_in_process(mgr, sid, args.timeout)
    finally:
        mgr.close()
    return _print_result(args, result.model_dump(mode="json"))


def _wait_in_process(mgr: SessionManager, sid: str, timeout: float | None) -> ResultStatus:
    """Wait as long as scoring takes (or --timeout), printing progress when it changes."""
    err = stderr_console()
    started = time.monotonic()
    last = ""
    while True:
        result = _result(mgr, sid, wait_seconds=1.0)
        if result.state not in ("queued", "running"):
            return result
        elapsed = time.monotonic() - started
        line = f"scoring {result.state}: {result.message}"
        if line != last:
            err.print(f"[{fmt_clock(elapsed)}] {line}", markup=False, highlight=False)
            last = line
        if timeout is not None and elapsed >= timeout:
            raise SessionError(f"no score after {timeout:.0f}s (--timeout); scoring of {sid} was still {result.state}")


def _wait_on_disk(rec_dir: Path, args: argparse.Namespace) -> int:
    timeout = args.timeout
    started = time.monotonic()
    last = ""
    while True:
        record = load_record(rec_dir)
        if record.job and record.job.state in ("done", "failed"):
            data: dict[str, Any] = {
                "session_id": record.session_id,
                "state": record.job.state,
                "message": record.job.message,
            }
            if record.job.state == "done" and record.job.result_dir:
                result = json.loads((rec_dir / record.job.result_dir / "result.json").read_text(encoding="utf-8"))
                data["summary"] = summarize_result(result)
            return _print_result(args, data)
        line = f"scoring {record.job.state}: {record.job.message}" if record.job else "waiting for the bridge to seal"
        elapsed = time.monotonic() - started
        if line != last:
            stderr_console().print(f"[{fmt_clock(elapsed)}] {line}", markup=False, highlight=False)
            last = line
        if timeout is not None and elapsed >= timeout:
            raise SessionError(f"no score after {timeout:.0f}s (--timeout)")
        time.sleep(1.0)


def _print_result(args: argparse.Namespace, data: dict[str, Any]) -> int:
    if args.json:
        print_json({k: v for k, v in data.items() if k != "result"})
    else:
        console().print_json(json.dumps({k: v for k, v in data.items() if k != "result"}))
    return 0 if data.get("state") == "done" else 1
