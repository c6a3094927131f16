"""The agent's process: started in its sandbox (bridge/agents/confine/), output to files, a
wall-clock limit, the attempt's resource limits and a stop the run can pull at any time; when
`run_agent` returns, no process of the attempt is alive.

Ending: SIGTERM to the attempt's processes, SIGKILL after a grace period; a limit hit ends it at
once. Under `--sandbox none` the CLI's process group is what is ended (its children, the shells
it ran, go with it; a process that left the group is not found).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bridge.agents.adapters.events import MAX_LINE_BYTES, MAX_STREAM_BYTES
from bridge.agents.confine import Confinement, Confiner
from bridge.agents.confine.none import NoConfiner
from bridge.agents.confine.usage import DiskWatch

GRACE_SECONDS = 5.0
WAIT_SECONDS = 0.2


#: the exit status a shell, bubblewrap's init or Docker gives a process killed by a signal: 128 + N
SIGNALLED = 128


@dataclass
class Ended:
    how: str  # "exit" | "time_limit" | "resource_limit" | "stopped"
    exit_code: int | None
    seconds: float
    limit: str | None = None  # the limit hit: "memory" | "pids" | "workspace_bytes"
    confinement: dict[str, Any] = field(default_factory=dict)  # kind, version, binds, limits


def run_agent(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    stdout: Path,
    stderr: Path,
    time_limit: float,
    stop: threading.Event,
    sandbox: Confiner | None = None,
    confinement: Confinement | None = None,
) -> Ended:
    """Run to exit, the time limit, a resource limit or `stop`; everything of the attempt is
    ended before returning. Without a sandbox (or kind "none") the agent runs unconfined."""
    sandbox = sandbox or NoConfiner()
    confined = sandbox.kind != "none"
    described = sandbox.describe(confinement)
    started = time.monotonic()
    with open(stderr, "wb") as err:
        running = sandbox.start(argv, env=env, cwd=cwd, stderr=err, confinement=confinement)
        how, limit, grace = "exit", None, GRACE_SECONDS
        try:
            copier = threading.Thread(target=_copy_stamped, args=(running.stdout, stdout), daemon=True)
            copier.start()
            roots = confinement.read_write if confined and confinement is not None else ()
            disk_limit = confinement.limits.workspace_bytes if confinement is not None else 0
            with DiskWatch(roots, disk_limit) as disk:
                while running.wait(WAIT_SECONDS) is None:
                    hit = running.limit_hit() or ("workspace_bytes" if disk.hit.is_set() else None)
                    if hit is not None:
                        how, limit, grace = "resource_limit", hit, 0.0
                        break
                    if stop.is_set():
                        how = "stopped"
                        break
                    if time.monotonic() - started >= time_limit:
                        how = "time_limit"
                        break
                seconds = time.monotonic() - started
        except BaseException:
            running.end(0.0)  # whatever went wrong here, nothing of the attempt outlives it
            raise
        code = running.end(grace)
        if confined and code is not None and SIGNALLED < code <= SIGNALLED + 64:
            # bubblewrap's init and Docker report a main process killed by signal N as 128 + N;
            # the run reads the kill as the unconfined Popen reports it (-N): a crash, not an exit
            code = SIGNALLED - code
        if how == "exit" and code != 0 and confined:
            # the kernel killed the main process (OOM) or refused its fork just before the exit
            late = running.limit_hit()
            if late is not None:
                how, limit = "resource_limit", late
        copier.join(timeout=10)
    described["enforced_by"] = running.enforced_by
    return Ended(how, code, round(seconds, 3), limit, described)


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
