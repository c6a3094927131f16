"""One row of a run report: the upstream per-repo dict, the bridge's own fields, an agent run's part.

The row is built here and written as JSON (intermediate files, the report's `results`); readers
take the JSON as it is, so the models keep every key they do not declare (`extra="allow"`: the
upstream schema's fields, keys of older files) and serialise to the same JSON, keys in the same
order: `repo_name`, `lang`, the upstream fields, then the bridge's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, Strict, model_serializer

# ints stay ints in the JSON (a float field would write 600 as 600.0); strict: `true` is no number
Number = Annotated[int, Strict()] | Annotated[float, Strict()]


class AgentInfo(BaseModel):
    """The agent of an agent run's row: its adapter, the CLI's version, the model it used."""

    model_config = ConfigDict(extra="allow")

    name: str
    version: str
    model: str | None = None


class AgentErrorInfo(BaseModel):
    """Why an attempt is `agent_error` (bridge/agents/adapters/failures.py): the CLI's failure, not the agent's."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    cls: str = Field(alias="class")
    message: str
    retries: int = 0


class RetriedTry(BaseModel):
    """A try of an attempt that ended `agent_error` and was set aside before the retry (the row's
    `run.retried`): its failure, what it cost, where its folders went."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    cls: str | None = Field(default=None, alias="class")
    message: str | None = None
    cost_usd: Number | None = None
    tokens: dict[str, int | None] | None = None
    agent_seconds: Number | None = None
    attempt: str | None = None  # the try's attempt folder, renamed `a<k>.agent-error-<n>`
    recording: str | None = None


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
    retries: int | None = None  # set by the run once the attempt's retries are over
    retried: list[RetriedTry] | None = None


class ReportRow(BaseModel):
    """One repo's (or one attempt's) row; a field not set is not written."""

    model_config = ConfigDict(extra="allow")

    repo_name: str
    lang: str
    outcome: str | None = None
    agent_error: AgentErrorInfo | None = None
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
        data: dict[str, Any] = self.model_dump(exclude_unset=True, by_alias=True)
        return data
