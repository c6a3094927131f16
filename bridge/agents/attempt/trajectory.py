"""A parsed agent run as an ATIF trajectory (Agent Trajectory Interchange Format v1.8, specified
in Harbor's rfcs/0001-trajectory-format.md): steps numbered from 1, each with its source and
message, agent steps with tool calls and their observations, final metrics with tokens and cost."""

from __future__ import annotations

from typing import Any

from bridge.agents.adapters.events import ParsedRun

SCHEMA_VERSION = "ATIF-v1.8"


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
