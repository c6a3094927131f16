"""What crosses between the driver and a Ray node for one attempt, as typed messages.

The driver sends an `AttemptOrder` (what to run and under which of the run's own settings), the
node posts `NodeProgress` lines to the driver's progress box while it runs, and returns a
`NodeReply` (how the attempt ended, its recordings and folder packed, where the node kept them).
Each crosses as plain data and is validated where it arrives: a node's reply is untrusted (a node
of another version, a worker that broke halfway), so a malformed one is refused with a clear
reason (`WireError`: the driver makes it an infra_error row) instead of a KeyError.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bridge.agents.run.prompt import PromptTemplate
from bridge.errors import BridgeError


class WireError(BridgeError):
    """A message between the driver and a node that is not what the protocol says."""


class _Message(BaseModel):
    # strict: a node's reply is untrusted, nothing is coerced (a str is no archive, "1" no number)
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, arbitrary_types_allowed=True)


class AttemptOrder(_Message):
    """Driver → node: one attempt to run, with the run's own prompt and configuration (the rows
    must carry the run's, not the node's)."""

    key: str
    task: str
    number: int = Field(gt=0)
    run_id: str
    task_hash: str
    agent_version: str
    prompt: PromptTemplate
    run_config: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        """As it crosses: its fields, the prompt template as the dataclass it is."""
        return dict(self)


class NodeProgress(_Message):
    """Node → driver (through the progress box): an attempt's state on a node."""

    key: str
    node: str
    state: str

    @classmethod
    def from_item(cls, item: object) -> NodeProgress | None:
        """A drained box item (key, node, state); None when it is not one."""
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            return None
        try:
            return cls.model_validate(dict(zip(("key", "node", "state"), item, strict=True)))
        except ValidationError:
            return None


class PackedRecording(_Message):
    """One session folder of the attempt, packed as `rgbridge recordings pack` packs it
    (bridge/agents/ray/transfer.py `pack_recordings`)."""

    sid: str
    archive: bytes
    sha256: str
    seal: str | None = None


#: how the attempt ended on the node: the node could not set it up, it ran to a row (`entry`),
#: the run stopped it, or it failed with the bridge's error
Ending = Literal["setup_error", "entry", "stopped", "error"]


class NodeReply(_Message):
    """Node → driver: the attempt's end (exactly one of setup_error, entry, stopped, error), its
    recordings and folder packed, and the node folders the entry's paths name."""

    node: str
    setup_error: str | None = None
    entry: dict[str, Any] | None = None
    stopped: str | None = None
    error: str | None = None
    recordings: list[PackedRecording] = Field(default_factory=list)
    folder: bytes = b""
    left_out: list[str] = Field(default_factory=list)
    node_out: str = ""
    node_recordings: str = ""
    attempt_seconds: float | None = None
    node_seconds: float | None = None

    @model_validator(mode="after")
    def _one_ending(self) -> NodeReply:
        given = [name for name in ("setup_error", "entry", "stopped", "error") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"exactly one of setup_error, entry, stopped, error (given: {given or 'none'})")
        if self.entry is not None and not (self.node_out and self.node_recordings):
            raise ValueError("an entry needs the node's folders (node_out, node_recordings)")
        return self

    @property
    def ending(self) -> Ending:
        for name in ("setup_error", "entry", "stopped", "error"):
            if getattr(self, name) is not None:
                return name
        raise AssertionError("validated: one ending")

    def wire(self) -> dict[str, Any]:
        """As it crosses: plain data (the driver validates it again on arrival)."""
        return self.model_dump(mode="python")


def order_from_wire(data: object) -> AttemptOrder:
    """The driver's order as the node receives it."""
    try:
        return AttemptOrder.model_validate(data)
    except ValidationError as exc:
        raise WireError(f"the driver's order is not one this node reads: {_first(exc)}") from None


def reply_from_wire(data: object) -> NodeReply:
    """A node's reply as the driver receives it (untrusted: WireError with the reason)."""
    try:
        return NodeReply.model_validate(data)
    except ValidationError as exc:
        raise WireError(f"the node's reply is malformed: {_first(exc)}") from None


def _first(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    e = errors[0]
    where = ".".join(str(p) for p in e.get("loc", ())) or "message"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {e.get('msg', 'invalid')}{more}"
