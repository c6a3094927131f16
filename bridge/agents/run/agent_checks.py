"""Before any agent of `rgbridge run` starts: the adapter's model key is in the environment (or
`--model-base-url` names an endpoint of the user's), the CLI prints its version (the row records
it) and it is the one `--agent-version` asks for. A refusal leaves no attempt folder behind."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.agents.adapters.base import AgentError
from bridge.agents.adapters.probe import version_matches
from bridge.agents.adapters.registry import adapter as find_adapter

if TYPE_CHECKING:
    from bridge.agents.run.options import RunOptions
    from bridge.agents.run.settings import RunSettings


def check_key(options: RunOptions) -> None:
    """The adapter's model key is in the environment, or `--model-base-url` names an endpoint of
    the user's (which may take another key or none). Checked before anything is written."""
    agent = find_adapter(options.agent)
    if agent.key_env and not options.model_base_url and not any(os.environ.get(k) for k in agent.key_env):
        raise AgentError(
            f"agent {agent.name}: no model key in the environment (set {' or '.join(agent.key_env)}, or give "
            "--model-base-url for an endpoint of your own); no agent was started"
        )


def check_cli(options: RunOptions, settings: RunSettings) -> None:
    """The CLI is there and prints its version (the row records it), the one `--agent-version` asks for."""
    version = settings.agent_version
    settings.adapter.check_runnable(settings.binary, version)
    if options.agent_version and not version_matches(options.agent_version, version):
        raise AgentError(
            f"--agent-version {options.agent_version}: {settings.binary} is version {version!r}; "
            "install that version or pass its binary with --agent-bin"
        )
