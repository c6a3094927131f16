"""The agent adapters by name (`rgbridge run --agent NAME`): one module each (the CLIs, and the
library agents of bridge/agents/adapters/library.py)."""

from __future__ import annotations

from bridge.agents.adapters import (
    antigravity,
    claude_code,
    codex,
    command,
    copilot,
    cursor_agent,
    deepcode,
    gemini,
    metagpt,
    ms_agent,
    qwen_agent,
)
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
        metagpt.ADAPTER,
        qwen_agent.ADAPTER,
        ms_agent.ADAPTER,
        deepcode.ADAPTER,
    )
}
#: the library agents' frameworks by adapter name (`rgbridge agents install NAME`)
FRAMEWORKS = {a.name: a.library for a in ADAPTERS.values() if a.library is not None}


def adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r} (choose from {', '.join(ADAPTERS)})") from None
