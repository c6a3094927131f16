"""Helpers more than one test module uses (a test module never imports another test module).

Fixtures shared across modules live in tests/conftest.py; agent CLI runs in tests/agent_clis.py,
the scripted model endpoint in tests/scripted_model.py, a test's loopback HTTP server in
tests/loopback.py, the golden-copy watch in tests/golden_leaks.py, the Ray cluster in
tests/raycluster.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from bridge.recording.clock import parse_iso
from bridge.scoring import upstream
from bridge.scoring.result import APICoverage, DSRResult, PassAt1, ProfileResult, ScoreResult
from bridge.scoring.types import ScoreRequest

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The shipped sample recording (kv-ledger, scored in both profiles).
SAMPLE = REPO_ROOT / "recordings" / "samples" / "kv-ledger-sample"


# --------------------------------------------------------------------------------------------
# Stand-in graders for sessions (tests about sessions, not about scores)


class CountingScorer:
    """A fast stand-in for the Docker engine: 'passes' one test per submitted .py file."""

    def __init__(self) -> None:
        self.calls: list[Path] = []
        self.requests: list[ScoreRequest] = []

    def __call__(self, task, repo_dir, request: ScoreRequest, progress):
        progress("fake: counting files")
        files = sorted(p.relative_to(repo_dir).as_posix() for p in repo_dir.rglob("*") if p.is_file())
        self.calls.append(repo_dir)
        self.requests.append(request)
        py = [f for f in files if f.endswith(".py")]
        prof = ProfileResult(
            profile="strict",
            outcome="scored",
            dsr=DSRResult(success=True, message="fake"),
            pass_at_1=PassAt1.from_counts(len(py), 0, 0),
        )
        result = strict_result(task, request, prof)
        (request.output_dir / "files.json").write_text(json.dumps(files), encoding="utf-8")
        return result


class NullScorer:
    """Only for the tests that are about access detection, not about scores."""

    def __call__(self, task, repo_dir, request, progress):
        prof = ProfileResult(
            profile="strict",
            outcome="scored",
            dsr=DSRResult(success=True, message="null"),
            pass_at_1=PassAt1.from_counts(0, 0, 0),
        )
        result = strict_result(task, request, prof)
        return result


def strict_result(task, request, prof: ProfileResult) -> ScoreResult:
    """The fake scorers' result: one strict profile, written where a scorer writes it."""
    result = ScoreResult(
        task_id=task.id,
        task_hash=task.content_hash,
        snapshot_hash=request.snapshot_hash,
        lang=task.lang,
        port=task.port,
        framework=task.framework,
        profiles={"strict": prof},
    )
    (request.output_dir / "result.json").write_text(result.model_dump_json(), encoding="utf-8")
    return result


def write_solution(task_dir: Path, ws: Path) -> None:
    for item in (task_dir / "solution").iterdir():
        if item.is_dir():
            shutil.copytree(item, ws / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, ws / item.name)


def flipper(parent: Path, name: str, outside: Path, stop: threading.Event) -> threading.Thread:
    """Swap `parent/name` between a real directory and a symlink to `outside` as fast as possible."""
    real, link = parent / name, parent / f".{name}-real"

    def run() -> None:
        while not stop.is_set():
            try:
                if real.is_symlink():  # symlink phase over: the directory comes back
                    os.unlink(real)
                    os.rename(link, real)
                else:  # the directory moves aside, a symlink takes its name
                    os.rename(real, link)
                    os.symlink(outside, real)
            except OSError:
                pass
            time.sleep(0.0005)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------------------------
# `rgbridge serve` over stdio


def serve_command() -> list[str]:
    """`rgbridge serve` through the installed console script when present."""
    script = Path(sys.executable).with_name("rgbridge")
    return [str(script), "serve"] if script.exists() else [sys.executable, "-m", "bridge.cli", "serve"]


def server_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RGBRIDGE_WORKSPACE", "CLAUDE_PROJECT_DIR", "RGBRIDGE_TOKEN")
    }
    return env


def stdio_params(ws: Path, rec: Path, *extra: str) -> StdioServerParameters:
    cmd = serve_command()
    return StdioServerParameters(
        command=cmd[0],
        args=[*cmd[1:], "--workspace", str(ws), "--recordings", str(rec), *extra],
        env=server_env(),
        cwd=str(REPO_ROOT),
    )


