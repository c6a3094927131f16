"""The agent's process: its own process group, output to files, a wall-clock limit that ends the
whole group (SIGTERM, then SIGKILL after a grace period), and a stop the run can pull at any time.

The group matters: the CLI's children (shells it ran, the MCP server it spawned) go with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from bridge.agents.events import MAX_LINE_BYTES, MAX_STREAM_BYTES

GRACE_SECONDS = 5.0


@dataclass
class Ended:
    how: str  # "exit" | "time_limit" | "stopped"
    exit_code: int | None
    seconds: float


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(proc: subprocess.Popen[bytes], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to the group, SIGKILL to what is left after `grace` seconds (the leader included)."""
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            return
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_agent(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    stdout: Path,
    stderr: Path,
    time_limit: float,
    stop: threading.Event,
) -> Ended:
    """Run to exit, the time limit or `stop`; the group is always ended before returning."""
    started = time.monotonic()
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(  # argv from the adapter, no shell
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
        assert proc.stdout is not None
        copier = threading.Thread(target=_copy_stamped, args=(proc.stdout, stdout), daemon=True)
        copier.start()
        how = "exit"
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if stop.is_set():
                how = "stopped"
                break
            if time.monotonic() - started >= time_limit:
                how = "time_limit"
                break
        seconds = time.monotonic() - started
        end_group(proc)  # leftovers of a clean exit too (a server the CLI did not stop)
        copier.join(timeout=10)
    return Ended(how, proc.returncode, round(seconds, 3))


def _copy_stamped(pipe: IO[bytes], path: Path) -> None:
    """The agent's stdout into `path` as it comes, and when each line came into `path.times`
    (one ISO time per line): event streams carry no times of their own, the timeline needs them.
    Past MAX_STREAM_BYTES the rest is read and dropped (the agent never blocks on a full pipe)."""
    written = 0
    with pipe, open(path, "wb") as out, open(times_path(path), "w", encoding="ascii") as times:
        for line in iter(lambda: pipe.readline(MAX_LINE_BYTES), b""):
            if written >= MAX_STREAM_BYTES:
                continue
            written += len(line)
            out.write(line)
            out.flush()
            if line.endswith(b"\n"):
                times.write(datetime.now(UTC).isoformat(timespec="milliseconds") + "\n")
                times.flush()


def times_path(stream: Path) -> Path:
    return stream.with_name(stream.name + ".times")
