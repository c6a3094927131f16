"""The human panel under a real terminal (tmux): every key hint and prompt is on screen literally,
a note is echoed as typed, the panel is redrawn in place, and it speaks to the person (issue 24,
item 3). Each step sends keys with `tmux send-keys` and checks `tmux capture-pane`.

No scoring runs: the session is paused, resumed, annotated, a submit is offered and declined,
and it is quit.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        if os.environ.get("RGBRIDGE_REQUIRE_TMUX", "") not in ("", "0", "false", "no"):
            pytest.fail("tmux required (RGBRIDGE_REQUIRE_TMUX=1) but not installed")
        pytest.skip("tmux not installed (apt-get install -y tmux; scripts/setup.sh installs it)")
    return path


class Pane:
    def __init__(self, tmux: str, socket: str, name: str) -> None:
        self.base = [tmux, "-L", socket]
        self.name = name

    def send(self, *keys: str, literal: bool = False) -> None:
        subprocess.run([*self.base, "send-keys", "-t", self.name, *(["-l"] if literal else []), *keys], check=True)

    def screen(self) -> str:
        proc = subprocess.run([*self.base, "capture-pane", "-p", "-t", self.name], capture_output=True, text=True)
        return proc.stdout

    def wait_for(self, check: Callable[[str], bool], what: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if check(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")


def test_panel_keys_prompts_and_notes(tmux: str, tmp_path: Path) -> None:
    ws, rec = tmp_path / "ws", tmp_path / "rec"
    ws.mkdir()
    socket = f"rgbridge-test-{uuid.uuid4().hex[:8]}"
    command = " ".join(
        shlex.quote(x)
        for x in [
            sys.executable,
            "-m",
            "bridge.cli",
            "session",
            "start",
            "--human",
            "--task",
            "kv-ledger",
            "--workspace",
            str(ws),
            "--recordings",
            str(rec),
        ]
    )
    script = tmp_path / "run.sh"
    script.write_text(
        f"cd {shlex.quote(str(REPO))}\nunset COLUMNS LINES\nexport PYTHONPATH={shlex.quote(str(REPO))} TERM=xterm-256color\n"
        f"{command}\necho EXIT=$?\nsleep 30\n"
    )
    subprocess.run(
        [
            tmux,
            "-L",
            socket,
            "new-session",
            "-d",
            "-s",
            "panel",
            "-x",
            "160",
            "-y",
            "40",
            f"sh {shlex.quote(str(script))}",
        ],
        check=True,
    )
    pane = Pane(tmux, socket, "panel")
    try:
        first = pane.wait_for(lambda s: "[q] quit" in s, "the key hints")
        for literal in ("[p] pause/resume", "[n] note", "[s] submit", "[q] quit", ".rgbridge/SUBMIT"):
            assert literal in first
        assert "port 8090" in first and str(ws / "README.md") in first and "On submit your workspace" in first
        assert "get_result" not in first and first.count("rgbridge session") == 1

        pane.send("p")
        pane.wait_for(lambda s: "(paused)" in s and "paused: the clock is stopped" in s, "paused")
        pane.send("p")
        pane.wait_for(lambda s: "(running)" in s and "resumed: the clock is running" in s, "resumed")

        pane.send("n")
        pane.wait_for(lambda s: "Enter saves the note" in s, "the note prompt")
        pane.send("fixed [b]the[/b] history route", literal=True)
        typed = pane.wait_for(lambda s: "fixed [b]the[/b] history route█" in s, "the note echoed as typed")
        assert "[q] quit" not in typed  # the prompt replaces the key hints in place
        pane.send("Enter")
        pane.wait_for(lambda s: "note saved: fixed [b]the[/b] history route" in s, "the note saved")

        pane.send("s")
        prompt = pane.wait_for(lambda s: "submit the session? This cannot be undone [y/N]" in s, "[y/N]")
        assert prompt.count("rgbridge session") == 1  # redrawn in place: one panel on screen
        pane.send("n")
        pane.wait_for(lambda s: "submit cancelled" in s and "[s] submit" in s, "submit declined")

        pane.send("q")
        pane.wait_for(lambda s: "quit the session? This cannot be undone [y/N]" in s, "the quit prompt")
        pane.send("y")
        end = pane.wait_for(lambda s: "EXIT=" in s, "the command to end")
        assert "EXIT=0" in end and "ended without a score" in end
        assert end.count("╭") == 1, end  # one panel border: nothing stacked
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], check=False, capture_output=True)

    session = json.loads(next(rec.glob("*/session.json")).read_text())
    assert session["state"] == "quit"
    events = [json.loads(line) for line in next(rec.glob("*/events.jsonl")).read_text().splitlines()]
    assert [e["text"] for e in events if e["type"] == "note"] == ["fixed [b]the[/b] history route"]
    assert [e["type"] for e in events if e["type"] in ("clock_start", "clock_stop")][:3] == [
        "clock_start",
        "clock_stop",
        "clock_start",
    ]
