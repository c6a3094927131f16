"""Where an attempt of a run in progress stands, from its folder (`attempts/<task>/a<k>/`): queued
(no state yet), running (with the time since it started and the last tool call in the agent's
event stream), scored or errored. Read on every poll of the run page.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bridge.agents.attempt.state import AttemptState
from bridge.view.catalog import read_bytes

#: bytes read from the end of the agent's event stream to find its last tool call
TAIL_BYTES = 65536
RUNNING = ("starting", "running", "stopped", "agent_done", "submitted")


def _tool_of(obj: Any, depth: int = 0) -> str | None:
    """The name of the last tool call in one stream event: Claude Code's `tool_use` blocks, the
    Responses API's `function_call`, Codex's `mcp_tool_call` / `command_execution` items."""
    if depth > 6:
        return None
    found: str | None = None
    if isinstance(obj, dict):
        kind = obj.get("type")
        if kind in ("tool_use", "function_call", "mcp_tool_call") and isinstance(
            obj.get("name") or obj.get("tool"), str
        ):
            found = str(obj.get("name") or obj.get("tool"))
        elif kind == "command_execution" and isinstance(obj.get("command"), str):
            found = f"shell: {obj['command']}"
        for value in obj.values():
            found = _tool_of(value, depth + 1) or found
    elif isinstance(obj, list):
        for value in obj[:200]:
            found = _tool_of(value, depth + 1) or found
    return found


def last_tool_call(folder: Path) -> str | None:
    """The last tool call the agent's stream (`agent/stream.jsonl`) shows so far."""
    path = folder / "agent" / "stream.jsonl"
    try:
        size = path.stat().st_size
    except OSError:
        return None
    data = read_bytes(folder, "agent/stream.jsonl", limit=size + 1) if size <= TAIL_BYTES else None
    if data is None and size > TAIL_BYTES:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            fh.seek(size - TAIL_BYTES)
            data = fh.read(TAIL_BYTES)
    last = None
    for line in (data or b"").splitlines():
        try:
            found = _tool_of(json.loads(line))
        except ValueError:
            continue
        last = found or last
    return last[:200] if last else None


def load_state(run: Path, folder: Path) -> AttemptState | None:
    """The attempt's `state.json`, if it is a regular file of the run folder that parses."""
    data = read_bytes(run, str(folder.relative_to(run) / "state.json"))
    if data is None:
        return None
    try:
        return AttemptState.model_validate_json(data)
    except ValueError:
        return None


def attempt_status(run: Path, folder: Path, now: float) -> dict[str, Any] | None:
    """The status fields of the run page's row for an attempt without a row yet; None: queued."""
    state = load_state(run, folder)
    if state is None or state.phase is None:
        return None
    status = "errored" if state.phase == "agent_error" else "scored" if state.phase == "scored" else "running"
    elapsed = now - state.started_at if state.started_at is not None and status == "running" else None
    return {
        "status": status,
        "phase": state.phase,
        "elapsed_seconds": round(elapsed, 1) if elapsed is not None else state.agent_seconds,
        "last_tool": last_tool_call(folder) if status == "running" else None,
        "error_class": str((state.agent_error or {}).get("class") or "unknown")[:60] if status == "errored" else None,
    }
