"""Types all of scoring shares: the profile names, the progress callbacks and a score request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: One scoring profile (docs/strict-rules.md for strict; compat reproduces upstream).
Profile = Literal["strict", "compat"]
PROFILES: tuple[Profile, ...] = ("strict", "compat")
#: What a caller asks for: one profile or both (sessions, `rgbridge score --profile`).
ProfileChoice = Literal["strict", "compat", "both"]
#: A progress line of one scoring job.
ProgressFn = Callable[[str], None]
#: A progress line of a run over many tasks: (task id, message).
TaskProgressFn = Callable[[str, str], None]


@dataclass(frozen=True)
class ScoreRequest:
    """What a caller of the engine asks for besides the task and the repo: the run the
    containers are labelled with, the profiles, where the result goes, and the options."""

    run_id: str
    profile: ProfileChoice = "both"
    output_dir: Path | None = None
    wheelhouse: Path | None = None
    use_cache: bool = True
