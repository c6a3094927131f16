"""The working-time limit of a session: a timer, armed while the clock runs, that fires when the
time left on the clock is used up (the manager then submits with `signal="time_limit"`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from bridge.sessions.live import Session


def arm_timer(session: Session, on_limit: Callable[[str], None], *, at_least: float = 0.0) -> None:
    """(Re)arm the session's timer for the working time it has left, or at least `at_least`
    seconds; no timer when the task has no limit."""
    disarm_timer(session)
    limit = session.record.time_limit
    if limit <= 0:
        return
    remaining = max(at_least, limit - session.record.clock.elapsed())
    sid = session.record.session_id
    timer = threading.Timer(remaining, lambda: on_limit(sid))
    timer.daemon = True
    session.timer = timer
    timer.start()


def disarm_timer(session: Session) -> None:
    if session.timer is not None:
        session.timer.cancel()
        session.timer = None
