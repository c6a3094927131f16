"""A submitted score survives the client's signals (issue 20): a real `python -m mcp_server`
over stdio, driven by the MCP SDK's client, submits the oracle of `kv-ledger`; then the server is
ended the way IDEs end it (Claude Code: SIGINT then SIGTERM ~100 ms later; a closed terminal:
SIGHUP; a hard kill: SIGKILL), without closing stdin first. The score (Pass@1 1.0, both profiles,
real Docker engine) must appear sealed in the recording with no further action, and no golden
file may be copied where the agent's user can read it, at any moment (tests/golden_leaks.py).
A scoring process killed with SIGKILL is resumed by the next server start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from golden_leaks import GoldenLeaks, golden_leaks  # noqa: F401 - the fixture
from mcp import Client, StdioServerParameters, stdio_client

REPO_ROOT = Path(__file__).resolve().parent.parent
TASK = "kv-ledger"
TIMEOUT = 600


def server_env(tmp: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RGBRIDGE_WORKSPACE", "CLAUDE_PROJECT_DIR", "RGBRIDGE_TOKEN")
    }
    env["TMPDIR"] = str(tmp)  # the server's (and its scoring process's) temp folder: checked for leaks
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def params(ws: Path, rec: Path, tmp: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--workspace", str(ws), "--recordings", str(rec)],
        env=server_env(tmp),
        cwd=str(REPO_ROOT),
    )


def pids_with(*needles: str) -> list[int]:
    """Processes whose command line holds every needle (found through /proc: the SDK spawns them)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(n in cmd for n in needles):
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def session_json(rec: Path) -> dict[str, Any]:
    [folder] = [p for p in rec.iterdir() if (p / "session.json").is_file()]
    return json.loads((folder / "session.json").read_text())


def sealed_score(rec: Path, leaks: GoldenLeaks, deadline: float) -> tuple[dict[str, Any], Path]:
    """Wait for the job to be done and the recording sealed, checking for golden copies meanwhile."""
    while time.monotonic() < deadline:
        leaks.check()  # not even temporarily
        record = session_json(rec)
        folder = rec / record["session_id"]
        if record["job"]["state"] in ("done", "failed") and (folder / "integrity.json").is_file():
            return record, folder
        time.sleep(1.0)
    raise AssertionError(f"no sealed score: {session_json(rec)['job']}")


def assert_oracle_scored(record: dict[str, Any], folder: Path) -> None:
    assert record["job"]["state"] == "done", record["job"]
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    [score] = [e for e in events if e["type"] == "score"]
    for profile in ("strict", "compat"):
        got = score["summary"][profile]
        assert got["pass_at_1"] == 1.0 and got["dsr"] is True, (profile, got)
    # the submitting call is in the recording (logged before the scoring process took it over)
    assert [e["tool"] for e in events if e["type"] == "mcp_call"][:2] == ["start_task", "submit_task"]
    # the clock stopped after the last file event, and the recording verifies
    types = [e["type"] for e in events]
    assert (
        "file_created" not in types[types.index("clock_stop") :]
        and "file_modified" not in types[types.index("clock_stop") :]
    )
    from bridge.recording.verify import verify_recording

    report = verify_recording(folder)
    assert report.ok, report


async def start_and_submit(ws: Path, rec: Path, tmp: Path, on_submitted) -> dict[str, Any]:
    with (tmp.parent / "server.stderr").open("a") as errlog:
        async with Client(stdio_client(params(ws, rec, tmp), errlog=errlog), mode="legacy") as c:
            await c.call_tool("start_task", {"task_id": TASK})
            solution = REPO_ROOT / "tasks" / TASK / "solution"
            for path in solution.iterdir():  # what the agent's own file tools do
                shutil.copy(path, ws / path.name)
            # a snapshot of its own: the engine's result cache cannot answer for it, scoring runs
            (ws / "NOTES.md").write_text(f"run {time.time_ns()}\n")
            receipt = (await c.call_tool("submit_task", {})).structured_content
            await on_submitted()
            return receipt


def _own_failure(exc: BaseException) -> bool:
    """A failed check of the test's own, also inside the task groups of the MCP client."""
    if isinstance(exc, AssertionError):
        return True
    return isinstance(exc, BaseExceptionGroup) and any(_own_failure(e) for e in exc.exceptions)


def run_until_server_gone(fn: Callable[..., Awaitable[object]], *args: object) -> None:
    """`anyio.run(fn, *args)` where the client failing because its server went is expected; an
    assertion of the test that failed meanwhile is raised, never swallowed with it."""
    try:
        anyio.run(fn, *args)
    except Exception as exc:
        if _own_failure(exc):
            raise


def test_a_check_failing_while_the_server_goes_is_not_swallowed() -> None:
    async def server_gone() -> None:
        raise anyio.BrokenResourceError

    async def check_failed_in_a_task() -> None:
        async def check() -> None:
            raise AssertionError("no detached scoring process was started")

        async with anyio.create_task_group() as tg:
            tg.start_soon(check)

    run_until_server_gone(server_gone)  # expected: the client lost its server
    with pytest.raises(BaseExceptionGroup) as caught:
        run_until_server_gone(check_failed_in_a_task)
    assert _own_failure(caught.value) and "no detached scoring process" in str(caught.value.exceptions[0])


