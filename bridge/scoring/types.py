"""Types all of scoring shares: the profile names, the progress callbacks and a score request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """What a caller asks of one score of one snapshot (the task and the repo travel beside it).

    `run_id` tags every container and image the score makes (the `rgbridge.run_id` label the
    sweep and `rgbridge cleanup` select by), so a caller names it: a session passes its own id,
    never one guessed from a folder layout.
    """

    #: the run the score belongs to, e.g. `session-<session id>`
    run_id: str
    #: where result.json and the profile logs go
    output_dir: Path
    #: the snapshot's tree hash as the caller recorded it; a scorer notes a mismatch
    snapshot_hash: str
    profile: ProfileChoice = "both"
    #: reuse a cached result of the same (snapshot, task, grader version, profile)
    use_cache: bool = True
