"""One row of a run report: the upstream per-repo dict, the bridge's own fields, an agent run's part.

The row is built here and written as JSON (intermediate files, the report's `results`); readers
take the JSON as it is, so the models keep every key they do not declare (`extra="allow"`: the
upstream schema's fields, keys of older files) and serialise to the same JSON, keys in the same
order: `repo_name`, `lang`, the upstream fields, then the bridge's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

# ints stay ints in the JSON (a float field would write 600 as 600.0)
Number = int | float


class AgentInfo(BaseModel):
    """The agent of an agent run's row: its adapter, the CLI's version, the model it used."""

    model_config = ConfigDict(extra="allow")

    name: str
    version: str
    model: str | None = None


class AgentRunInfo(BaseModel):
    """How an attempt ran (the row's `run`): its session, how the agent ended, times, tokens, cost."""

    model_config = ConfigDict(extra="allow")

    session_id: str
    recording: str
    ended: str | None = None
    exit_code: int | None = None
    submitted_by: str
    wall_seconds: Number
    agent_seconds: Number
    scoring_seconds: Number
    overhead_seconds: Number
    tool_calls: int
    steps: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    tokens: dict[str, int | None]
    cost_usd: Number | None = None
    trajectory: str
    errors: list[str]
    prompt: str
    prompt_hash: str
    time_limit_seconds: Number
    config_hash: str | None = None
    sandbox: dict[str, Any]


class ReportRow(BaseModel):
    """One repo's (or one attempt's) row; a field not set is not written."""

    model_config = ConfigDict(extra="allow")

    repo_name: str
    lang: str
    outcome: str | None = None
    agent_error: dict[str, Any] | None = None  # bridge/agents/failures.py: the CLI's failure
    rgbridge: dict[str, Any] | None = None  # both profiles in full, hashes, grader version
    agent: AgentInfo | None = None
    attempt: int | None = None
    contaminated: bool | None = None
    run: AgentRunInfo | None = None

    @model_serializer(mode="wrap")
    def _upstream_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        upstream = [k for k in self.__pydantic_extra__ or {} if k in data]
        head = {k: data[k] for k in ("repo_name", "lang", *upstream) if k in data}
        return {**head, **{k: v for k, v in data.items() if k not in head}}

    def to_json(self) -> dict[str, Any]:
        """The row as its JSON object (only the fields that were set, in the report's key order; values
        as they were given, so a NaN or an int is written as before)."""
        data: dict[str, Any] = self.model_dump(exclude_unset=True)
        return data
