"""A parsed agent run as an ATIF trajectory (Agent Trajectory Interchange Format v1.8, specified
in Harbor's rfcs/0001-trajectory-format.md): steps numbered from 1, each with its source and
message, agent steps with tool calls and their observations, final metrics with tokens and cost.

`keep_trajectory` keeps it in the attempt's folder and, with the CLI's own stream, in its recording.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bridge.agents.adapters.events import ParsedRun
from bridge.fs.files import write_json_atomic

SCHEMA_VERSION = "ATIF-v1.8"
#: what of the agent's folder the recording keeps beside the trajectory (confinement.json: how the
#: attempt was confined, sandbox kind and version, binds, limits)
KEPT_FILES = ("stream.jsonl", "stream.jsonl.times", "prompt.txt", "run_config.json", "stderr.log", "confinement.json")


def to_atif(run: ParsedRun, *, session_id: str, agent: str, version: str, extra: dict[str, Any]) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for index, s in enumerate(run.steps, start=1):
        step: dict[str, Any] = {"step_id": index, "source": s.source, "message": s.message}
        if s.timestamp:
            step["timestamp"] = s.timestamp
        if s.source == "agent":
            if s.model:
                step["model_name"] = s.model
            if s.calls:
                step["tool_calls"] = [
                    {"tool_call_id": c.call_id, "function_name": c.name, "arguments": c.arguments} for c in s.calls
                ]
            if s.prompt_tokens is not None or s.completion_tokens is not None:
                step["metrics"] = {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens}
        if s.results:
            known = {c.call_id for c in s.calls}
            step["observation"] = {
                "results": [
                    {"source_call_id": cid if cid in known else None, "content": content} for cid, content in s.results
                ]
            }
        steps.append(step)
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "agent": {"name": agent, "version": version, "model_name": run.model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": run.prompt_tokens,
            "total_completion_tokens": run.completion_tokens,
            "total_cached_tokens": run.cached_tokens,
            "total_cost_usd": run.cost_usd,
            "total_steps": len(steps),
            # ATIF has no field for cache writes or the split of input: kept beside its totals
            "extra": {"tool_calls": run.tool_calls, "tokens": run.token_split()},
        },
        "extra": extra,
    }


def keep_trajectory(atif: dict[str, Any], agent_dir: Path, target: Path) -> None:
    """The trajectory in the attempt's agent folder, and it with the CLI's own stream and what
    the agent was given copied into the recording's agent folder `target`."""
    write_json_atomic(agent_dir / "trajectory.json", atif)
    target.mkdir(parents=True, exist_ok=True)
    for name in KEPT_FILES:
        if (agent_dir / name).is_file():
            shutil.copyfile(agent_dir / name, target / name)
    write_json_atomic(target / "trajectory.json", atif)
