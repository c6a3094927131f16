"""Recording verbs: `replay`, `rescore`, `timeline`, `curve` and `recordings pack|unpack|verify|seal`
(formats in docs/recording-format.md); `report` and `export` live in bridge/commands/report.py."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from bridge.commands.common import (
    add_backend_options,
    add_json_option,
    add_profile_option,
    add_task_source_options,
    at_least,
    console,
    print_json,
    stderr_console,
)
from bridge.errors import RecordingError

if TYPE_CHECKING:
    from bridge.recording.verify import VerifyReport
    from bridge.scoring.run.engine import ScoreOptions
    from bridge.tasks.catalog import Catalog


def _rec_path(value: str) -> Path:
    """A recording folder, or a session id under the recordings dir ($RGBRIDGE_RECORDINGS, else <data home>/recordings)."""
    path = Path(value)
    if (path / "session.json").is_file():
        return path
    from bridge.locations import default_recordings_dir

    base = default_recordings_dir()
    if os.sep not in value and (base / value / "session.json").is_file():
        return base / value
    raise RecordingError(f"{value}: not a recording (no session.json)")


def _catalog(args: argparse.Namespace) -> Catalog:
    from bridge.commands.common import load_catalog

    return load_catalog(args, report_errors=False)


@contextlib.contextmanager
def _backend_options(args: argparse.Namespace) -> Iterator[ScoreOptions | None]:
    """How scores run with the `--backend` of the command line (None = the local default)."""
    from bridge.commands.common import open_backend

    backend = open_backend(args)
    if backend is None:
        yield None
        return
    import signal
    import threading

    from bridge.scoring.run.engine import ScoreOptions

    previous = None
    if threading.current_thread() is threading.main_thread():

        def on_interrupt(signum: int, frame: object) -> None:
            # Ctrl-C: stop the remote jobs first, so the scoring threads return at once.
            backend.cancel()
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield ScoreOptions(backend=backend)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        backend.close()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rp = subparsers.add_parser("replay", help="rebuild a recorded workspace as it was at a moment")
    rp.add_argument("recording", metavar="REC")
    rp.add_argument(
        "--at",
        default="submission",
        metavar="T",
        help="submission | event:N | +SECONDS (wall-clock since start) | ISO-8601 time | start | end",
    )
    rp.add_argument("--out", required=True, type=Path, metavar="DIR")
    rp.add_argument("--force", action="store_true", help="replace the contents of a non-empty --out")
    add_json_option(rp)
    rp.set_defaults(handler=cmd_replay)

    rs = subparsers.add_parser("rescore", help="re-score a recorded moment with the current grader")
    rs.add_argument("recording", metavar="REC")
    rs.add_argument("--at", default="submission", metavar="T")
    add_profile_option(rs)
    rs.add_argument("--cache", action="store_true", help="allow cached results (default: score afresh)")
    rs.add_argument("--no-verify", action="store_true", help="rescore even if the recording fails verification")
    add_task_source_options(rs)
    add_backend_options(rs)
    add_json_option(rs)
    rs.set_defaults(handler=cmd_rescore)

    tl = subparsers.add_parser("timeline", help="what happened when in a recording")
    tl.add_argument("recording", metavar="REC")
    add_json_option(tl)
    tl.set_defaults(handler=cmd_timeline)

    cv = subparsers.add_parser("curve", help="Pass@1, DSR and AC at N moments of a session")
    cv.add_argument("recording", metavar="REC")
    cv.add_argument("--points", type=at_least(1), default=5, metavar="N")
    cv.add_argument("--workers", type=at_least(1), default=2, metavar="W")
    cv.add_argument("--profile", choices=("strict", "compat"), default="strict")
    cv.add_argument("--no-cache", action="store_true", help="ignore the engine's result cache")
    cv.add_argument("--no-save", action="store_true", help="do not store the curve in the recording")
    add_task_source_options(cv)
    add_backend_options(cv)
    add_json_option(cv)
    cv.set_defaults(handler=cmd_curve)

    group = subparsers.add_parser("recordings", help="pack, unpack, verify and seal recordings")
    verbs = group.add_subparsers(dest="recordings_command", metavar="VERB", required=True)
    pk = verbs.add_parser("pack", help="pack a recording into a deterministic .tar.gz")
    pk.add_argument("recording", metavar="REC")
    pk.add_argument("-o", "--output", required=True, type=Path, metavar="FILE")
    add_json_option(pk)
    pk.set_defaults(handler=cmd_pack)
    up = verbs.add_parser("unpack", help="unpack an archive (treated as untrusted) into a new folder")
    up.add_argument("archive", type=Path, metavar="FILE")
    up.add_argument("-o", "--output", required=True, type=Path, metavar="DIR")
    add_json_option(up)
    up.set_defaults(handler=cmd_unpack)
    vf = verbs.add_parser("verify", help="check a recording was not altered and is self-consistent")
    vf.add_argument("recording", metavar="REC")
    add_json_option(vf)
    vf.set_defaults(handler=cmd_verify)
    sl = verbs.add_parser("seal", help="(re)write a recording's integrity.json")
    sl.add_argument("recording", metavar="REC")
    add_json_option(sl)
    sl.set_defaults(handler=cmd_seal)


# ----------------------------------------------------------------------------- handlers


def cmd_replay(args: argparse.Namespace) -> int:
    from bridge.recording.replay import replay

    res = replay(_rec_path(args.recording), args.at, args.out, force=args.force)
    if args.json:
        print_json(res.to_dict())
        return 0
    m = res.moment
    how = (
        "the submission commit"
        if m.commit
        else f"checkpoint {str(res.commit)[:12]} (event {res.base_seq}) + {res.applied_events} file event(s)"
    )
    console().print(
        f"rebuilt {res.files} file(s) into {res.out_dir}\n  moment {m.spec}: event {m.seq}, {m.t} "
        f"(+{m.wall_seconds:.1f}s wall, {m.working_seconds:.1f}s working)\n  from {how}\n"
        f"  tree hash {res.tree_hash}",
        highlight=False,
    )
    for line in filter(None, [res.note, f"left out (oversized): {', '.join(res.left_out)}" if res.left_out else ""]):
        stderr_console().print(f"[yellow]note:[/] {escape(line)}", highlight=False)
    return 0


def cmd_rescore(args: argparse.Namespace) -> int:
    from bridge.recording.rescore import rescore

    err = stderr_console()
    with err.status("rescoring", spinner="dots") as status:

        def say(message: str) -> None:
            line = message.strip().splitlines()[-1] if message.strip() else ""
            if line and not args.json:
                status.update(escape(f"rescoring: {line[:100]}"))

        with _backend_options(args) as scoring:
            path = rescore(
                _rec_path(args.recording),
                profile=args.profile,
                at=args.at,
                catalog=_catalog(args),
                use_cache=args.cache,
                progress=say,
                verify_first=not args.no_verify,
                scoring=scoring,
            )
    data = json.loads(path.read_text(encoding="utf-8"))
    if args.json:
        print_json({"result": str(path), **data})
        return 0
    from bridge.commands.common import print_scores
    from bridge.scoring.result import ScoreResult
    from bridge.scoring.run.reporting import build_entry

    print_scores([build_entry(ScoreResult.model_validate(data))])
    console().print(f"result: {path}", highlight=False)
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from bridge.recording.timeline import build_timeline, render_timeline

    data = build_timeline(_rec_path(args.recording))
    if args.json:
        print_json(data)
    else:
        render_timeline(data, console())
    return 0


def cmd_curve(args: argparse.Namespace) -> int:
    from bridge.recording.curve import compute_curve, render_curve

    err = stderr_console()
    with err.status("scoring moments", spinner="dots") as status:
        with _backend_options(args) as scoring:
            curve = compute_curve(
                _rec_path(args.recording),
                points=args.points,
                workers=args.workers,
                profile=args.profile,
                catalog=_catalog(args),
                use_cache=not args.no_cache,
                save=not args.no_save,
                progress=lambda m: status.update(escape(m[:100])),
                scoring=scoring,
            )
    if args.json:
        print_json(curve)
    else:
        render_curve(curve, console())
        if curve.get("path"):
            console().print(f"stored: {curve['path']}", highlight=False)
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    import hashlib

    from bridge.recording.packing import pack_recording

    path = pack_recording(_rec_path(args.recording), args.output)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if args.json:
        print_json({"archive": str(path), "bytes": path.stat().st_size, "sha256": digest})
    else:
        console().print(f"{path}: {path.stat().st_size} bytes, sha256 {digest}", highlight=False)
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    from bridge.recording.packing import unpack_recording
    from bridge.recording.verify import verify_recording

    res = unpack_recording(args.archive, args.output)
    report = verify_recording(res.recording)
    if args.json:
        print_json(
            {"recording": str(res.recording), "files": res.files, "bytes": res.bytes, "verify": report.to_dict()}
        )
    else:
        console().print(f"unpacked {res.files} file(s), {res.bytes} bytes into {res.recording}", highlight=False)
        _print_verify(report)
    return 0 if report.ok else 1


def _print_verify(report: VerifyReport) -> None:
    out = console()
    checked = ", ".join(f"{v} {k}" for k, v in report.checked.items())
    if report.ok:
        out.print(
            f"[green]verified[/] ({'sealed' if report.sealed else 'not sealed'}; checked {checked})", highlight=False
        )
    else:
        out.print(f"[bold red]verification failed[/]: {len(report.problems)} problem(s)", highlight=False)
        for p in report.problems:
            out.print(f"  - {p}", highlight=False, markup=False)
    for w in report.warnings:
        out.print(f"  [yellow]warning:[/] {w}", highlight=False)


def cmd_verify(args: argparse.Namespace) -> int:
    from bridge.recording.verify import verify_recording

    report = verify_recording(_rec_path(args.recording))
    if args.json:
        print_json(report.to_dict())
    else:
        _print_verify(report)
    return 0 if report.ok else 1


def cmd_seal(args: argparse.Namespace) -> int:
    from bridge.recording.integrity import seal_digest, seal_recording

    rec = _rec_path(args.recording)
    path = seal_recording(rec)
    digest = seal_digest(rec)
    if args.json:
        print_json({"integrity": str(path), "digest": digest})
    else:
        console().print(f"sealed {rec}: {path.name} sha256 {digest}", highlight=False)
    return 0
