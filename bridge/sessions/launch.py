"""Where a submitted session's job scores: the one launcher of scoring jobs, in one of two modes.

- detached (the default, the Docker engine): a scoring process of its own, out of reach of the
  client's signals (bridge/sessions/score_process.py);
- in-process: a grader given to `SessionManager` as a Python callable (tests, embedders) scores
  in a thread of this process, since a callable cannot cross into another process. The thread is
  not a daemon unless told (`finish_at_exit=False`): a process asked to end finishes and seals
  the scores it started instead of dropping them half-written.

Both then take the same path (bridge/sessions/jobs.py `score_in_slot`): one of the machine-wide
`RGBRIDGE_MAX_JOBS` slots (bridge/sessions/slots.py), then `run_job`, which writes the same
files and events.
"""

from __future__ import annotations

import threading
from typing import Literal

from bridge.sessions import jobs, score_process
from bridge.sessions.live import Session
from bridge.sessions.models import Scorer

ScoringMode = Literal["detached", "in_process"]


def scoring_mode(in_process: Scorer | None) -> ScoringMode:
    return "detached" if in_process is None else "in_process"


def start_job(
    session: Session, in_process: Scorer | None, *, finish_at_exit: bool = True, hold_for_log: bool = False
) -> None:
    """Score the session's queued job: in a detached scoring process when `in_process` is None,
    else with that grader in a thread of this process. `finish_at_exit` (in-process): the process
    waits for the job before it ends; False leaves it to be resumed by the next bridge that
    attaches the session (`rgbridge submit --timeout`). `hold_for_log` (detached): the MCP call
    that submitted is still to be logged into the recording (`score_process.finish_hand_off`)."""
    if in_process is None:
        score_process.hand_off(session, hold_for_log=hold_for_log)
        return
    session.job_done.clear()
    thread = threading.Thread(
        target=jobs.score_in_slot,
        args=(session, in_process),
        name=f"score-{session.record.session_id}",
        daemon=not finish_at_exit,
    )
    session.job_thread = thread
    thread.start()
