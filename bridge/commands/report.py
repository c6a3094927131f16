"""`rgbridge report TARGET` (any output folder of the tool: text, `--html`, `--json`, leaderboard
rows) and `rgbridge export` (upstream's IDE-output layout, or inspect_ai eval logs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.text import Text

from bridge.commands.common import (
    add_json_option,
    add_task_source_options,
    console,
    load_catalog,
    print_json,
    print_scores,
    stderr_console,
)
from bridge.errors import RecordingError

EXPORT_LAYOUTS = ("repogenesis-ide", "inspect")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rep = subparsers.add_parser(
        "report",
        help="report of any output folder: a score --output-dir, an evaluate or run folder, or a recording",
    )
    rep.add_argument("target", type=Path, metavar="FOLDER")
    rep.add_argument("--run-id", metavar="ID", help="which report_<ID>.json of a run folder (default: newest)")
    rep.add_argument("--html", type=Path, metavar="OUT.html", help="write one self-contained HTML file")
    rep.add_argument(
        "--reference",
        type=Path,
        metavar="RESULTS.json",
        help="a leaderboard results.json (the RepoGenesis repository's leaderboard/data/results.json, any of "
        "its shapes): this run's row among its rows, in the terminal and with --html",
    )
    rep.add_argument(
        "--reference-board",
        metavar="NAME",
        help="only this board of the reference file (e.g. verified_no_docker; default: every board)",
    )
    rep.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the bootstrap intervals (default 0; the report names it)",
    )
    rep.add_argument("--leaderboard-row", action="store_true", help="print upstream leaderboard results.json rows")
    rep.add_argument("--ide", metavar="NAME")
    rep.add_argument("--model", metavar="NAME")
    rep.add_argument("--org", metavar="NAME", help="row 'org' (default: the IDE's display name)")
    rep.add_argument("--link", default="", metavar="URL")
    rep.add_argument("--org-img", default="", metavar="URL")
    rep.add_argument(
        "--aggregation",
        choices=("compat", "strict"),
        default="compat",
        help="which summary feeds leaderboard rows (default compat = upstream's rules)",
    )
    add_json_option(rep)
    rep.set_defaults(handler=cmd_report)

    ex = subparsers.add_parser(
        "export", help="write results in upstream's IDE-output layout or as inspect_ai eval logs (--layout inspect)"
    )
    ex.add_argument("run_dir", nargs="?", type=Path, metavar="RUN_DIR")
    ex.add_argument(
        "--recordings",
        type=Path,
        metavar="DIR",
        help="a folder of recordings to export instead of RUN_DIR (no default)",
    )
    ex.add_argument(
        "--layout",
        choices=EXPORT_LAYOUTS,
        default="repogenesis-ide",
        help="repogenesis-ide (default): submitted repos as upstream's IDE folders; inspect: .eval logs",
    )
    ex.add_argument("--ide", metavar="NAME", help="IDE token of the folder names (needed by repogenesis-ide)")
    ex.add_argument("--model", metavar="NAME", help="model token of the folder names (needed by repogenesis-ide)")
    ex.add_argument("--run-id", metavar="ID")
    ex.add_argument("--predictions-dir", type=Path, metavar="DIR", help="override the report's predictions_dir")
    ex.add_argument("-o", "--output", required=True, type=Path, metavar="DIR")
    add_task_source_options(ex)
    add_json_option(ex)
    ex.set_defaults(handler=cmd_export)


def cmd_report(args: argparse.Namespace) -> int:
    from bridge.reports.targets import open_target, session_lines

    if args.leaderboard_row:
        from bridge.reports.export import leaderboard_rows

        if not args.ide or not args.model:
            raise RecordingError("--leaderboard-row needs --ide and --model")
        rows = leaderboard_rows(
            open_target(args.target, args.run_id).report,
            ide=args.ide,
            model=args.model,
            org=args.org,
            link=args.link,
            org_img=args.org_img,
            aggregation=args.aggregation,
        )
        print_json(rows)
        return 0
    if args.html:
        from bridge.reports.html import write_html

        out = write_html(
            args.target,
            args.html,
            run_id=args.run_id,
            reference=args.reference,
            reference_board=args.reference_board,
            seed=args.seed,
        )
        if args.json:
            print_json({"html": str(out)})
        else:
            console().print(f"wrote {out} ({out.stat().st_size} bytes)", highlight=False, markup=False)
        return 0
    if args.reference_board and not args.reference:
        raise RecordingError("--reference-board names a board of the --reference file: add --reference FILE")
    reference = None
    if args.reference:
        from bridge.reports.reference import load_reference

        reference = load_reference(args.reference, args.reference_board)  # a bad file fails before printing
    target = open_target(args.target, args.run_id)
    if args.json:
        from bridge.reports.stats_sections import all_stats

        data = {"kind": target.kind, "source": str(target.source), **target.report}
        data["statistics"] = {s.profile: s.as_dict() for s in all_stats(target.report, seed=args.seed)}
        if reference is not None:
            from dataclasses import asdict

            from bridge.reports.reference import paper_rows

            data["beside_reference"] = [asdict(r) for r in paper_rows(target.report, reference)]
        print_json(data)
        return 0
    con = console()
    con.print(Text(f"{target.kind}: {target.source}", style="dim"))
    if target.kind == "recording":
        for line in session_lines(target.path):
            con.print(Text(line), soft_wrap=True)
        if not target.report["results"]:
            con.print("score: not scored")
            return 0
    print_scores(target.report["results"], con)
    if (target.report.get("metadata") or {}).get("agent"):  # an agent run (`rgbridge run`): its leaderboard line
        from bridge.reports.leaderboard import leaderboard_lines

        for line in leaderboard_lines(target.report, seed=args.seed):
            con.print(Text(line))
    else:  # the statistics the leaderboard line carries for agent runs
        from bridge.reports.stats import stats_lines
        from bridge.reports.stats_sections import all_stats

        for st in all_stats(target.report, seed=args.seed):
            for line in stats_lines(st):
                con.print(Text(line))
    if reference is not None:
        from bridge.reports.reference import reference_table

        if not target.report["results"]:
            raise RecordingError(f"{args.target}: no results to put beside the reference")
        reference_table(target.report, reference, con)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if args.recordings and args.run_dir:
        raise RecordingError("give either RUN_DIR or --recordings DIR, not both")
    if not args.recordings and not args.run_dir:
        raise RecordingError("give RUN_DIR or --recordings DIR")
    if args.layout == "inspect":
        return _export_inspect(args)
    from bridge.reports.export import export_recordings, export_run

    if not args.ide or not args.model:
        raise RecordingError("--layout repogenesis-ide needs --ide NAME and --model NAME (they name the folders)")
    if args.recordings:
        res = export_recordings(
            args.recordings,
            args.output,
            ide=args.ide,
            model=args.model,
            catalog=load_catalog(args, report_errors=False),
        )
    else:
        res = export_run(
            args.run_dir,
            args.output,
            ide=args.ide,
            model=args.model,
            run_id=args.run_id,
            predictions_dir=args.predictions_dir,
        )
    data = {
        "output": str(res.out_dir),
        "folders": res.folders,
        "skipped": res.skipped,
        "contaminated": res.contaminated,
    }
    if args.json:
        print_json(data)
    else:
        for folder, tasks in sorted(res.folders.items()):
            console().print(f"{res.out_dir / folder}: {len(tasks)} task(s): {', '.join(tasks)}", highlight=False)
        if res.skipped:
            stderr_console().print(f"[yellow]skipped:[/] {escape(', '.join(res.skipped))}", highlight=False)
        if res.contaminated:
            stderr_console().print(
                f"[red]contaminated[/] (golden files opened during the session): {escape(', '.join(res.contaminated))}",
                highlight=False,
            )
    return 0


def _export_inspect(args: argparse.Namespace) -> int:
    from bridge.reports.inspect_log import export_inspect

    source = args.recordings or args.run_dir
    res = export_inspect(source, args.output, run_id=args.run_id, model=args.model)
    if args.json:
        print_json({"logs": [str(p) for p in res.logs], "samples": res.samples})
    else:
        for path in res.logs:
            console().print(Text(f"wrote {path}"))
        console().print(Text(f"{res.samples} sample(s); browse with: inspect view --log-dir {args.output}"))
    return 0