# --------------------------------------------------------------------------------------------
# Reports: a flawed score, headless Chromium (the `chromium` fixture is in conftest.py)


FAILING = "tests/test_keys.py::test_history_lists_versions"
LONGREPR = (
    "api = <conftest.Api object at 0x7f>, prefix = 'k1'\n\n"
    "    def test_history_lists_versions(api, prefix):\n"
    ">       assert r.status_code in [200, 204]\n"
    "E       assert 404 in [200, 204]\n"
    "E        +  where 404 = <Response [404]>.status_code\n\n"
    "tests/test_keys.py:41: AssertionError"
)
MARKUP = "[bold red]not markup[/] [p] [y/N]"
COMPAT_LOG = (
    "tests/test_keys.py::test_put_creates PASSED [ 50%]\n"
    f"{FAILING} FAILED [100%]\n"
    "=================================== FAILURES ===================================\n"
    "_________________________ test_history_lists_versions __________________________\n"
    "tests/test_keys.py:41: in test_history_lists_versions\n"
    "    assert r.status_code in [200, 204]\n"
    "E   assert 404 in [200, 204]\n"
    "=========================== short test summary info ============================\n"
    f"FAILED {FAILING} - assert 404 in [200, 204]\n"
    "========================= 1 failed, 1 passed in 0.31s =========================\n"
)


def flawed_result() -> ScoreResult:
    """The sample's result with one golden test failing the way a renamed route fails
    (`E assert 404 in [200, 204]`) and static AC still counting the route from a comment."""
    data = json.loads(next((SAMPLE / "results").glob("submission-*/result.json")).read_text())
    result = ScoreResult.model_validate(data)
    strict = result.profiles["strict"]
    strict.tests[0].nodeid, strict.tests[0].outcome = FAILING, "failed"
    strict.tests[0].message, strict.tests[0].phase, strict.tests[0].duration = LONGREPR, "call", 0.042
    strict.tests[1].outcome, strict.tests[1].message, strict.tests[1].phase = "error", MARKUP, "setup"
    strict.pass_at_1.passed, strict.pass_at_1.failed, strict.pass_at_1.errors = 33, 1, 1
    assert strict.dynamic_api_coverage is not None
    for ep in strict.dynamic_api_coverage.endpoints:
        if ep.path.endswith("/history"):
            ep.implemented, ep.status, ep.evidence = False, 404, "404: no route"
    strict.dynamic_api_coverage.implemented_apis -= 1
    strict.dynamic_api_coverage.score = round(6 / 7, 4)
    result.profiles["compat"].tests = upstream.tests_from_log(COMPAT_LOG)
    return result


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Tiny PNG decoder (8-bit RGB/RGBA, non-interlaced): width, height, unfiltered rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    i = 0
    for _ in range(height):
        ftype, line = raw[i], bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


