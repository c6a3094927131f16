"""`rgbridge images build|list|rm`, `score`, `evaluate`, `cleanup`."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from bridge.commands.common import (
    add_backend_options,
    add_json_option,
    add_profile_option,
    add_task_source_options,
    at_least,
    console,
    load_catalog,
    open_backend,
    print_json,
    print_scores,
    stderr_console,
)
from bridge.commands.disk import add_disk_budget_option
from bridge.commands.doctor import add_preflight_option, check_environment_first

if TYPE_CHECKING:
    from bridge.scoring.java.layers import MavenSources
    from bridge.scoring.run.backend import Backend
    from bridge.scoring.run.evaluate import EvaluationPlan
    from bridge.tasks.catalog import Catalog


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    images = subparsers.add_parser("images", help="build and manage the local scoring images (no registry needed)")
    iverbs = images.add_subparsers(dest="images_command", metavar="VERB", required=True)
    build = iverbs.add_parser("build", help="build the base and tester images")
    build.add_argument("--wheelhouse", type=Path, metavar="DIR", help="install Python packages from this folder")
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    build.add_argument("--python-only", action="store_true", help="skip the Java (JDK 17 + Maven) image")
    add_json_option(build)
    build.set_defaults(handler=cmd_images_build)
    ls = iverbs.add_parser("list", help="list rgbridge images")
    add_json_option(ls)
    ls.set_defaults(handler=cmd_images_list)

    score = subparsers.add_parser("score", help="score one repo against a task")
    score.add_argument("repo", type=Path, metavar="DIR")
    score.add_argument("--task", required=True, metavar="ID")
    add_task_source_options(score)
    add_profile_option(score)
    score.add_argument("--output-dir", type=Path, metavar="OUT", help="where result.json and logs go")
    score.add_argument("--wheelhouse", type=Path, metavar="DIR")
    add_maven_options(score)
    score.add_argument("--no-cache", action="store_true", help="ignore cached results")
    add_json_option(score)
    score.set_defaults(handler=cmd_score)

    ev = subparsers.add_parser("evaluate", help="score a folder of repos (one subfolder per task) in parallel")
    ev.add_argument("--predictions-dir", type=Path, required=True, metavar="DIR")
    add_task_source_options(ev)
    ev.add_argument(
        "--workers",
        type=at_least(1),
        metavar="N",
        help="repos scored at once (default: 1 locally, twice the cluster's docker slots on Ray)",
    )
    add_backend_options(ev)
    ev.add_argument("--run-id", metavar="ID")
    ev.add_argument("--resume", action="store_true", help="keep earlier results of this output dir")
    ev.add_argument("--output-dir", type=Path, default=Path("eval_results"), metavar="OUT")
    add_profile_option(ev)
    ev.add_argument("--repo-names", nargs="*", metavar="TASK", help="only these tasks")
    ev.add_argument("--wheelhouse", type=Path, metavar="DIR")
    add_maven_options(ev)
    ev.add_argument("--model-name")
    ev.add_argument("--agent-name")
    add_disk_budget_option(ev)
    add_preflight_option(ev)
    add_json_option(ev)
    ev.set_defaults(handler=cmd_evaluate)

    cl = subparsers.add_parser("cleanup", help="remove rgbridge containers and networks (and images with --images)")
    cl.add_argument("--run-id", metavar="ID", help="only this run's")
    cl.add_argument("--images", action="store_true", help="also remove rgbridge images")
    add_json_option(cl)
    cl.set_defaults(handler=cmd_cleanup)


def add_maven_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--maven-repo",
        type=Path,
        metavar="DIR",
        help="Java: a Maven local repository folder to resolve dependencies from (offline)",
    )
    parser.add_argument(
        "--maven-settings",
        type=Path,
        metavar="FILE",
        help="Java: a Maven settings.xml (e.g. a mirror) used when dependency layers are built",
    )


def maven_sources(args: argparse.Namespace) -> MavenSources:
    """The Maven sources of the command line (validated), also exported to the environment so
    every scoring path of this process (sessions, rescoring) resolves from the same places."""
    import os

    from bridge.scoring.java.layers import MavenSources

    sources = MavenSources.from_env(getattr(args, "maven_repo", None), getattr(args, "maven_settings", None))
    if sources.repo_dir:
        os.environ["RGBRIDGE_MAVEN_REPO"] = str(sources.repo_dir.resolve())
    if sources.settings:
        os.environ["RGBRIDGE_MAVEN_SETTINGS"] = str(sources.settings.resolve())
    return sources


def cmd_images_build(args: argparse.Namespace) -> int:
    import time

    from bridge.scoring.images.base import build_all
    from bridge.scoring.java.images import ensure_java_image
    from bridge.scoring.sandbox.docker_client import get_client

    client = get_client()
    if args.json:
        result = build_all(client, wheelhouse=args.wheelhouse, force=args.force)
    else:
        con = stderr_console()
        started = time.monotonic()
        with con.status("building scoring images...") as status:

            def say(line: str) -> None:
                elapsed = time.monotonic() - started
                if con.is_terminal:
                    status.update(f"[bold]building scoring images[/] [{elapsed:.0f}s] {escape(line[:100])}")
                else:  # a log: every line, with the time it came
                    con.print(f"[{elapsed:.0f}s] {escape(line)}", highlight=False)

            result = build_all(client, progress=say, wheelhouse=args.wheelhouse, force=args.force)
        timings = result["timings"]
        con.print(f"base   {result['base']}  ({timings['base']}s)")
        con.print(f"tester {result['tester']}  ({timings['tester']}s)")
    if not args.python_only:
        started = time.monotonic()
        with stderr_console().status("building the Java image (JDK 17 + Maven)", spinner="dots"):
            result["java"] = ensure_java_image(client, force=args.force)
        result["timings"]["java"] = round(time.monotonic() - started, 1)
    if args.json:
        print_json(result)
    else:
        console().print(
            f"base image: [bold]{result.get('base')}[/]\ntester image: [bold]{result.get('tester')}[/]\n"
            f"java image: [bold]{result.get('java', '-')}[/]\ntimings (s): {result.get('timings')}"
        )
    return 0


def cmd_images_list(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from bridge.scoring.images.disk import list_images
    from bridge.scoring.sandbox.docker_client import get_client

    images = [asdict(i) for i in list_images(get_client())]
    if args.json:
        print_json(images)
    else:
        for image in images:
            console().print(image)
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from bridge.scoring.run.engine import ScoreOptions, score_repo
    from bridge.scoring.run.reporting import build_entry
    from bridge.scoring.types import ScoreRequest

    task = load_catalog(args, report_errors=False).get(args.task)
    err = stderr_console()
    with err.status(f"scoring {args.repo} against {task.id}", spinner="dots") as status:

        def say(message: str) -> None:
            # Build output streams through here too: keep the status line to one short line.
            line = message.strip().splitlines()[-1] if message.strip() else ""
            if line and not args.json:
                status.update(escape(f"{task.id}: {line[:100]}"))
                if not line.startswith((" ", "---", "Step", "Removing", "Collecting", "Downloading", "Requirement")):
                    if ": " in line and line.split(": ", 1)[0] in ("strict", "compat"):
                        err.print(f"[dim]{escape(line)}[/]", highlight=False)

        request = ScoreRequest(
            output_dir=args.output_dir or Path(tempfile.mkdtemp(prefix="rgbridge-score-")),
            profile=args.profile,
            use_cache=not args.no_cache,
        )
        options = ScoreOptions(wheelhouse=args.wheelhouse, maven=maven_sources(args), progress=say)
        result = score_repo(task, args.repo, request, options)
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        print_scores([build_entry(result)])
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from bridge.scoring.run.evaluate import plan

    catalog = load_catalog(args)
    maven = maven_sources(args)
    backend = open_backend(args)  # first: a backend option error is named before the folder is read
    try:
        preview = plan(
            catalog, args.predictions_dir, output_dir=args.output_dir, resume=args.resume, only=args.repo_names
        )
        if preview.skipped:
            names = [
                f"{n} (did you mean {' or '.join(c)}?)" if (c := catalog.close_names(n)) else n for n in preview.skipped
            ]
            stderr_console().print(
                f"[yellow]skipping folders that name no known task:[/] {escape(', '.join(names))}", highlight=False
            )
        meta = {k: v for k, v in {"model_name": args.model_name, "agent_name": args.agent_name}.items() if v}
        workers = args.workers or (backend.default_workers() if backend is not None else 1)
        # on Ray each node checks its own engine; the driver needs none (README, "Scaling out")
        check_environment_first(args, java=any(t.lang == "java" for t, _ in preview.todo), local=backend is None)
        return _run_evaluate(args, catalog, maven, preview, meta, backend, workers)
    finally:
        if backend is not None:
            backend.close()


def _run_evaluate(
    args: argparse.Namespace,
    catalog: Catalog,
    maven: MavenSources,
    preview: EvaluationPlan,
    meta: dict[str, str],
    backend: Backend | None,
    workers: int,
) -> int:
    from bridge.scoring.run.engine import ScoreOptions
    from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        disable=args.json,
        transient=False,
    )
    with progress:
        overall = progress.add_task("evaluating", total=len(preview.todo))
        lines: dict[str, TaskID] = {}

        def on_progress(task_id: str, message: str) -> None:
            if backend is not None:  # per-node activity of a cluster on the overall line
                busy = ", ".join(f"{node}: {n} job(s)" for node, n in sorted(backend.activity().items()))
                progress.update(overall, description=f"evaluating on {backend.name} ({busy or 'queued'})")
            if task_id not in lines:
                lines[task_id] = progress.add_task(f"{task_id}: {message}", total=None)
            progress.update(lines[task_id], description=f"{task_id}: {message}")

        def on_done(task_id: str, entry: dict[str, Any]) -> None:
            progress.advance(overall)
            if task_id in lines:
                progress.update(
                    lines[task_id], description=f"{task_id}: done ({entry.get('outcome')})", total=1, completed=1
                )

        request = EvaluationRequest(
            predictions_dir=args.predictions_dir,
            output_dir=args.output_dir,
            run_id=args.run_id,
            profile=args.profile,
            only=args.repo_names,
            resume=args.resume,
            metadata=meta,
        )
        options = EvaluationOptions(
            workers=workers,
            scoring=ScoreOptions(wheelhouse=args.wheelhouse, maven=maven, backend=backend),
            progress=on_progress,
            on_done=on_done,
        )
        report_path, writer, _ = evaluate(catalog, request, options)
    if args.json:
        import json

        print_json(json.loads(report_path.read_text(encoding="utf-8")))
    else:
        print_scores(writer.results)
        console().print(f"report: {report_path}")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from bridge.scoring.run.sweep import sweep
    from bridge.scoring.sandbox.docker_client import get_client

    report = sweep(get_client(), run_id=args.run_id, include_images=args.images)
    data = asdict(report)
    if args.json:
        print_json(data)
    else:
        console().print(
            f"removed {len(report.containers)} container(s), {len(report.networks)} network(s), "
            f"{len(report.images)} image(s)"
        )
        for error in report.errors:
            stderr_console().print(f"[yellow]warning:[/] {error}")
    return 0
