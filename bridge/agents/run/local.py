"""The local backend of agent runs (`rgbridge run --backend local`): every attempt here, in the
runner's threads, its model calls through the run's one model gateway (bridge/agents/gateway/)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import ClassVar

from bridge.agents.attempt.lifecycle import Attempt
from bridge.agents.gateway.door import RunGateway
from bridge.agents.run.agent_checks import check_key
from bridge.agents.run.backend import OnAuth
from bridge.agents.run.options import RunOptions
from bridge.agents.run.settings import RunSettings
from bridge.scoring.run.backend import BackendName
from bridge.tasks.model import Task


class LocalAttempts:
    """Attempts run here (bridge/agents/run/backend.py `AgentBackend`)."""

    name: ClassVar[BackendName] = "local"

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.gateway: RunGateway | None = None

    def check(self) -> None:
        check_key(self.options)

    def prepare(self, settings: RunSettings, *, spent: float, on_auth: OnAuth) -> RunSettings:
        self.gateway = RunGateway(
            self.options.model_base_url,
            max_cost=self.options.max_cost,
            rules=settings.cost,
            spent=spent,
            on_auth=on_auth,
        )
        self.gateway.__enter__()
        return replace(settings, gateway=self.gateway)

    def workers(self) -> int:
        return self.options.workers

    def attempt(self, settings: RunSettings, task: Task, number: int, stop: threading.Event) -> Attempt:
        return Attempt(settings, task, number, stop)

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.__exit__(None, None, None)
            self.gateway = None
