"""Run folders built by hand for the view's tests and bench: finished runs (a copy of the sample
recording with an agent trajectory, hostile texts in it), and a run still going (`run.json`,
attempt states, rows written one by one) that a test can advance; the view served on loopback in
a thread, and pages read back (Chromium's DOM, table cells)."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import RunWriter, build_entry
from bridge.view.catalog import Catalog
from bridge.view.server import build_app
from tests.helpers import run_chromium

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "recordings" / "samples" / "kv-ledger-sample"
SCRIPT = "<script>document.title='PWNED'</script>"
IMG = "<img src=x onerror=\"document.title='PWNED'\">"
RUN_ID = "2026-03-01_10-00-00"


def sample_result() -> ScoreResult:
    path = next((SAMPLE / "results").glob("submission-*/result.json"))
    return ScoreResult.model_validate_json(path.read_text())


def recording(dest: Path) -> tuple[Path, str]:
    """A copy of the sample recording with an ATIF trajectory whose texts are markup."""
    shutil.copytree(SAMPLE, dest)
    meta = json.loads((dest / "session.json").read_text())
    started = datetime.fromisoformat(meta["created_at"].replace("Z", "+00:00"))
    steps = [
        {"step_id": 1, "source": "user", "message": "solve kv-ledger " + SCRIPT, "timestamp": started.isoformat()},
        {
            "step_id": 2,
            "source": "agent",
            "message": "I will write " + IMG,
            "timestamp": (started + timedelta(seconds=3)).isoformat(),
            "tool_calls": [{"tool_call_id": "c1", "function_name": "Write" + SCRIPT, "arguments": {"file_path": IMG}}],
            "observation": {"results": [{"source_call_id": "c1", "content": "wrote " + SCRIPT}]},
            "metrics": {"prompt_tokens": 1200, "completion_tokens": 34},
        },
        {
            "step_id": 3,
            "source": "agent",
            "message": "submitting",
            "timestamp": (started + timedelta(seconds=20)).isoformat(),
        },
    ]
    (dest / "agent").mkdir()
    trajectory = {
        "schema_version": "ATIF-v1.8",
        "session_id": meta["session_id"],
        "agent": {"name": "claude-code", "version": "2.0.31", "model_name": "claude-sonnet-4-5"},
        "steps": steps,
    }
    (dest / "agent" / "trajectory.json").write_text(json.dumps(trajectory))
    return dest, str(meta["session_id"])


def _row(
    task: str, attempt: int, passed: int | None, *, rec: Path | None = None, sid: str = "", cost: float = 0.1
) -> dict[str, Any]:
    result = sample_result().model_copy(deep=True)
    result.task_id = task
    for prof in result.profiles.values():
        if passed is not None:
            prof.pass_at_1.passed = passed
            prof.pass_at_1.failed = prof.pass_at_1.total - passed
            prof.pass_at_1.score = passed / prof.pass_at_1.total
    row = build_entry(result, "compat")
    row.update(agent={"name": "claude-code", "version": "2.0.31", "model": "claude-sonnet-4-5"}, attempt=attempt)
    row["run"] = {
        "session_id": sid,
        "recording": str(rec) if rec else "",
        "wall_seconds": 30.0 + attempt,
        "cost_usd": cost,
        "tool_calls": 5,
    }
    return row


def finished_run(base: Path, name: str, scores: dict[str, list[int]], *, cost: float = 0.1) -> Path:
    """A finished run folder: `scores[task]` is each attempt's passed tests (of the sample's total);
    kv-ledger's first attempt links to a copy of the sample recording."""
    out = base / name
    recs = base / f"{name}-recordings"
    writer = RunWriter(out, RUN_ID)
    for task, attempts in scores.items():
        for k, passed in enumerate(attempts, start=1):
            rec, sid = (None, "")
            if task == "kv-ledger" and k == 1:
                rec, sid = recording(recs / RUN_ID / task / f"a{k}" / "sess")
            writer.record(_row(task, k, passed, rec=rec, sid=sid, cost=cost), key=f"{task}.a{k}")
    meta = {
        "agent": {"name": "claude-code", "version": "2.0.31", "model": "claude-sonnet-4-5"},
        "attempts": max(len(v) for v in scores.values()),
        "config": {"hash": f"c0ffee-{name}", "cli_version": "2.0.31", "prompt": "bridge", "sandbox": "bwrap"},
        "sandbox": "bwrap",
        "run_id": RUN_ID,
    }
    writer.finalize(meta)
    (out / "run.json").write_text(
        json.dumps(
            {
                "agent": "claude-code",
                "tasks": list(scores),
                "attempts": meta["attempts"],
                "run_id": RUN_ID,
                "recordings": str(recs),
            }
        )
    )
    return out


