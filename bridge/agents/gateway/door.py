"""The gateway as a run uses it: `RunGateway` is started once per run (before any agent) and
stopped after the last; each attempt gets a `Door`: the gateway's URL and a placeholder
credential of its own (instead of the provider's key), its ledger and transcript, and the reason
the wire ended it early, if any (`auth`: the provider refused the key; `cost_limit`: the run's
`--max-cost` or the attempt's `--max-cost-per-attempt` is spent; `unpriced`: under a cap, a call
for a model no price lists). Closing the door revokes the placeholder.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.agents.adapters.base import Adapter, ModelDoor
from bridge.agents.adapters.failures import Failure
from bridge.agents.gateway.ledger import CostRules, Ledger, RunSpend
from bridge.agents.gateway.server import AttemptWire, Gateway
from bridge.agents.gateway.transcript import Transcript
from bridge.agents.gateway.upstream import Providers
from bridge.errors import BridgeError
from bridge.recording.wire_transcript import NAME as TRANSCRIPT


@dataclass
class Door:
    """One attempt's way to the model, and what the wire says of it."""

    url: str
    token: str
    ledger: Ledger
    transcript: Path
    #: set when the wire ends the attempt ("auth" | "cost_limit" | "unpriced"); the agent is stopped at once
    cut: threading.Event = field(default_factory=threading.Event)
    reason: str | None = None
    _close: Callable[[str], None] | None = None
    #: a gateway started for this attempt alone (an attempt run on a Ray node), stopped on close
    own: RunGateway | None = None

    def access(self) -> ModelDoor:
        """What the agent's adapter is given: the gateway's URL and the placeholder."""
        return ModelDoor(self.url, self.token)

    def ended(self) -> str | None:
        """Why the wire ended the attempt ("auth" | "cost_limit" | "unpriced"), or None: polled by the run."""
        return self.reason if self.cut.is_set() else None

    def end(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.cut.set()

    def close(self) -> None:
        """The attempt's agent has ended: its placeholder is refused from now on."""
        if self._close is not None:
            self._close(self.token)
            self._close = None
        if self.own is not None:
            self.own.__exit__(None, None, None)
            self.own = None

    def verdict(self) -> Failure | None:
        return self.ledger.verdict()

    def summary(self) -> dict[str, Any]:
        return {**self.ledger.summary(), "prices": self.ledger.rules.prices.source(), "transcript": TRANSCRIPT}


class RunGateway:
    """The run's gateway: `with RunGateway(base_url, max_cost=..., rules=...) as gw: door = gw.open(...)`.

    `on_auth(key, failure)` is called once, from the gateway's thread, when a provider first
    refuses the key: the run stops starting attempts (the key is the run's, every attempt would
    fail the same way)."""

    def __init__(
        self,
        base_url: str | None,
        *,
        max_cost: float | None = None,
        spent: float = 0.0,
        on_auth: Callable[[str, Failure], None] | None = None,
        rules: CostRules | None = None,
    ) -> None:
        self.providers = Providers.from_env(base_url)
        self.spend = RunSpend(max_cost, spent)
        self.rules = rules or CostRules()
        self.on_auth = on_auth
        self.auth: tuple[str, Failure] | None = None
        self._gateway = Gateway(self.providers)
        self._lock = threading.Lock()

    def __enter__(self) -> RunGateway:
        self._gateway.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._gateway.stop()

    @property
    def url(self) -> str:
        return self._gateway.url

    def open(self, key: str, *, time_limit: float, folder: Path, needs_bridge_tools: bool) -> Door:
        """A door for attempt `key`: its transcript goes to `folder/wire.jsonl`; the gateway
        retries a failing provider no later than the attempt's time limit from now."""
        ledger = Ledger(
            key,
            deadline=time.monotonic() + time_limit,
            spend=self.spend,
            needs_bridge_tools=needs_bridge_tools,
            rules=self.rules,
        )
        path = folder / TRANSCRIPT
        token = self._gateway.open(AttemptWire(ledger, Transcript(path)))
        door = Door(self.url, token, ledger, path, _close=self._gateway.close)

        def refused(failure: Failure) -> None:
            api = ledger.calls[-1].api if ledger.calls else "anthropic"
            hint = self.providers.hint(api)  # type: ignore[arg-type]
            failure = Failure("auth", f"{failure.message}: {hint}")
            ledger.auth = failure
            door.end("auth")
            with self._lock:
                first = self.auth is None
                if first:
                    self.auth = (key, failure)
            if first and self.on_auth is not None:
                self.on_auth(key, failure)

        ledger.on_auth = refused
        ledger.on_cost_limit = lambda: door.end("cost_limit")
        ledger.on_unpriced = lambda: door.end("unpriced")
        return door


def attempt_door(
    adapter: Adapter,
    gateway: RunGateway | None,
    base_url: str | None,
    key: str,
    time_limit: float,
    folder: Path,
    rules: CostRules | None = None,
) -> Door | None:
    """An attempt's door (None for a CLI whose model host cannot be changed: `via_gateway`): from
    the run's gateway, or from a gateway of its own (an attempt run on a Ray node, priced and
    capped by `rules`), which the door stops when it closes. An agent given the bridge's MCP
    server must offer its tools in its calls (else mcp_unavailable): `Adapter.offers_bridge_tools`."""
    if not adapter.via_gateway:
        return None
    own = None if gateway is not None else RunGateway(base_url, rules=rules).__enter__()
    door = (gateway or own).open(  # type: ignore[union-attr]
        key, time_limit=time_limit, folder=folder, needs_bridge_tools=adapter.offers_bridge_tools
    )
    door.own = own
    return door


def check_cost_caps(
    adapter: Adapter, model: str | None, attempt_cap: float | None, run_cap: float | None, rules: CostRules
) -> None:
    """The pre-flight of the cost caps: a cap over a model no price lists would never be reached
    (an unpriced call counts nothing), and an attempt's cap needs its calls to pass the gateway."""
    if attempt_cap is not None and not adapter.via_gateway:
        raise BridgeError(
            f"--max-cost-per-attempt: {adapter.name}'s calls do not pass the model gateway (its model host "
            "cannot be changed), so no cap can end its attempts; use --max-cost (checked between attempts)"
        )
    if (attempt_cap is not None or run_cap is not None) and model and rules.prices.price(model) is None:
        flag = "--max-cost-per-attempt" if attempt_cap is not None else "--max-cost"
        raise BridgeError(
            f"{flag}: the model {model!r} is not in the price table (bridge/agents/gateway/prices.json), "
            f"so its calls would count nothing toward the cap. Give its price: --price {model}=IN,OUT "
            "(USD per million tokens of input and output; or IN,OUT,CACHE_READ,CACHE_WRITE), or drop the cap"
        )
