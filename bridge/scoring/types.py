"""Types all of scoring shares: the profile names and the progress callbacks."""

from __future__ import annotations

from collections.abc import Callable
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
