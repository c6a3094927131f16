"""The agent adapters by name (`rgbridge run --agent NAME`): one module each."""

from __future__ import annotations

from bridge.agents.adapters import antigravity, claude_code, codex, command, copilot, cursor_agent, gemini
from bridge.agents.adapters.base import Adapter, AgentError

ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        claude_code.ADAPTER,
        codex.ADAPTER,
        cursor_agent.ADAPTER,
        gemini.ADAPTER,
        copilot.ADAPTER,
        antigravity.ADAPTER,
        command.ADAPTER,
    )
}


def adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r} (choose from {', '.join(ADAPTERS)})") from None
