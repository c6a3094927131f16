"""No sandbox (`--sandbox none`): the agent runs on the host as the caller, as before issue 30.
Its process group is ended with the attempt (SIGTERM, then SIGKILL after the grace); a process
that left the group (setsid) is not found, no limit applies, and the run marks its rows
`unconfined`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from bridge.agents.confine.model import Confinement, SandboxError


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the group, SIGKILL to what is left after `grace` seconds (the leader included)."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace, 1.0))


class ProcessRunning:
    """An attempt whose main process is a child of this one (its stdout a pipe to us)."""

    def __init__(self, proc: subprocess.Popen[bytes], enforced_by: str) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.stdout: IO[bytes] = proc.stdout
        self.enforced_by = enforced_by

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class GroupRunning(ProcessRunning):
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(proc, "none")

    def limit_hit(self) -> str | None:
        return None

    def end(self, grace: float) -> int | None:
        end_group(self.proc, grace)  # leftovers of a clean exit too (a server the CLI did not stop)
        return self.proc.returncode


class NoConfiner:
    kind = "none"

    def version(self) -> str:
        return "-"

    def check(self) -> None:
        return None

    def describe(self, confinement: Confinement | None) -> dict[str, Any]:
        return {"kind": self.kind, "version": "-", "binds": {}, "limits": {}}

    def start(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, stderr: IO[bytes], confinement: Confinement | None
    ) -> GroupRunning:
        try:
            proc = subprocess.Popen(  # argv from the adapter, no shell
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"{argv[0]}: cannot start: {exc}") from None
        return GroupRunning(proc)
