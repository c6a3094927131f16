"""Any other agent: `--agent-cmd` is a template split like a shell line (never run by a shell)
whose `{prompt}`, `{workspace}` and `{mcp_config}` are replaced in each word; the MCP config is a
plain `mcpServers` file (the format most clients read). Its stdout is read as a stream-json
event stream when it is one (Claude Code's shape), else kept as is.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from bridge.agents.adapters import claude_code
from bridge.agents.adapters.base import Adapter, AgentError, AttemptSetup, Launch, base_env, config_file

NAME = "command"
FIELDS = ("{prompt}", "{workspace}", "{mcp_config}")


def words(template: str) -> list[str]:
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise AgentError(f"--agent-cmd: {exc}") from None
    if not argv:
        raise AgentError("--agent-cmd is empty (a command with {prompt}, {workspace}, {mcp_config})")
    return argv


def build(setup: AttemptSetup) -> Launch:
    if not setup.agent_cmd:
        raise AgentError("--agent command needs --agent-cmd TEMPLATE")
    _, text = config_file("cursor", setup)
    path = setup.home / "mcp.json"
    values = {"{prompt}": setup.prompt, "{workspace}": str(setup.workspace), "{mcp_config}": str(path)}
    argv = []
    for word in words(setup.agent_cmd):
        for key, value in values.items():
            word = word.replace(key, value)
        argv.append(word)
    env = base_env(ADAPTER, setup)
    if setup.door is not None:  # each API's documented variables point at the gateway
        env.update(door_env(setup.door.url, setup.door.token))
    return Launch(argv=argv, env=env, files={path: text}, cwd=setup.workspace)


def door_env(url: str, token: str) -> dict[str, str]:
    """What an arbitrary agent gets of the model gateway: the base URL and key variables of the
    Anthropic, OpenAI and Gemini SDKs (the placeholder in each key variable)."""
    return {
        "ANTHROPIC_BASE_URL": url,
        "OPENAI_BASE_URL": url + "/v1",
        "GOOGLE_GEMINI_BASE_URL": url,
        "ANTHROPIC_API_KEY": token,
        "OPENAI_API_KEY": token,
        "GEMINI_API_KEY": token,
    }


@dataclass(frozen=True)
class CommandAdapter(Adapter):
    """The adapter whose agent is a template: its program is the template's first word (or
    `--agent-bin`), it prints no version, and the sandbox binds what the template's words name."""

    def locate(self, agent_bin: str | None, agent_cmd: str | None, probe_home: Path) -> tuple[str, str]:
        if not agent_cmd:
            raise AgentError("--agent command needs --agent-cmd TEMPLATE (with {prompt}, {workspace}, {mcp_config})")
        return agent_bin or words(agent_cmd)[0], "unknown"

    def check_runnable(self, binary: str, version: str) -> None:
        if not (shutil.which(binary) or os.access(binary, os.X_OK)):
            raise AgentError(f"--agent-cmd: {binary!r} is not an executable on PATH; no agent was started")

    def resolve(self, binary: str) -> str:
        found = shutil.which(binary)
        if not found:
            raise AgentError(f"{binary}: not found")
        return found

    def program(self, binary: str, agent_cmd: str | None) -> list[str]:
        return words(agent_cmd) if agent_cmd else [binary]


ADAPTER = CommandAdapter(
    name=NAME,
    client="cursor",
    binaries=(),
    wheel=None,
    version_args=(),
    env_allow=("PYTHONPATH", "VIRTUAL_ENV"),  # no key: the run's model gateway holds it
    isolation_env={},
    build=build,
    parse=claude_code.parse,
    installed_by="whatever the command needs",
    takes_command=True,
    offers_bridge_tools=False,
)
