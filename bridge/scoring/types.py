"""Types all of scoring shares: the profile names, the progress callbacks and a score request."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bridge.errors import ScoringError

#: One scoring profile (docs/strict-rules.md for strict; compat reproduces upstream).
Profile = Literal["strict", "compat"]
PROFILES: tuple[Profile, ...] = ("strict", "compat")
#: What a caller asks for: one profile or both (sessions, `rgbridge score --profile`).
ProfileChoice = Literal["strict", "compat", "both"]
#: A progress line of one scoring job.
ProgressFn = Callable[[str], None]
#: A progress line of a run over many tasks: (task id, message).
TaskProgressFn = Callable[[str, str], None]


def profile_choice(profile: str) -> ProfileChoice:
    """`profile` as a profile choice; a ScoringError names the choices otherwise."""
    for choice in ("strict", "compat", "both"):
        if profile == choice:
            return choice
    raise ScoringError(f"unknown profile {profile!r} (choose strict, compat or both)")


def lone_run_id() -> str:
    """The run id of a score that belongs to no run of its own (`rgbridge score`, a test)."""
    return f"score-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreRequest:
    """What a caller asks of one score of one snapshot (the task and the repo travel beside it;
    how the score runs is the engine's `ScoreOptions`, bridge/scoring/run/engine.py).

    `run_id` tags every container and image the score makes (the `rgbridge.run_id` label the
    sweep and `rgbridge cleanup` select by): a session passes its own id, never one guessed from
    a folder layout; a lone score gets `score-<time>-<pid>`.
    """

    #: where result.json and the profile logs go
    output_dir: Path
    #: the run the score belongs to, e.g. `session-<session id>`
    run_id: str = field(default_factory=lone_run_id)
    profile: ProfileChoice = "both"
    #: reuse a cached result of the same (snapshot, task, grader version, profile)
    use_cache: bool = True
    #: the snapshot's tree hash as the caller recorded it, if it did; the engine notes a mismatch
    snapshot_hash: str | None = None
