"""The machine-wide scoring slots: at most `RGBRIDGE_MAX_JOBS` jobs score at once on the machine,
whatever process and mode scores them (a detached scoring process or the in-process mode,
bridge/sessions/launch.py), because they all share one Docker engine.

A slot is a `flock`ed file in `<cache>/scoring-slots/`: every bridge process of the user sees the
same files, a second open file description never takes a slot another one holds (so threads of
one process count like processes), and the kernel frees a slot whose holder dies. Waiting jobs
take the first slot that frees, in no promised order.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bridge.errors import SessionError
from bridge.locations import cache_dir

#: each scoring run already keeps both profiles busy, so more at once only slow each other down
DEFAULT_MAX_JOBS = 2
#: how often a waiting job tries the slots again
POLL_SECONDS = 0.5


def max_jobs() -> int:
    """How many scoring jobs score at once on this machine (`RGBRIDGE_MAX_JOBS`, at least 1)."""
    raw = os.environ.get("RGBRIDGE_MAX_JOBS", "").strip()
    try:
        return max(1, int(raw)) if raw else DEFAULT_MAX_JOBS
    except ValueError:
        raise SessionError(f"RGBRIDGE_MAX_JOBS must be a whole number, not {raw!r}") from None


def slots_dir() -> Path:
    return cache_dir() / "scoring-slots"


@contextlib.contextmanager
def scoring_slot(limit: int, waiting: Callable[[], None], root: Path | None = None) -> Iterator[None]:
    """Hold one of `limit` machine-wide scoring slots. `waiting` is called once when all are
    taken."""
    folder = root or slots_dir()
    folder.mkdir(parents=True, exist_ok=True)
    told = False
    while True:
        for n in range(limit):
            fd = os.open(folder / f"slot-{n}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            try:
                yield
            finally:
                os.close(fd)
            return
        if not told:
            told = True
            waiting()
        time.sleep(POLL_SECONDS)
