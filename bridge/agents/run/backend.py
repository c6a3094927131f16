"""Where a run's attempts run: the `AgentBackend` protocol the runner drives, whatever the backend.

Like scoring's `Backend` (bridge/scoring/run/backend.py): the runner (bridge/agents/run/runner.py)
checks, prepares, sizes its pool and makes its attempts through this protocol and never asks
for a backend by name. Two implement it: `LocalAttempts` (bridge/agents/run/local.py: here,
through the run's model gateway) and `RayAttempts` (bridge/agents/ray/driver.py: one Ray task per
attempt on a node offering `agent`). Their names are scoring's (`BackendName`), one place.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar, Protocol

from bridge.agents.adapters.failures import Failure
from bridge.agents.attempt.lifecycle import Attempt
from bridge.agents.run.settings import RunSettings
from bridge.scoring.run.backend import BackendName
from bridge.tasks.model import Task

#: called with the attempt's key when the provider refuses the run's key (the run stops)
OnAuth = Callable[[str, Failure], None]


class AgentBackend(Protocol):
    """What runs one run's attempts."""

    name: ClassVar[BackendName]

    def check(self) -> None:
        """Before the prompt and the settings: what this backend needs of this machine (locally,
        the model key; on Ray the nodes are checked in `prepare`, they hold the keys)."""
        ...

    def prepare(self, settings: RunSettings, *, spent: float, on_auth: OnAuth) -> RunSettings:
        """Before any attempt: what runs them set up and checked (the run's model gateway, or the
        cluster and its nodes); the settings the attempts get. `spent`: what the run's earlier
        part cost (the cost cap counts it)."""
        ...

    def workers(self) -> int:
        """Attempts the run keeps in flight."""
        ...

    def attempt(self, settings: RunSettings, task: Task, number: int, stop: threading.Event) -> Attempt:
        """One attempt, to be run (`Attempt.run()`) in one of the run's threads."""
        ...

    def close(self) -> None:
        """After the run (or its Ctrl-C): what `prepare` started, stopped."""
        ...
