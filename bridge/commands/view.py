"""`rgbridge view [FOLDER ...]`: the local web app over runs, evaluate outputs and recordings
(bridge/view/), or `--export DIR` for a static bundle of the same pages."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from bridge.commands.common import add_json_option, console, print_json
from bridge.errors import RecordingError

DEFAULT_PORT = 8765


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "view",
        help="a local web app over run folders, evaluate outputs and recordings (pages + JSON API under /api/)",
    )
    p.add_argument(
        "folders", nargs="*", type=Path, metavar="FOLDER", help="output folders, or folders holding them (default .)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback; any other needs a token)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--token", metavar="TOKEN", help="token the browser must present (made up when --host is not loopback)"
    )
    p.add_argument("--open", action="store_true", help="open the runs page in a browser")
    p.add_argument("--export", type=Path, metavar="DIR", help="write a static bundle of the pages to DIR and exit")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap intervals (default 0)")
    p.add_argument(
        "--reference", type=Path, metavar="RESULTS.json", help="published leaderboard rows for the compare page"
    )
    p.add_argument("--reference-board", metavar="NAME", help="only this board of the reference file")
    add_json_option(p)
    p.set_defaults(handler=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    from bridge.view.catalog import discover
    from bridge.view.server import is_loopback

    catalog = discover(args.folders or [Path(".")])
    if args.export:
        from bridge.view.bundle import export_bundle

        reference = ""
        if args.reference:
            from bridge.reports.reference import load_reference, reference_html
            from bridge.view.data import report_of

            rows = load_reference(args.reference, args.reference_board)
            reference = "".join(reference_html(report_of(i), rows) for i in catalog.items)
        written = export_bundle(catalog, args.export, seed=args.seed, reference_html=reference)
        if args.json:
            print_json({"export": str(args.export), "pages": [str(p) for p in written]})
        else:
            console().print(
                f"wrote {len(written)} pages to {args.export} (open {args.export / 'index.html'})", markup=False
            )
        return 0
    import uvicorn

    from bridge.view.server import build_app

    if not 0 < args.port < 65536:
        raise RecordingError(f"--port {args.port}: not a port")
    token = args.token
    if token is None and not is_loopback(args.host):
        token = secrets.token_urlsafe(24)  # beyond loopback, never without one
    app = build_app(
        catalog,
        host=args.host,
        port=args.port,
        token=token,
        seed=args.seed,
        reference=args.reference,
        reference_board=args.reference_board,
    )
    if args.host in ("0.0.0.0", "::"):  # any name of the machine: print the one it calls itself
        import socket

        shown = socket.gethostname()
    else:
        shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{args.port}/" + (f"?token={token}" if token else "")
    console().print(
        f"rgbridge view: {len(catalog.items)} folder(s) at {url}  (Ctrl-C stops)", markup=False, highlight=False
    )
    if args.open:
        import webbrowser

        webbrowser.open(url)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
