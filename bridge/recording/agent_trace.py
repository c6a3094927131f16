"""The agent's steps kept in a recording by `rgbridge run` (`agent/trajectory.json`, ATIF), read
back for the timeline and the report: untrusted like every recording file, so size-capped and
read field by field."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

TRAJECTORY = "agent/trajectory.json"
MAX_BYTES = 32 * 1024 * 1024
MAX_STEPS = 2000


def _text(value: object, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)[:limit]
    return " ".join(text.split())[:limit]


def agent_trace(rec_dir: Path, started: datetime) -> dict[str, Any] | None:
    """The agent and its steps ({t_s, text}) relative to `started`, or None when there is none."""
    path = Path(rec_dir) / TRAJECTORY
    try:
        if path.is_symlink() or path.stat().st_size > MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    found = data.get("agent")
    agent: dict[str, Any] = found if isinstance(found, dict) else {}
    steps: list[dict[str, Any]] = []
    calls = 0
    listed = data.get("steps")
    raw_steps: list[Any] = listed if isinstance(listed, list) else []
    for raw in raw_steps[:MAX_STEPS]:
        if not isinstance(raw, dict) or raw.get("source") != "agent":
            continue
        tools = [c.get("function_name") for c in raw.get("tool_calls") or [] if isinstance(c, dict)]
        calls += len(tools)
        text = ", ".join(_text(t, 80) for t in tools) if tools else _text(raw.get("message", ""))
        t_s = None
        if isinstance(raw.get("timestamp"), str):
            try:
                t_s = round((datetime.fromisoformat(raw["timestamp"]) - started).total_seconds(), 3)
            except (ValueError, TypeError):
                t_s = None
        steps.append({"step": raw.get("step_id"), "t_s": t_s, "text": ("calls " if tools else "says ") + text})
    return {
        "name": _text(agent.get("name", "")),
        "version": _text(agent.get("version", "")),
        "model": _text(agent.get("model_name") or ""),
        "tool_calls": calls,
        "steps": steps,
    }