def run_signalled(tmp_path: Path, leaks: GoldenLeaks, signals: list[signal.Signals]) -> tuple[dict, Path, float]:
    ws, rec, tmp = tmp_path / "ws", tmp_path / "rec", tmp_path / "tmp"
    ws.mkdir()
    tmp.mkdir()
    leaks.roots.append(tmp)
    leaks.allow(ws)  # the oracle is copied there on purpose: the agent's own work
    leaks.allow(rec)
    timing: dict[str, float] = {}

    async def signal_server() -> None:
        [pid] = pids_with("mcp_server", str(rec))
        timing["pid"] = pid
        timing["signal"] = time.monotonic()
        for i, sig in enumerate(signals):
            if i:
                await anyio.sleep(0.1)  # Claude Code: SIGINT, then SIGTERM about 100 ms later
            os.kill(pid, sig)
        # the client stays connected, stdin open, while its server goes
        for _ in range(400):
            if not alive(pid):
                break
            await anyio.sleep(0.05)
        timing["exited"] = time.monotonic()

    run_until_server_gone(start_and_submit, ws, rec, tmp, signal_server)
    assert "pid" in timing, "the server was never signalled"
    deadline = time.monotonic() + 20  # the client may have given up on its server before we saw it go
    while alive(int(timing["pid"])) and time.monotonic() < deadline:
        time.sleep(0.02)
    timing.setdefault("exited", time.monotonic())
    assert not alive(int(timing["pid"])), "the server did not end on the signal"
    assert "signal" in timing, "the server was never signalled"
    record, folder = sealed_score(rec, leaks, time.monotonic() + TIMEOUT)
    seconds = time.monotonic() - timing["signal"]
    print(
        f"{'+'.join(s.name for s in signals)}: server exit {timing['exited'] - timing['signal']:.2f}s, "
        f"sealed score {seconds:.1f}s after the signal"
    )
    return record, folder, seconds


@pytest.mark.parametrize(
    "signals",
    [[signal.SIGINT, signal.SIGTERM], [signal.SIGHUP], [signal.SIGKILL]],
    ids=["claude-code-int-term", "hup", "kill"],
)
def test_a_submitted_score_is_sealed_after_the_server_is_signalled(
    tmp_path: Path,
    golden_leaks: GoldenLeaks,  # noqa: F811
    docker_client,
    signals,
) -> None:
    record, folder, _ = run_signalled(tmp_path, golden_leaks, signals)
    assert_oracle_scored(record, folder)
    if signals != [signal.SIGKILL]:  # an orderly close: the server's stop is recorded
        events = (folder / "events.jsonl").read_text()
        assert '"type":"recorder_stopped"' in events


def test_a_killed_scoring_process_is_resumed_by_the_next_server_start(
    tmp_path: Path,
    golden_leaks: GoldenLeaks,  # noqa: F811
    docker_client,
) -> None:
    ws, rec, tmp = tmp_path / "ws", tmp_path / "rec", tmp_path / "tmp"
    ws.mkdir()
    tmp.mkdir()
    golden_leaks.roots.append(tmp)
    golden_leaks.allow(ws)
    golden_leaks.allow(rec)

    async def kill_everything() -> None:
        for _ in range(100):
            scorers = pids_with("bridge.sessions.score_process", str(rec))
            if scorers:
                break
            await anyio.sleep(0.05)
        assert scorers, "no detached scoring process was started"
        for pid in scorers + pids_with("mcp_server", str(rec)):
            os.kill(pid, signal.SIGKILL)

    run_until_server_gone(start_and_submit, ws, rec, tmp, kill_everything)
    time.sleep(1.0)
    assert session_json(rec)["job"]["state"] in ("queued", "running")
    golden_leaks.check()

    async def restart() -> None:  # the next start resumes the job; nothing else is asked of it
        with (tmp_path / "server2.stderr").open("w") as errlog:
            async with Client(stdio_client(params(ws, rec, tmp), errlog=errlog), mode="legacy") as c:
                await c.list_tools()

    anyio.run(restart)
    record, folder = sealed_score(rec, golden_leaks, time.monotonic() + TIMEOUT)
    assert_oracle_scored(record, folder)
    events = (folder / "events.jsonl").read_text()
    assert '"type":"score_resume"' in events


def test_a_server_still_up_relaunches_a_scoring_process_that_died(
    tmp_path: Path,
    golden_leaks: GoldenLeaks,  # noqa: F811
    docker_client,
) -> None:
    from bridge.sessions.manager import SessionManager
    from bridge.sessions.settings import SessionSettings
    from bridge.tasks.catalog import Catalog

    ws = tmp_path / "ws"
    golden_leaks.allow(ws)
    golden_leaks.allow(tmp_path / "rec")
    mgr = SessionManager(
        Catalog.from_options(REPO_ROOT / "tasks"),
        recordings_dir=tmp_path / "rec",
        settings=SessionSettings(seal_quiet_seconds=0.3),
    )  # the Docker engine: detached scoring processes
    try:
        st = mgr.start(TASK, ws)
        for path in (REPO_ROOT / "tasks" / TASK / "solution").iterdir():
            shutil.copy(path, ws / path.name)
        (ws / "NOTES.md").write_text(f"run {time.time_ns()}\n")
        mgr.submit(st.session_id)
        proc = mgr.sessions[st.session_id].score_process
        assert proc is not None
        proc.kill()
        proc.wait(10)
        result = mgr.result(st.session_id, wait_seconds=TIMEOUT)
        assert result.state == "done", result.message
        assert result.summary["strict"]["pass_at_1"] == 1.0 and result.summary["compat"]["pass_at_1"] == 1.0
        assert mgr.sessions[st.session_id].score_process is not proc  # a new one scored it
    finally:
        mgr.close()