class HtmlTags(HTMLParser):
    """The start tags of a page with their attributes, as a browser would parse them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


#: the only links a page may hold: an agent run's attempt pages written beside it (bridge/reports/html.py)
ATTEMPT_LINK = re.compile(r"^[A-Za-z0-9_.%\-]+_attempts/[A-Za-z0-9_.%\-]+\.html$")


def assert_no_active_content(page: str, *, attempt_links: bool = False) -> None:
    """No scripts, no event handlers, nothing loaded from elsewhere (checked on parsed tags); with
    `attempt_links`, links to the attempt pages beside it, nothing else."""
    parser = HtmlTags()
    parser.feed(page)
    names = {t for t, _ in parser.tags}
    banned = {"script", "img", "iframe", "object", "embed", "link", "form", "input"}
    assert not names & (banned if attempt_links else banned | {"a"}), names
    for tag, attrs in parser.tags:
        for key, value in attrs:
            assert not key.startswith("on"), (tag, key)
            if attempt_links and tag == "a" and key == "href":
                assert value and ATTEMPT_LINK.match(value), value
                continue
            assert key not in ("src", "href", "xlink:href", "action"), (tag, key, value)
    assert "@import" not in page and "url(" not in page


# --------------------------------------------------------------------------------------------
# `rgbridge run` output


#: The API key the agent-run tests put in the environment: it must never reach a file.
SECRET = "sk-test-never-on-disk-4b1d"


def report_of(out: Path) -> dict[str, Any]:
    (path,) = out.glob("report_*.json")
    return json.loads(path.read_text())


def recordings_of(out: Path) -> list[Path]:
    return sorted(p.parent for p in (out / "recordings").rglob("session.json") if ".interrupted-" not in str(p))


def events(rec: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (rec / "events.jsonl").read_text().splitlines()]


def assert_atif(path: Path) -> Any:
    from atif import Trajectory

    trajectory = Trajectory.model_validate(json.loads(path.read_text()))
    assert [s.step_id for s in trajectory.steps] == list(range(1, len(trajectory.steps) + 1))
    assert trajectory.steps[0].source == "user" and "README" in str(trajectory.steps[0].message)
    assert trajectory.final_metrics is not None and trajectory.final_metrics.total_steps == len(trajectory.steps)
    return trajectory


def no_secret_on_disk(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), f"API key written into {path}"


def make_score(
    task: str,
    *,
    compat_passed: int = 2,
    strict_passed: int = 1,
    total: int = 4,
    compat_outcome: str = "scored",
    strict_outcome: str = "scored",
) -> ScoreResult:
    def prof(name: str, passed: int, outcome: str) -> ProfileResult:
        return ProfileResult(
            profile=name,
            outcome=outcome,
            dsr=DSRResult(success=True, message="Service started successfully"),
            pass_at_1=PassAt1.from_counts(passed, total - passed, 0),
            api_coverage=APICoverage(total_apis=2, implemented_apis=2, score=1.0),
            dynamic_api_coverage=APICoverage(total_apis=2, implemented_apis=1, score=0.5) if name == "strict" else None,
            exit_code=0,
            elapsed_seconds=1.5,
        )

    return ScoreResult(
        task_id=task,
        task_hash="t" * 8,
        snapshot_hash="s" * 8,
        lang="python",
        port=8000,
        framework="fastapi",
        profiles={
            "compat": prof("compat", compat_passed, compat_outcome),
            "strict": prof("strict", strict_passed, strict_outcome),
        },
    )


# ------------------------------------------------------------------ agent runs (tests/test_agent_run*.py, test_attempt_gap.py)
AGENT = REPO_ROOT / "tests" / "agents" / "mcp_sdk_agent.py"
GAP_TASK = "kv-ledger"


def payload(tmp_path: Path, task: str) -> Path:
    """The oracle's files as the scripted agent's input (read here, before any session is open)."""
    src = REPO_ROOT / "tasks" / task / "solution"
    path = tmp_path / f"payload-{task}.json"
    path.write_text(json.dumps({p.relative_to(src).as_posix(): p.read_text() for p in src.rglob("*") if p.is_file()}))
    return path


def agent_cmd(mode: str, payload_file: Path) -> str:
    return f"{sys.executable} {AGENT} {mode} {payload_file} {{mcp_config}} {{workspace}}"


def agent_window(out: Path, task: str = GAP_TASK, attempt: int = 1) -> tuple[float, float]:
    """When the agent ran (epoch seconds), from the attempt's state."""
    state = json.loads((out / "attempts" / task / f"a{attempt}" / "state.json").read_text())
    end = float(state["agent_ended_at"])
    return end - float(state["agent_seconds"]), end


def at(event: dict[str, Any]) -> float:
    return parse_iso(event["t"]).timestamp()


def assert_held_through_the_agent(rec: Path, window: tuple[float, float]) -> None:
    """No `recorder_stopped` or `detach` between the session's start and the agent's end (or its
    submission, which seals the recording: the recorder stops there by design)."""
    evs = events(rec)
    started = at(next(e for e in evs if e["type"] == "session_start"))
    assert started <= window[0] + 1.0  # the session was open before the agent started
    sealed = next((e["seq"] for e in evs if e["type"] == "checkpoint" and e.get("reason") == "seal"), None)
    let_go = [
        e
        for e in evs
        if e["type"] in ("recorder_stopped", "detach", "reattach")
        and at(e) < window[1]
        and (sealed is None or e["seq"] < sealed)
    ]
    assert let_go == [], let_go
