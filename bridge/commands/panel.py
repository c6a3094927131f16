"""The human panel of `rgbridge session start --human`: a live view of the session that a person
drives with keys while they work in any IDE.

Keys (on a terminal): `[p]` pause/resume, `[n]` note, `[s]` submit, `[q]` quit. A note is typed
into the panel itself (echoed as typed; Enter saves, Esc cancels) and submit/quit ask `[y/N]`
there too, so the panel is redrawn in place and never leaves a second border on screen. Every
label is rich `Text` (never markup): `[p]` and `[y/N]` show literally, and notes, file names and
test messages cannot style the screen. Without a terminal the same commands are read as lines
(`pause`, `resume`, `note TEXT`, `submit`, `quit`) so scripts can drive it. Every command goes
through the verb table (bridge/sessions/verbs.py), as the MCP tools do.
"""

from __future__ import annotations

import json
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from bridge.commands.common import console
from bridge.errors import SessionError
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ResultStatus, SessionStatus
from bridge.sessions.verbs import VERBS
from bridge.sessions.verbspec import CallContext
from bridge.textsafe import sanitize_terminal

KEYS = (("p", "pause/resume"), ("n", "note"), ("s", "submit"), ("q", "quit"))
KEY_HINT = "  ".join(f"[{k}] {what}" for k, what in KEYS) + "  — or create .rgbridge/SUBMIT"
LINE_HINT = "type a command and Enter: pause | resume | note TEXT | submit | quit"
ON_SUBMIT = (
    "On submit your workspace is snapshotted and scored in containers (a few minutes); "
    "the score and any failing tests show here."
)
_KEY_COMMANDS = {"p": "toggle", "n": "note", "s": "submit", "q": "quit"}


def fmt_clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass
class PanelInput:
    """What the panel is asking for: keys, a note being typed, or a [y/N] confirmation."""

    mode: str = "keys"  # keys | note | confirm
    buffer: str = ""
    confirm: str = ""  # the verb waiting for [y/N]
    log: list[str] = field(default_factory=list)


def _scoring_lines(status: SessionStatus, result: ResultStatus | None) -> list[Text]:
    if result is None or result.state == "not_submitted":
        return []
    if result.state in ("queued", "running"):
        head = f"Submitted. Your work is being scored in containers ({result.state}: {result.message})."
        return [Text(head), Text(f"The score will appear here; it is also saved in {status.recording}.")]
    if result.state == "failed":
        return [Text(f"Scoring failed outside your work: {result.message}", style="red")]
    lines = [Text(f"Scored. The result is saved in {status.recording}.", style="bold")]
    for name, row in (result.summary or {}).items():
        lines.append(
            Text(
                f"  {name}: {row.get('outcome')}  DSR {row.get('dsr')}  Pass@1 {row.get('passed')}/"
                f"{row.get('total')} ({row.get('pass_at_1')})  AC {row.get('api_coverage')}"
            )
        )
        for line in [*row.get("failed_tests", []), *row.get("ac_disagreement", [])]:
            lines.append(Text(f"    {line}", style="dim"))
    return lines


def render_panel(
    status: SessionStatus, result: ResultStatus | None, panel: PanelInput, *, port: int | None, keys: bool
) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")  # paths wrap whole, never cut with an ellipsis
    limit = f" / limit {fmt_clock(status.time_limit)}" if status.time_limit else ""
    grid.add_row("task", Text(status.task_id + (f"  (your service must listen on port {port})" if port else "")))
    grid.add_row("workspace", Text(status.workspace))
    grid.add_row("spec", Text(str(Path(status.workspace) / "README.md")))
    clock = Text(f"{fmt_clock(status.working_seconds)}{limit} ")
    clock.append("(running)" if status.clock_running else "(paused)", style=None if status.clock_running else "yellow")
    grid.add_row("clock", clock)
    grid.add_row("files changed", Text(str(status.files_changed)))
    recorder = Text(status.recorder_mode)
    if status.recorder_degraded:
        recorder.append(f" (degraded: {status.recorder_degraded})", style="red")
    grid.add_row("recorder", recorder)
    grid.add_row("state", Text(status.state))
    scoring = _scoring_lines(status, result)
    if scoring:
        grid.add_row("scoring", Group(*scoring))
    grid.add_row("", "")
    if panel.mode == "note":
        grid.add_row("note", Text(sanitize_terminal(panel.buffer) + "█"))
        grid.add_row("", Text("Enter saves the note, Esc cancels", style="dim"))
    elif panel.mode == "confirm":
        grid.add_row("confirm", Text(f"{panel.confirm} the session? This cannot be undone [y/N]", style="bold"))
    elif status.state in ("active", "paused"):
        grid.add_row("keys", Text(KEY_HINT if keys else LINE_HINT))
        grid.add_row("", Text(ON_SUBMIT, style="dim"))
    for line in panel.log[-4:]:
        grid.add_row("", Text(sanitize_terminal(line), style="dim"))
    return Panel(grid, title="rgbridge session", subtitle=Text(status.session_id))


