"""What a verb is (bridge/sessions/verbs.py holds the table): its declaration with typed
arguments and result model, the `CallContext` an adapter gives a call, and the events a call
yields before its answer (`Opened`, `Progress`).

A verb call is a generator: `Verb.invoke` runs it to the end; the MCP adapter runs each step
off its event loop and acts on the events in between. Who calls (client, submit signal, where
a workspace argument leads) comes from the adapter, never from the caller's arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from pydantic import BaseModel

from bridge.errors import PathError
from bridge.sessions.models import ClientInfo, Signal

if TYPE_CHECKING:
    from bridge.sessions.manager import SessionManager

#: default of an argument that must be given
REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One argument of a verb besides the session id."""

    name: str
    type: Any
    default: Any
    help: str


@dataclass(frozen=True)
class Progress:
    """A long poll is still waiting: `elapsed` of `total` seconds."""

    elapsed: float
    total: float
    message: str


@dataclass(frozen=True)
class Opened:
    """A session now exists (start): the adapter records who owns it before the call goes on."""

    session_id: str


Event = Progress | Opened
Steps = Generator[Event, None, BaseModel]


class WorkspaceChoice(Protocol):
    @property
    def path(self) -> Path: ...
    @property
    def source(self) -> str: ...


@dataclass(frozen=True)
class GivenWorkspace:
    path: Path
    source: str = "tool argument"


def _as_given(argument: str | None) -> WorkspaceChoice:
    """Without an adapter's rule, a start's workspace argument is the folder itself."""
    if not argument:
        raise PathError("no workspace given")
    return GivenWorkspace(Path(argument))


@dataclass(frozen=True)
class CallContext:
    """Who calls a verb and from where, as the adapter knows it."""

    client: ClientInfo = field(default_factory=ClientInfo)
    protocol: str | None = None
    #: how a submit reaches the bridge (recorded with the submission)
    signal: Signal = "mcp"
    #: a start's `workspace` argument -> the folder and which configuration chose it
    locate: Callable[[str | None], WorkspaceChoice] = _as_given
    #: a root the new workspace must stay inside (re-checked when the session is created)
    within: Path | None = None
    #: a start may seed a workspace that already has files (the CLI's --allow-nonempty; never MCP)
    allow_nonempty: bool = False


@dataclass(frozen=True)
class Verb:
    name: str  # the panel / CLI word
    tool: str  # the MCP tool name
    doc: str  # description shown to agents and in help
    params: tuple[Param, ...]
    result: type[BaseModel]
    #: (manager, session id, context, **params) -> result, or Steps ending in the result
    call: Callable[..., BaseModel | Steps]
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    title: str | None = None
    #: asks for confirmation in the human panel (cannot be undone)
    final: bool = False
    #: "existing": acts on a session (an optional session_id picks it); "new": opens one;
    #: "none": needs no session (the task catalog)
    session: Literal["existing", "new", "none"] = "existing"
    #: the session may also be one only on disk (finished before the server restarted)
    recorded_ok: bool = False

    def bind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Every declared argument's value (defaults filled in); TypeError for unknown or missing ones."""
        unknown = set(arguments) - {p.name for p in self.params}
        if unknown:
            raise TypeError(f"{self.name}: unknown argument(s) {sorted(unknown)}")
        missing = [p.name for p in self.params if p.default is REQUIRED and p.name not in arguments]
        if missing:
            raise TypeError(f"{self.name}: missing argument(s) {missing}")
        return {p.name: arguments.get(p.name, p.default) for p in self.params}

    def steps(
        self, manager: SessionManager, session_id: str | None, context: CallContext | None = None, **arguments: Any
    ) -> Steps:
        """The call as a generator of events ending in its answer."""
        values = self.bind(arguments)
        out = self.call(manager, session_id, context or CallContext(), **values)
        if isinstance(out, Generator):
            return (yield from out)
        return out

    def invoke(
        self, manager: SessionManager, session_id: str | None, *, context: CallContext | None = None, **arguments: Any
    ) -> BaseModel:
        """The call run to its answer (events are ignored)."""
        steps = self.steps(manager, session_id, context, **arguments)
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return cast(BaseModel, stop.value)  # a Steps generator returns its answer

    def logged_arguments(self, session_id: str | None, arguments: dict[str, Any]) -> dict[str, Any]:
        """What a call's log line records: every declared argument (defaults filled in) and, for a
        verb acting on a session, the session id; never anything undeclared."""
        logged = {p.name: arguments.get(p.name, None if p.default is REQUIRED else p.default) for p in self.params}
        if self.session == "existing":
            logged["session_id"] = session_id
        return logged
