"""Build containers a process leaves compiling bytecode when it exits, waited for and removed by a
detached process of their own, so `rgbridge score` ends with its result.

A set's bytecode is compiled after its score, off the score's path (``env_volume.CheckContainer``).
A long-lived process (the MCP server, ``evaluate``) waits for the compile in a thread and removes
the container when it ends; a short one (``rgbridge score``) would wait for it at exit. Instead,
``hand_over`` starts ``python -m bridge.scoring.images.sets.reaper CONTAINER SECONDS`` in a new
session for each compile still running: it waits for that container at most SECONDS, then
removes it (a compile cut short leaves only whole ``.pyc`` files, each written at once).
The container keeps its volume in use (never evicted) until it is removed."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import requests
from docker.errors import DockerException

_guard = threading.Lock()
_idle = threading.Condition(_guard)
#: container id -> monotonic deadline of the compiles this process still waits for
_running: dict[str, float] = {}
#: containers being started in the background that will be watched (``starting``)
_starts = 0
#: how long ``hand_over`` waits for them
START_WAIT = 15.0


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """A compile container being started off the caller's thread, to be named to
    ``watch_compile``: ``hand_over`` waits for it rather than leave it without a reaper."""
    global _starts
    with _guard:
        _starts += 1
    try:
        yield
    finally:
        with _guard:
            _starts -= 1
            _idle.notify_all()


def watch_compile(container_id: str, deadline: float) -> None:
    with _guard:
        _running[container_id] = deadline


def compile_done(container_id: str) -> None:
    with _guard:
        _running.pop(container_id, None)


def hand_over() -> list[str]:
    """At exit: a detached reaper for each compile still running; the ids handed over."""
    with _guard:
        _idle.wait_for(lambda: _starts == 0, timeout=START_WAIT)
        pending = dict(_running)
        _running.clear()
    for container_id, deadline in pending.items():
        seconds = max(5.0, deadline - time.monotonic())
        with contextlib.suppress(OSError):
            subprocess.Popen(
                [sys.executable, "-m", "bridge.scoring.images.sets.reaper", container_id, f"{seconds:.0f}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the terminal's process group: Ctrl-C there is not its
                close_fds=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            )
    return list(pending)


def reap(container_id: str, seconds: float) -> None:
    """Wait for the container at most ``seconds``, then remove it (gone already: nothing to do)."""
    from bridge.scoring.sandbox.containers import remove_container, wait_with_timeout
    from bridge.scoring.sandbox.docker_client import get_client

    client = get_client()
    try:
        container = client.containers.get(container_id)
    except (DockerException, requests.RequestException):
        return
    with contextlib.suppress(DockerException, requests.RequestException):
        wait_with_timeout(container, seconds)
    with contextlib.suppress(DockerException, requests.RequestException):
        remove_container(container)


if __name__ == "__main__":
    reap(sys.argv[1], float(sys.argv[2]))