@contextmanager
def _cbreak(stream: IO[str]) -> Iterator[bool]:
    if not stream.isatty():
        yield False
        return
    fd = stream.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _read_input(is_tty: bool, timeout: float) -> str | None:
    """Keys typed since the last read (a terminal), or one command line; None when nothing came;
    "\\x04" (end of input) when the line input has ended."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if not ready:
        return None
    if is_tty:  # all pending bytes at once: a pasted note is not split over many redraws
        return os.read(sys.stdin.fileno(), 4096).decode("utf-8", errors="replace")
    line = sys.stdin.readline()
    return "\x04" if line == "" else line.strip()


class PanelSession:
    """One session driven from the panel."""

    def __init__(self, mgr: SessionManager, sid: str, context: CallContext) -> None:
        self.mgr, self.sid, self.context = mgr, sid, context
        self.input = PanelInput()

    def status(self) -> SessionStatus:
        return cast(SessionStatus, VERBS["status"].invoke(self.mgr, self.sid, context=self.context))

    def result(self) -> ResultStatus:
        return cast(ResultStatus, VERBS["result"].invoke(self.mgr, self.sid, context=self.context, wait_seconds=0.0))

    def run(self, verb: str, text: str = "") -> None:
        """Run one session verb; the panel's log says what happened, in words for the person."""
        if verb == "toggle":
            verb = "resume" if self.status().state == "paused" else "pause"
        action = VERBS.get(verb)
        if action is None or action.name in ("status", "result"):
            self.input.log.append(f"unknown command {verb!r}")
            return
        arguments: dict[str, object] = {}
        if action.name == "note":
            arguments["text"] = text
        elif action.name == "quit":
            arguments["reason"] = "quit from the session panel"
        try:
            action.invoke(self.mgr, self.sid, context=self.context, **arguments)
        except SessionError as exc:
            self.input.log.append(f"error: {exc}")
            return
        said = {
            "pause": "paused: the clock is stopped until you resume",
            "resume": "resumed: the clock is running",
            "note": f"note saved: {text}",
            "submit": "submitted: scoring has started",
            "quit": "quit: the session ended without a score",
        }
        self.input.log.append(said.get(action.name, action.name))

    def key(self, chars: str) -> None:
        """Feed typed characters to the panel's state machine."""
        i = 0
        while i < len(chars):
            ch = chars[i]
            i += 1
            panel = self.input
            if panel.mode == "note":
                if ch in "\r\n":
                    panel.mode = "keys"
                    if panel.buffer.strip():
                        self.run("note", panel.buffer.strip())
                    else:
                        panel.log.append("empty note not saved")
                    panel.buffer = ""
                elif ch == "\x1b":
                    if chars[i : i + 1] == "[":  # an arrow or function key: skip its sequence
                        while i < len(chars) and not chars[i].isalpha() and chars[i] != "~":
                            i += 1
                        i += 1
                        continue
                    panel.mode, panel.buffer = "keys", ""
                    panel.log.append("note cancelled")
                elif ch in "\x7f\x08":
                    panel.buffer = panel.buffer[:-1]
                elif ch.isprintable():
                    panel.buffer += ch
            elif panel.mode == "confirm":
                verb, panel.mode, panel.confirm = panel.confirm, "keys", ""
                if ch in "yY":
                    self.run(verb)
                else:
                    panel.log.append(f"{verb} cancelled")
            else:
                command = _KEY_COMMANDS.get(ch.lower())
                if command == "note":
                    panel.mode = "note"
                elif command in ("submit", "quit"):
                    panel.mode, panel.confirm = "confirm", command
                elif command:
                    self.run(command)

    def line(self, command: str) -> None:
        verb, _, rest = command.partition(" ")
        self.run(verb, rest)


def run_panel(mgr: SessionManager, sid: str, context: CallContext, *, port: int | None = None) -> int:
    """Drive a session from the panel until it is scored or quit; the exit code of the command."""
    out = console()
    session = PanelSession(mgr, sid, context)
    stdin_open = True
    with _cbreak(sys.stdin) as is_tty:
        with Live(
            render_panel(session.status(), None, session.input, port=port, keys=is_tty),
            console=out,
            refresh_per_second=8,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            while True:
                status = session.status()
                result = session.result() if status.state in ("submitted", "scored") else None
                live.update(render_panel(status, result, session.input, port=port, keys=is_tty))
                if status.state == "quit" or (result is not None and result.state in ("done", "failed")):
                    break
                if status.state in ("submitted", "scored") or not stdin_open:
                    time.sleep(0.5)
                    continue
                typed = _read_input(is_tty, 0.25)
                if not typed:
                    continue
                if not is_tty and typed == "\x04":
                    stdin_open = False
                elif is_tty:
                    session.key(typed)
                else:
                    session.line(typed)
    final = session.status()
    if final.state == "quit":
        out.print(Text("The session ended without a score; its recording is in " + final.recording))
        return 0
    result = session.result()
    if not is_tty:  # scripts read the outcome as JSON
        summary = {"session": sid, "recording": final.recording, "summary": result.summary}
        out.print_json(json.dumps({**summary, "state": result.state, "message": result.message}))
    return 0 if result.state == "done" else 1
