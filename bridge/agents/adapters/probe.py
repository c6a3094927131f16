"""The agent's CLI on this machine: its binary and the version it prints (the run's pre-flight,
its settings and each Ray node's check ask the same way), and whether a version line is the one
`--agent-version` asks for."""

from __future__ import annotations

import re
from pathlib import Path

from bridge.agents.adapters.base import Adapter


def find_cli(adapter: Adapter, agent_bin: str | None, agent_cmd: str | None, probe_home: Path) -> tuple[str, str]:
    """(binary, version) of the agent's CLI on this machine, as its adapter finds it (`locate`:
    `--agent-bin` or its own binary, and the version it prints with `probe_home` as its HOME and
    TMPDIR); the run's settings and each Ray node's check ask the same way."""
    return adapter.locate(agent_bin, agent_cmd, probe_home)


_VERSION = re.compile(r"\d+(?:\.\d+)+(?:[-+.][0-9A-Za-z.]+)?")


def version_matches(wanted: str, line: str) -> bool:
    """`2.1.332` matches the line `2.1.332 (Claude Code)` and `codex-cli 2.1.332`; never a prefix
    (`2.1` is not `2.1.332`)."""
    wanted = wanted.strip()
    return bool(wanted) and (wanted == line.strip() or wanted in _VERSION.findall(line))