class LiveRun:
    """A run still going: `run.json` naming its tasks, and attempts the test moves along."""

    def __init__(self, base: Path, tasks: list[str], attempts: int = 1) -> None:
        self.dir = base / "live"
        self.dir.mkdir(parents=True)
        self.run_id = "2026-03-02_09-00-00"
        options = {
            "agent": "claude-code",
            "tasks": tasks,
            "attempts": attempts,
            "run_id": self.run_id,
            "recordings": str(base / "live-recordings"),
        }
        (base / "live-recordings").mkdir()
        (self.dir / "run.json").write_text(json.dumps(options))
        (self.dir / "attempts").mkdir()
        (self.dir / "intermediate" / self.run_id).mkdir(parents=True)

    def folder(self, task: str, k: int) -> Path:
        path = self.dir / "attempts" / task / f"a{k}"
        (path / "agent").mkdir(parents=True, exist_ok=True)
        return path

    def start(self, task: str, k: int, tool: str = "Write") -> None:
        folder = self.folder(task, k)
        (folder / "state.json").write_text(json.dumps({"phase": "running", "started_at": time.time() - 12.0}))
        event = {
            "type": "assistant",
            "message": {"content": [{"type": "tool_use", "id": "t1", "name": tool, "input": {}}]},
        }
        (folder / "agent" / "stream.jsonl").write_text(json.dumps(event) + "\n")

    def score(self, task: str, k: int, passed: int) -> None:
        folder = self.folder(task, k)
        (folder / "state.json").write_text(json.dumps({"phase": "scored", "started_at": time.time() - 30.0}))
        row = _row(task, k, passed)
        (self.dir / "intermediate" / self.run_id / f"{task}.a{k}.json").write_text(json.dumps(row))

    def error(self, task: str, k: int) -> None:
        folder = self.folder(task, k)
        (folder / "state.json").write_text(json.dumps({"phase": "agent_error", "agent_error": {"class": "rate_limit"}}))


# ----------------------------------------------------------------------------- serving and reading pages


def client(catalog: Catalog, **kw: Any) -> TestClient:
    return TestClient(build_app(catalog, **kw), base_url="http://127.0.0.1:8765")


class Served:
    """The view's app on a loopback port, in a thread of this process."""

    def __init__(self, catalog: Catalog, on_request: Any = None) -> None:
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        app = build_app(catalog, port=self.port)

        async def watched(scope: Any, receive: Any, send: Any) -> None:
            if on_request and scope["type"] == "http":
                on_request(scope["path"])
            await app(scope, receive, send)

        self.server = uvicorn.Server(uvicorn.Config(watched, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the view did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class _Cells(HTMLParser):
    """The text of each cell of one table's body, row by row."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.inside, self.rows = table_id, False, []  # type: list[list[str]]
        self.in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.inside = ("id", self.table_id) in attrs
        elif self.inside and tag == "tbody":
            self.in_body = True
        elif self.in_body and tag == "tr":
            self.rows.append([])
        elif self.in_body and tag == "td":
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = self.in_body = False

    def handle_data(self, data: str) -> None:
        if self.in_body and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def all_cells(page: str) -> list[str]:
    """The text of every table cell of a page, in order."""
    cells: list[str] = []

    class Parser(HTMLParser):
        depth = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "td":
                cells.append("")
                self.depth += 1

        def handle_endtag(self, tag: str) -> None:
            if tag == "td":
                self.depth -= 1

        def handle_data(self, data: str) -> None:
            if self.depth:
                cells[-1] += data

    Parser().feed(page)
    return [" ".join(c.split()) for c in cells]


def table_cells(page: str, table_id: str) -> list[list[str]]:
    parser = _Cells(table_id)
    parser.feed(page)
    return parser.rows


def dom(chromium: str, profile: Path, url: str, budget_ms: int = 0) -> str:
    args = ["--dump-dom", url] if not budget_ms else [f"--virtual-time-budget={budget_ms}", "--dump-dom", url]
    done = run_chromium(chromium, profile, *args)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode("utf-8", errors="replace")
