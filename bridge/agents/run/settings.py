"""What every attempt of one `rgbridge run` shares (the agent, its CLI and version, the tasks, the
folders, limits, prompt, configuration and sandbox), built from the run's options on the machine
that runs its attempts (the driver, or each Ray node), and what the report says of the sandbox."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from bridge.agents.adapters.base import BASE_ENV_ALLOW, SERVER_ENV_ALLOW, Adapter
from bridge.agents.adapters.probe import find_cli
from bridge.agents.adapters.registry import adapter as find_adapter
from bridge.agents.confine import Confiner, Limits, ready_sandbox
from bridge.agents.confine.netcheck import network_check, resolve_network
from bridge.agents.gateway.ledger import CostRules
from bridge.agents.gateway.prices import Prices
from bridge.agents.run.options import RunOptions
from bridge.agents.run.prompt import PromptTemplate, bridge_template
from bridge.locations import cache_dir, data_home
from bridge.tasks.catalog import Catalog

if TYPE_CHECKING:
    from bridge.agents.gateway.door import RunGateway


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
    confiner: Confiner | None = None
    #: what else the agent may read (`--agent-bind`, read-only)
    agent_binds: tuple[Path, ...] = ()
    #: one attempt's limits (memory, processes, disk of its folders)
    limits: Limits = field(default_factory=Limits)
    #: `--network` (bridge/agents/confine/network.py): "closed" | "allow" | "host", and the
    #: `--allow-host` names the allow mode's proxy lets through
    network: str = "host"
    allow_hosts: tuple[str, ...] = ()
    #: the run's model gateway (bridge/agents/gateway/), started by the run; None: each attempt
    #: starts one of its own (an attempt run on a Ray node)
    gateway: RunGateway | None = None
    #: the attempt's cost cap and the run's prices (bridge/agents/gateway/ledger.py)
    cost: CostRules = field(default_factory=CostRules)


def declared_sandbox(settings: RunSettings) -> dict[str, Any]:
    """The row's run.sandbox as the run's options declare it (no agent confined by it)."""
    return {"kind": settings.sandbox, "version": "", "confined": False}


def sandbox_metadata(settings: RunSettings) -> dict[str, Any]:
    """What the report's metadata says of the run's confinement."""
    return {
        "sandbox": settings.sandbox,
        "unconfined": settings.sandbox == "none",
        "network": settings.network,
        "allow_hosts": list(settings.allow_hosts),
        "shared_network": settings.network == "host",
    }


def server_env() -> dict[str, str]:
    """What the attempt's MCP server (started by the run, outside the agent's sandbox) needs of
    ours: the same data, caches and engine, HOME and the temp folder, the import path of this
    bridge. Never a token or an API key: the agent's keys stay with the agent."""
    names = (*BASE_ENV_ALLOW, "HOME", "TMPDIR", *SERVER_ENV_ALLOW)
    env = {k: os.environ[k] for k in names if os.environ.get(k)}
    env.update({k: v for k, v in os.environ.items() if k.startswith("RGBRIDGE_") and k not in ("RGBRIDGE_TOKEN",)})
    env["RGBRIDGE_HOME"] = str(data_home())
    env["RGBRIDGE_CACHE"] = str(cache_dir())
    return env


def settings_for(options: RunOptions, catalog: Catalog, output_dir: Path) -> RunSettings:
    agent = find_adapter(options.agent)
    binary, version = find_cli(agent, options.agent_bin, options.agent_cmd, output_dir / ".probe-home")
    confiner = ready_sandbox(options.sandbox)
    network = resolve_network(options.network, confiner.kind, options.allow_hosts)
    if network != "host":
        network_check(confiner)  # a network mode that cannot start here is refused before any agent
    return RunSettings(
        adapter=agent,
        binary=binary,
        agent_version=version,
        catalog=catalog,
        output_dir=output_dir,
        recordings=Path(options.recordings),
        run_id=options.run_id,
        time_limit=options.time_limit,
        profile=options.profile,
        on_exit=options.on_exit,
        model=options.model,
        model_base_url=options.model_base_url,
        agent_cmd=options.agent_cmd,
        server_args=tuple(options.server_args),
        server_env=server_env(),
        # the pre-flight of the sandbox: one that cannot start is refused before any agent runs
        sandbox=confiner.kind,
        confiner=confiner,
        agent_binds=tuple(Path(p) for p in options.agent_binds),
        limits=Limits(**options.limits),
        network=network,
        allow_hosts=tuple(options.allow_hosts),
        cost=CostRules(options.max_cost_per_attempt, Prices.of(options.prices)),
    )
