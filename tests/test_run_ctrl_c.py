"""`rgbridge run` and Ctrl-C: an interrupt always ends the run as interrupted (KeyboardInterrupt,
exit status 130), wherever it lands in the runner's main thread, also while the last attempt
finishes or the report is written. No engine: the attempts are stand-ins; the real run with an
agent interrupted mid-attempt is tests/test_agent_run.py's resume test."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from bridge.agents.attempt.lifecycle import Attempt
from bridge.agents.run.options import RunOptions
from bridge.agents.run.runner import execute
from bridge.errors import BridgeError
from bridge.scoring.run.report_row import ReportRow
from bridge.scoring.run.reporting import RunWriter
from bridge.tasks.catalog import Catalog


class CtrlCInAFinalizer:
    """Ctrl-C delivered while the main thread runs a finalizer: there Python reports a
    KeyboardInterrupt as "Exception ignored" and drops it (what a garbage collection in the
    runner's main thread can run into at any moment)."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)  # runs the Python-level handler before it returns


@pytest.mark.parametrize("where", ["while an attempt runs", "while the report is written"])
def test_ctrl_c_lost_in_a_finalizer_still_interrupts_the_run(
    where: str, tasks_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = threading.Event()
    ran: list[str] = []

    def attempt_run(self: Attempt) -> ReportRow:
        ran.append(self.key)
        assert released.wait(60), "the main thread never delivered its Ctrl-C"
        raise BridgeError("a stand-in attempt")  # recorded as a failed attempt: no engine needed

    def progress(attempts: object, done: object) -> None:
        if where == "while an attempt runs" and ran and not released.is_set():
            CtrlCInAFinalizer()  # dropped at once: its finalizer runs here, in the main thread
            released.set()

    finalize = RunWriter.finalize

    def finalize_interrupted(self: RunWriter, meta: dict[str, object]) -> Path:
        CtrlCInAFinalizer()
        return finalize(self, meta)

    monkeypatch.setattr(Attempt, "run", attempt_run)
    if where == "while the report is written":
        released.set()
        monkeypatch.setattr(RunWriter, "finalize", finalize_interrupted)
    options = RunOptions(
        agent="command",
        agent_cmd="true {prompt} {workspace} {mcp_config}",
        tasks=["kv-ledger"],
        run_id="ctrl-c",
        recordings=str(tmp_path / "recordings"),
    )
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        execute(options, Catalog.from_options(tasks_dir), tmp_path / "out", resume=False, progress=progress)
    assert ran == ["kv-ledger.a1"]
    assert signal.getsignal(signal.SIGINT) is before  # the run's own handler is gone again
