"""What every attempt of one `rgbridge run` shares (the agent, its CLI and version, the tasks, the
folders, limits, prompt, configuration and sandbox), and what the report says of the sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bridge.agents.adapters.base import Adapter
from bridge.agents.confine import Limits, Sandbox
from bridge.agents.run.prompt import PromptTemplate, bridge_template
from bridge.tasks.catalog import Catalog


@dataclass(frozen=True)
class RunSettings:
    """What every attempt of one run shares."""

    adapter: Adapter
    binary: str
    agent_version: str
    catalog: Catalog
    output_dir: Path
    recordings: Path
    run_id: str
    time_limit: float
    profile: str
    on_exit: Literal["submit", "abandon"] = "submit"
    model: str | None = None
    model_base_url: str | None = None
    agent_cmd: str | None = None
    server_args: tuple[str, ...] = ()  # task source options passed to the attempt's MCP server
    server_env: dict[str, str] = field(default_factory=dict)
    # issue 31: the prompt template (bridge/agents/run/prompt.py) and the run's configuration (runner.run_config)
    prompt: PromptTemplate = field(default_factory=bridge_template)
    run_config: dict[str, Any] = field(default_factory=dict)
    #: how the agent is confined (bridge/agents/confine/): the kind the pre-flight resolved
    #: ("bwrap" | "docker" | "none") and the sandbox itself (None: unconfined)
    sandbox: str = "none"
    confiner: Sandbox | None = None
    #: what else the agent may read (`--agent-bind`, read-only)
    agent_binds: tuple[Path, ...] = ()
    #: one attempt's limits (memory, processes, disk of its folders)
    limits: Limits = field(default_factory=Limits)


def declared_sandbox(settings: RunSettings) -> dict[str, Any]:
    """The row's run.sandbox as the run's options declare it (no agent confined by it)."""
    return {"kind": settings.sandbox, "version": "", "confined": False}


def sandbox_metadata(settings: RunSettings) -> dict[str, Any]:
    """What the report's metadata says of the run's confinement."""
    return {"sandbox": settings.sandbox, "unconfined": settings.sandbox == "none"}
