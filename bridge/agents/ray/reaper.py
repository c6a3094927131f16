"""What is left of an attempt whose Ray worker died: `python -m bridge.agents.ray.reaper PID ROOT`.

Started beside each attempt a Ray node runs (bridge/agents/ray/node.py), in a session of its
own so it outlives the worker. The agent runs in a process group of its own too, so a worker
killed by SIGKILL (a forced cancel on Ctrl-C, a node taken down, the out-of-memory killer)
would leave it running. While the worker PID lives and ROOT (the attempt's private folder)
exists, the reaper waits; when the worker is gone with ROOT still there, it kills every process
of this user working in ROOT (its cwd there, or ROOT in its command line or environment: the
agent, its shells, the MCP server it launched), removes ROOT and the scoring containers whose
owner died (bridge/scoring/run/runner.py `sweep_stale`). A worker that ends the attempt itself
removes ROOT first, and the reaper then just exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bridge.fs.files import pid_alive

POLL_SECONDS = 0.5


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet waited for, does not)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 20)
    except OSError:
        return b""


def working_in(root: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """PIDs (other than this one and `exclude`) whose cwd is under `root` or that name it in argv
    or environ."""
    needle = root.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (os.getpid(), *exclude):
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            cwd = ""
        if (
            cwd == root
            or cwd.startswith(root + os.sep)
            or needle in _read(f"/proc/{entry}/cmdline")
            or needle in _read(f"/proc/{entry}/environ")
        ):
            found.append(int(entry))
    return found


def reap(root: str) -> int:
    """Kill what works in `root` (a few rounds: a dying shell may have forked), then remove it."""
    killed = 0
    for _ in range(5):
        pids = working_in(root)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(POLL_SECONDS)
    shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(Exception):  # best effort: the next attempt on this node sweeps too
        from bridge.scoring.run.runner import sweep_stale
        from bridge.scoring.sandbox.docker_client import get_client

        sweep_stale(get_client())
    return killed


def settle(root: str, exclude: tuple[int, ...] = (), timeout: float = 30.0) -> list[int]:
    """Wait until no process works in `root` (an attempt's detached scoring process finishing
    its clean-up), then kill what is left after `timeout`; the PIDs killed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not working_in(root, exclude):
            return []
        time.sleep(0.2)
    left = working_in(root, exclude)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def start_reaper(root: Path) -> int | None:
    """A reaper for the attempt in `root`, watching this process (the Ray worker); its PID.
    Started through a short-lived parent, so it is no child of the worker: Ray kills a worker's
    children with it (a forced cancel), and the reaper must outlive the worker to do its job."""
    launch = (
        "import subprocess, sys; d = subprocess.DEVNULL; "
        "print(subprocess.Popen(sys.argv[1:], stdin=d, stdout=d, stderr=d, start_new_session=True).pid)"
    )
    argv = [sys.executable, "-m", "bridge.agents.ray.reaper", str(os.getpid()), str(root)]
    try:
        out = subprocess.run([sys.executable, "-c", launch, *argv], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    pid = out.stdout.strip()
    return int(pid) if out.returncode == 0 and pid.isdigit() else None


def stop_reaper(pid: int | None) -> None:
    """The attempt ended in its worker, which removed `root`: the reaper exits by itself within
    a poll; told at once here."""
    if pid is not None and alive(pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def main(argv: list[str]) -> int:
    pid, root = int(argv[0]), os.path.realpath(argv[1])
    while alive(pid) and os.path.isdir(root):
        time.sleep(POLL_SECONDS)
    if os.path.isdir(root):
        reap(root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
