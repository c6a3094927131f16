"""An attempt's state on disk (`state.json` in its folder): its phase and what each phase recorded.

The run writes it at every step of an attempt (bridge/agents/attempt/lifecycle.py) so that `--resume` knows
where the attempt stood: a file that is missing or unreadable is an attempt not started, keys an
older bridge wrote that this one does not know are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.fs.files import write_json_atomic

# starting -> running -> stopped (redone on resume) | agent_done -> submitted -> scored;
# agent_done ends in abandoned (--on-exit abandon) or agent_error (the CLI failed) instead.
Phase = Literal["starting", "running", "stopped", "agent_done", "submitted", "scored", "abandoned", "agent_error"]


class AttemptState(BaseModel):
    """What an attempt recorded so far; a field is None until its phase wrote it."""

    model_config = ConfigDict(extra="ignore")

    phase: Phase | None = None
    started_at: float | None = None  # epoch seconds, when the attempt started
    session_id: str | None = None
    server_seconds: float | None = None  # the attempt server's start to its ready file
    server_end_seconds: float | None = None  # how long ending the server took
    server_lost: str | None = None  # why the server was gone before the agent ended
    ended: str | None = None  # how the agent ended: exit | time_limit | resource_limit | stopped
    exit_code: int | None = None
    agent_seconds: float | None = None
    agent_ended_at: float | None = None  # epoch seconds
    sandbox: dict[str, Any] | None = None  # the row's run.sandbox: how the agent was confined
    submitted_by: str | None = None  # agent | time_limit | agent_exit | resource_limit
    scoring_seconds: float | None = None
    agent_error: dict[str, Any] | None = None  # the CLI's failure (bridge/agents/adapters/failures.py)

    @classmethod
    def load(cls, path: Path) -> AttemptState:
        """The state in `path`; an empty state if it is missing or malformed."""
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError):
            return cls()

    def updated(self, **fields: Any) -> AttemptState:
        """This state with `fields` set (validated; an unknown name is a bug, not an old file)."""
        unknown = set(fields) - set(type(self).model_fields)
        if unknown:
            raise KeyError(f"not attempt state fields: {sorted(unknown)}")
        return type(self).model_validate({**self.model_dump(exclude_unset=True), **fields})

    def save(self, path: Path) -> None:
        """Written atomically, with only the fields that were set (as the phases wrote them)."""
        write_json_atomic(path, self.model_dump(mode="json", exclude_unset=True))
