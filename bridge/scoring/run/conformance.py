"""`rgbridge conformance`: how every task of a checkout behaves under both profiles.

For each task: the quirks its golden files show (bridge/tasks/suite.py), then two control repos scored
under both profiles through the normal engine (so results and collections are cached and a
rerun is fast):

* `empty` -- an empty folder: nothing deploys; strict must say `deploy_failed` with the golden
  suite's full item count as the denominator;
* `404` -- a stdlib service that is up on the task port and answers 404 to every request:
  it deploys, every test must end not passed, and no suite may end in `infra_error`.

The strict denominator is read from the `empty` result (strict collects the golden suite before
it checks deployment); compat's totals are what upstream's summary parser reports.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker

from bridge.scoring.images.base import TESTER_PINS
from bridge.scoring.result import ProfileResult, ScoreResult
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.types import ProfileChoice, ScoreRequest, TaskProgressFn
from bridge.tasks.model import Task
from bridge.tasks.suite import detect_quirks

CONTROLS = ("empty", "404")

NOT_FOUND_SERVER = '''\
"""Answers 404 to every request on $PORT (rgbridge conformance control repo)."""
import http.server
import os


class NotFound(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        body = b'{"detail": "Not Found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _answer

    def log_message(self, *args):
        pass


port = int(os.environ.get("SERVICE_PORT") or os.environ.get("PORT") or "8080")
http.server.ThreadingHTTPServer(("0.0.0.0", port), NotFound).serve_forever()
'''


def make_control_repos(root: Path) -> dict[str, Path]:
    """The two control repos under `root` (an empty one and the all-404 service)."""
    empty = root / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    nf = root / "404"
    nf.mkdir(parents=True, exist_ok=True)
    (nf / "server.py").write_text(NOT_FOUND_SERVER, encoding="utf-8")
    (nf / "start.sh").write_text("#!/bin/sh\nexec python3 server.py\n", encoding="utf-8")
    (nf / "requirements.txt").write_text("", encoding="utf-8")  # stdlib only: nothing to install
    return {"empty": empty, "404": nf}


@dataclass
class ConformanceRow:
    task: str
    quirks: list[str]
    strict_items: int | None = None
    collection_errors: int = 0
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)  # control -> profile -> cell
    compat_totals: dict[str, int] = field(default_factory=dict)  # control -> compat total
    task_error: str = ""
    white_box: bool = False
    seconds: float = 0.0

    @property
    def infra_errors(self) -> int:
        return sum(1 for per in self.outcomes.values() for cell in per.values() if cell.startswith("infra_error"))


def _cell(p: ProfileResult) -> str:
    if p.outcome in ("infra_error", "task_error"):
        return p.outcome
    return f"{p.outcome} {p.pass_at_1.passed}/{p.pass_at_1.total}"


def check_task(
    task: Task,
    controls: dict[str, Path],
    *,
    profile: ProfileChoice,
    out_dir: Path,
    client: docker.DockerClient | None = None,
    use_cache: bool = True,
    progress: TaskProgressFn | None = None,
) -> ConformanceRow:
    started = time.monotonic()
    row = ConformanceRow(
        task=task.id,
        quirks=detect_quirks(task.tests_dir, task.test_extras, port=task.port, provided=TESTER_PINS),
        white_box=task.white_box,
    )
    for name in CONTROLS:
        if progress:
            progress(task.id, f"scoring the {name} repo")
        say = None
        if progress is not None:

            def say(message: str, _task: str = task.id, _progress: TaskProgressFn = progress) -> None:
                _progress(_task, message)

        request = ScoreRequest(
            output_dir=out_dir / task.id / name,
            run_id=f"conformance-{task.id}-{name}"[:60],
            profile=profile,
            use_cache=use_cache,
        )
        result: ScoreResult = score_repo(task, controls[name], request, ScoreOptions(client=client, progress=say))
        row.outcomes[name] = {p: _cell(r) for p, r in result.profiles.items()}
        compat = result.profiles.get("compat")
        if compat is not None:
            row.compat_totals[name] = compat.pass_at_1.total
        strict = result.profiles.get("strict")
        if strict is not None:
            if strict.outcome == "task_error":
                row.task_error = strict.error or "task error"
            elif name == "empty" and strict.outcome != "infra_error":
                row.strict_items = strict.pass_at_1.total
                row.collection_errors = sum(1 for t in strict.tests if t.message.startswith("collection error"))
    row.seconds = round(time.monotonic() - started, 1)
    return row


def run_conformance(
    tasks: Sequence[Task],
    *,
    work_dir: Path,
    profile: ProfileChoice = "both",
    workers: int = 2,
    client: docker.DockerClient | None = None,
    use_cache: bool = True,
    progress: TaskProgressFn | None = None,
) -> list[ConformanceRow]:
    controls = make_control_repos(work_dir / "controls")
    out_dir = work_dir / "results"

    def one(task: Task) -> ConformanceRow:
        return check_task(
            task, controls, profile=profile, out_dir=out_dir, client=client, use_cache=use_cache, progress=progress
        )

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="conformance") as pool:
        rows = list(pool.map(one, tasks))
    return rows


def row_dict(row: ConformanceRow) -> dict[str, object]:
    return {
        "task": row.task,
        "strict_items": row.strict_items,
        "collection_errors": row.collection_errors,
        "compat_totals": row.compat_totals,
        "outcomes": row.outcomes,
        "task_error": row.task_error,
        "white_box": row.white_box,
        "quirks": row.quirks,
        "seconds": row.seconds,
    }
