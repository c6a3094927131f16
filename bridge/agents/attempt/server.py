"""The attempt's MCP server: a bridge process the run starts before the agent, outside the
agent's process tree (`python -m mcp_server --start-task`, mcp_server/attempt_mode.py).

It opens the attempt's session itself and holds it, recorder and golden-file watch running, from
the session's start until the run ends it after the agent's processes are all gone: one bridge
process owns the session the whole time, whatever the agent does and whenever it connects. The
agent reaches it over streamable HTTP on loopback with its own credential, which calls this one
session and nothing else. The run waits for the server's ready file (with a time limit and the
server's own error when it fails), and ends it with SIGTERM (its standard input, held by the run,
ends too: a run that dies does not leave a server holding the session).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.errors import BridgeError

#: a server that is not listening with its session open by then has failed (a cold start on a
#: busy 2-core machine takes a few seconds: imports, the catalog, staging the golden files)
READY_SECONDS = 120.0
#: after SIGTERM: the server checkpoints the workspace, stops its recorder and lets the session go
END_GRACE_SECONDS = 60.0
STDERR_TAIL_BYTES = 4000


class ServerReady(BaseModel):
    """The ready file the server writes (mode 0600) once its session is open and it listens."""

    model_config = ConfigDict(extra="forbid")

    url: str
    credential: str  # the agent's bearer token: its client credential (bridge/credentials.py)
    session_id: str
    pid: int


class ServerStartError(BridgeError):
    """The attempt's MCP server did not become ready (its own error is in the message)."""


@dataclass
class AttemptServer:
    proc: subprocess.Popen[bytes]
    ready: ServerReady
    stderr: Path
    ready_seconds: float = 0.0  # from its start to its ready file

    @classmethod
    def start(
        cls,
        argv: list[str],
        *,
        env: dict[str, str],
        ready_file: Path,
        stderr: Path,
        stop: threading.Event,
        timeout: float = READY_SECONDS,
    ) -> AttemptServer | None:
        """Start the server and wait for its ready file; None when `stop` was pulled meanwhile
        (the server is ended). ServerStartError, with the server's stderr, when it fails."""
        ready_file.unlink(missing_ok=True)
        stderr.parent.mkdir(parents=True, exist_ok=True)
        with open(stderr, "wb") as err:
            proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
                argv,
                env=env,
                stdin=subprocess.PIPE,  # held open by this process: the server ends when it closes
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # a Ctrl-C on the terminal reaches the run, which ends it in order
            )
        server = cls(proc, ServerReady(url="", credential="", session_id="", pid=proc.pid), stderr)
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if ready_file.is_file():
                try:
                    server.ready = ServerReady.model_validate_json(ready_file.read_text(encoding="utf-8"))
                except (OSError, ValueError, ValidationError) as exc:
                    server.end()
                    raise ServerStartError(f"the attempt's MCP server wrote a bad ready file: {exc}") from None
                ready_file.unlink(missing_ok=True)  # the credential stays with the run and the agent only
                server.ready_seconds = round(time.monotonic() - started, 3)
                return server
            if proc.poll() is not None:
                raise ServerStartError(
                    f"the attempt's MCP server exited ({proc.returncode}) before it was ready: {server.stderr_tail()}"
                )
            if stop.is_set():
                server.end()
                return None
            if time.monotonic() > deadline:
                server.end()
                raise ServerStartError(
                    f"the attempt's MCP server was not ready after {timeout:.0f} s: {server.stderr_tail()}"
                )
            time.sleep(0.02)

    def lost(self) -> str | None:
        """Why the server is gone already (before the run ended it), or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return f"the attempt's MCP server exited ({code}) before the agent ended: {self.stderr_tail()[-500:]}"

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - STDERR_TAIL_BYTES))
                text = fh.read().decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        return text or f"(nothing on its stderr, {self.stderr})"

    def end(self, grace: float = END_GRACE_SECONDS) -> int | None:
        """SIGTERM (and the end of its input), then SIGKILL after `grace`: the session is let go
        either way (a killed holder's lock goes with it). Only the server itself is signalled: a
        scoring process it started lives on in its own session."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        _close(self.proc.stdin)
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _close(pipe: IO[bytes] | None) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError):
            pipe.close()
