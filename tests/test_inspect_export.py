"""`rgbridge export --layout inspect` (issue 24, item 6): inspect_ai's own reader loads the log with
the right scores, and `inspect view` serves it to a real browser (headless Chromium driven over
the DevTools protocol on loopback)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.scoring.run.reporting import RunWriter
from tests.helpers import FAILING, SAMPLE, flawed_result

inspect_log = pytest.importorskip("inspect_ai.log", reason="inspect-ai not installed (extra 'inspect')")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("inspect")
    run = base / "run"
    writer = RunWriter(run, "2026-03-01_11-00-00")
    writer.record(flawed_result())
    writer.finalize({"agent_name": "codex", "model_name": "gpt-x"})
    recs = base / "recs"
    recs.mkdir()
    shutil.copytree(SAMPLE, recs / SAMPLE.name)
    out = {"run": base / "out-run", "recs": base / "out-recs"}
    assert main(["export", str(run), "--layout", "inspect", "-o", str(out["run"])]) == 0
    assert main(["export", "--recordings", str(recs), "--layout", "inspect", "-o", str(out["recs"])]) == 0
    return out


def _log(folder: Path):  # an inspect_ai EvalLog
    (path,) = folder.glob("*.eval")
    return inspect_log.read_eval_log(str(path))


def test_run_log_has_both_profiles_scores(exported: dict[str, Path]) -> None:
    log = _log(exported["run"])
    assert log.status == "success" and log.eval.task == "repogenesis" and log.eval.model == "rgbridge/gpt-x"
    (sample,) = log.samples
    assert (sample.id, sample.epoch) == ("kv-ledger", 1)
    strict, compat = sample.scores["strict"], sample.scores["compat"]
    assert strict.value == {"pass_at_1": 0.9429, "ac": 1.0, "dsr": 1.0} and strict.answer == "scored"
    assert compat.value == {"pass_at_1": 1.0, "ac": 1.0, "dsr": 1.0}
    assert f"failed {FAILING} [strict] — E assert 404 in [200, 204]" in strict.explanation
    assert sample.metadata["contaminated"] is False
    metrics = {s.name: {k: m.value for k, m in s.metrics.items()} for s in log.results.scores}
    assert metrics["strict"] == {"pass_at_1": 0.9429, "ac": 1.0, "dsr": 1.0}


def test_recordings_log_has_the_session_as_transcript(exported: dict[str, Path]) -> None:
    log = _log(exported["recs"])
    (sample,) = log.samples
    assert sample.scores["strict"].value == {"pass_at_1": 1.0, "ac": 1.0, "dsr": 1.0}
    events = [json.loads(line) for line in (SAMPLE / "events.jsonl").read_text().splitlines()]
    assert len(sample.events) == len(events)
    notes = [e.data for e in sample.events if isinstance(e.data, dict) and e.data.get("type") == "note"]
    assert notes and notes[0]["text"] == 'adding <history> & counters — "done" soon'
    assert sample.metadata["session_id"] == json.loads((SAMPLE / "session.json").read_text())["session_id"]
    assert sample.metadata["contaminated"] is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer in {timeout}s")


async def _page_text(debug_port: int, url: str, wanted: list[str], timeout: float = 45.0) -> str:
    """Open `url` in the browser behind `debug_port` and return the page's text once it shows
    everything in `wanted` (or when `timeout` runs out)."""
    import aiohttp

    tabs = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json").read())
    ws_url = next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"]
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        counter = 0

        async def call(method: str, **params: object) -> dict:
            nonlocal counter
            counter += 1
            await ws.send_json({"id": counter, "method": method, "params": params})
            while True:
                msg = json.loads((await ws.receive(timeout=30)).data)
                if msg.get("id") == counter:
                    return msg.get("result", {})

        await call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            result = await call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''")
            text = str(result.get("result", {}).get("value", ""))
            if all(w in text for w in wanted):
                break
            await asyncio.sleep(0.5)
        return text


def test_inspect_view_serves_the_log(exported: dict[str, Path], chromium: str, tmp_path: Path) -> None:  # noqa: F811
    inspect_cli = shutil.which("inspect")
    if inspect_cli is None:
        pytest.skip("the inspect command (inspect-ai) is not on PATH")
    port, debug_port = _free_port(), _free_port()
    view = subprocess.Popen(
        [inspect_cli, "view", "--log-dir", str(exported["run"]), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    browser = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/", view)
        browser = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={tmp_path / 'profile'}",
                f"--remote-debugging-port={debug_port}",
                "--remote-debugging-address=127.0.0.1",
                "--window-size=1400,1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_http(f"http://127.0.0.1:{debug_port}/json/version", browser)
        (log_file,) = exported["run"].glob("*.eval")
        wanted = ["kv-ledger", "Epoch 1", "strict", "compat", "pass_at_1", "dsr"]
        text = asyncio.run(_page_text(debug_port, f"http://127.0.0.1:{port}/#/logs/{log_file.name}", wanted))
        missing = [w for w in wanted if w not in text]
        assert not missing, f"inspect view did not render {missing}; page text:\n{text[:2000]}"
        assert "rgbridge/gpt-x" in text and "0.943" in text  # the strict Pass@1 of the sample's run
    finally:
        for proc in (browser, view):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
