"""What the wire says about one attempt: every model call the gateway forwarded (status, latency,
tokens, cost, the tools the request offered, retries and the time spent waiting on a failing
provider), the calls it refused, and from them the attempt's failure as the wire shows it
(`verdict`): never what the agent's CLI chose to print.

An attempt failed on the wire (issue 38, item 4) when it made billed calls and either none was
answered or the last one failed with a provider class (auth, rate limit, outage, context
overflow); an attempt given the bridge's MCP server whose calls never offered the bridge's tools
is `mcp_unavailable` (its CLI started without, or lost, its MCP connection).

Costs are capped live (item 6): once the run's `--max-cost` or the attempt's own
`--max-cost-per-attempt` is reached, the next billed call is refused (`cost_limit`). An unpriced
call would count nothing toward a cap, so under a cap a call for a model no price lists is refused
before it is forwarded and the attempt is `agent_error`/`unpriced`: never silently uncapped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge.agents.adapters.failures import Failure, FailureClass
from bridge.agents.gateway.prices import Prices
from bridge.agents.gateway.usage import Usage


@dataclass
class Call:
    """One request the agent sent through the gateway."""

    at: float  # wall-clock start
    api: str
    kind: str
    billed: bool
    model: str | None
    tools: int = 0
    bridge_tools: bool = False
    status: int | None = None  # the provider's final status; None: no answer (connection failed)
    seconds: float = 0.0
    usage: Usage | None = None
    cost_usd: float | None = None
    tries: int = 1
    waited_seconds: float = 0.0  # on failing tries and backoff before the final one
    failure: FailureClass | None = None
    error: str | None = None
    refused: str | None = None  # the gateway refused it itself (cost_limit | unpriced)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300 and self.failure is None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "at": round(self.at, 3),
            "api": self.api,
            "kind": self.kind,
            "billed": self.billed,
            "model": self.model,
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "tries": self.tries,
            "waited_seconds": round(self.waited_seconds, 3),
            "tools": self.tools,
            "bridge_tools": self.bridge_tools,
            "tokens": self.usage.as_dict() if self.usage else None,
            "cost_usd": self.cost_usd,
        }
        for name in ("failure", "error", "refused"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


class RunSpend:
    """What the run's calls cost so far, against `--max-cost` (shared by every attempt's ledger)."""

    def __init__(self, cap: float | None, spent: float = 0.0) -> None:
        self.cap = cap
        self.spent = spent
        self._lock = threading.Lock()

    def add(self, usd: float) -> None:
        with self._lock:
            self.spent += usd

    def reached(self) -> bool:
        with self._lock:
            return self.cap is not None and self.spent >= self.cap


@dataclass(frozen=True)
class CostRules:
    """What every attempt's calls are priced and capped by, beside the run's `RunSpend`: the
    attempt's own cap (`--max-cost-per-attempt`: each attempt, each retry, a budget of its own)
    and the prices (the table and the run's `--price`)."""

    attempt_cap: float | None = None
    prices: Prices = field(default_factory=Prices)


@dataclass
class Ledger:
    """One attempt's wire record; `on_auth`, `on_cost_limit` and `on_unpriced` are called (once
    each) from the gateway's thread when the provider refuses the key, when a cap refuses a call
    and when a call under a cap asks for a model no price lists."""

    key: str
    deadline: float  # time.monotonic() past which no retry is waited for
    spend: RunSpend = field(default_factory=lambda: RunSpend(None))
    needs_bridge_tools: bool = False
    key_hint: str = ""  # "ANTHROPIC_API_KEY at https://..." for the auth message
    rules: CostRules = field(default_factory=CostRules)
    on_auth: Callable[[Failure], None] | None = None
    on_cost_limit: Callable[[], None] | None = None
    on_unpriced: Callable[[], None] | None = None
    calls: list[Call] = field(default_factory=list)
    auth: Failure | None = None
    cost_limited: bool = False
    cost_limited_by: str | None = None  # "attempt" | "run": whose cap refused the call
    unpriced: str | None = None  # the model a call under a cap asked for, which no price lists
    spent: float = 0.0  # this attempt's priced calls, against `rules.attempt_cap`
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def capped(self) -> bool:
        return self.rules.attempt_cap is not None or self.spend.cap is not None

    def record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            if call.cost_usd:
                self.spent += call.cost_usd
        if call.cost_usd:
            self.spend.add(call.cost_usd)
        if call.failure == "auth" and self.auth is None:
            self.auth = Failure(
                "auth",
                f"the provider refused the key ({call.status}){': ' + self.key_hint if self.key_hint else ''}",
            )
            if self.on_auth:
                self.on_auth(self.auth)

    def refuse_for_cost(self) -> bool:
        """True (and the attempt told, once) when the attempt's or the run's cap is reached: the
        call is refused."""
        with self._lock:
            mine = self.rules.attempt_cap is not None and self.spent >= self.rules.attempt_cap
        if not mine and not self.spend.reached():
            return False
        first = not self.cost_limited
        self.cost_limited = True
        if first:
            self.cost_limited_by = "attempt" if mine else "run"
            if self.on_cost_limit:
                self.on_cost_limit()
        return True

    def refuse_unpriced(self, model: str | None) -> bool:
        """True (and the attempt told, once) when a cap is set and `model` has no price: its cost
        would count nothing toward the cap, so the call is refused instead of running uncapped."""
        if not self.capped or self.rules.prices.price(model) is not None:
            return False
        first = self.unpriced is None
        if first:
            self.unpriced = model or "?"
            if self.on_unpriced:
                self.on_unpriced()
        return True

    def cap_message(self) -> str:
        if self.cost_limited_by == "attempt":
            return f"the attempt's --max-cost-per-attempt {self.rules.attempt_cap:g} USD is reached"
        return f"the run's --max-cost {self.spend.cap:g} USD is reached"

    def unpriced_failure(self) -> Failure:
        model = self.unpriced or "?"
        return Failure(
            "unpriced",
            f"a model call asked for {model!r}, which no price lists, while a cost cap is set: the call "
            f"was refused (its cost would count nothing toward the cap). Price it: --price {model}=IN,OUT "
            "(USD per million tokens input, output), or run without a cost cap",
        )

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    # ------------------------------------------------------------------ read back
    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def verdict(self) -> Failure | None:
        """The attempt's failure as the wire shows it, or None (the wire has nothing against it)."""
        if self.auth is not None:
            return self.auth
        if self.unpriced is not None:
            return self.unpriced_failure()
        billed = [c for c in self.snapshot() if c.billed and c.refused is None]
        if not billed:
            return None
        last = billed[-1]
        answered = [c for c in billed if c.ok]
        if not last.ok and (last.failure is not None or not answered):
            failing = 0
            for c in reversed(billed):
                if c.ok:
                    break
                failing += 1
            cls: FailureClass = last.failure or "provider_unavailable"
            what = f"status {last.status}" if last.status is not None else "no answer"
            return Failure(
                cls,
                f"the last {failing} model call(s) failed on the wire ({what}"
                + (f": {last.error}" if last.error else "")
                + f"; {sum(c.waited_seconds for c in billed):.0f}s waited on the provider)",
            )
        if self.needs_bridge_tools and not any(c.bridge_tools for c in billed):
            return Failure(
                "mcp_unavailable",
                f"none of the agent's {len(billed)} model call(s) offered the bridge's MCP tools "
                "(its MCP connection was not up, or was lost)",
            )
        return None

    def summary(self) -> dict[str, Any]:
        """The attempt's figures from the wire: calls, tokens and cost summed over the answered
        billed calls, statuses, waiting time (the row's `run.wire`)."""
        calls = self.snapshot()
        answered = [c for c in calls if c.billed and c.ok]
        tokens = Usage()
        for c in answered:
            if c.usage:
                tokens.add(c.usage)
        unpriced = sorted({c.model or "?" for c in answered if c.cost_usd is None})
        statuses: dict[str, int] = {}
        for c in calls:
            name = str(c.status) if c.status is not None else (c.refused or "no answer")
            statuses[name] = statuses.get(name, 0) + 1
        return {
            "source": "gateway",
            "calls": len([c for c in calls if c.billed]),
            "answered": len(answered),
            "statuses": statuses,
            "tokens": tokens.as_dict(),
            # an unpriced model is never free: no total when any answered call is unpriced
            "cost_usd": None if unpriced or not answered else round(sum(c.cost_usd or 0.0 for c in answered), 6),
            "unpriced_models": unpriced,
            "retries": sum(c.tries - 1 for c in calls),
            "waited_seconds": round(sum(c.waited_seconds for c in calls), 3),
            "latency_seconds": round(sum(c.seconds for c in answered), 3),
            "bridge_tools_seen": any(c.bridge_tools for c in calls if c.billed),
            "cost_limited": self.cost_limited,
            **({"cost_limited_by": self.cost_limited_by} if self.cost_limited_by else {}),
            "cost_caps": {"attempt": self.rules.attempt_cap, "run": self.spend.cap},
            **({"unpriced_refused": self.unpriced} if self.unpriced else {}),
        }
