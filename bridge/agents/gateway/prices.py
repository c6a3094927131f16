"""What a model call cost, from the price table kept as data (`prices.json` beside this module:
USD per million tokens per model, with its source and the date it was taken), and the run's own
prices (`--price MODEL=IN,OUT[,CACHE_READ,CACHE_WRITE]`, recorded as such) before it. A model
neither lists is unpriced (None), never free.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.agents.gateway.usage import Usage
from bridge.errors import BridgeError

TABLE = Path(__file__).with_name("prices.json")
PER = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, usage: Usage) -> float:
        return (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * self.cache_read
            + usage.cache_write * self.cache_write
        ) / PER


@functools.cache
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


def source() -> dict[str, str]:
    """Where the prices come from and when (rows and reports cite it)."""
    data = table()
    return {"source": str(data["source"]), "retrieved": str(data["retrieved"])}


def _name(model: str) -> str:
    return model.strip().lower().removeprefix("models/")


def _match(model: str | None, names: Sequence[str]) -> str | None:
    """The listed name for `model`: its exact name, else the longest listed name it starts with
    (a dated snapshot takes its family's price)."""
    if not model:
        return None
    name = _name(model)
    return name if name in names else max((m for m in names if name.startswith(m + "-")), key=len, default=None)


def price(model: str | None) -> Price | None:
    """The model's price in the table; None when unlisted."""
    models: dict[str, dict[str, float]] = table()["models"]
    best = _match(model, list(models))
    if best is None:
        return None
    p = models[best]
    return Price(p["input"], p["output"], p["cache_read"], p["cache_write"])


def cost(model: str | None, usage: Usage | None) -> float | None:
    return Prices().cost(model, usage)


def parse_price(text: str) -> tuple[str, list[float]]:
    """`MODEL=IN,OUT[,CACHE_READ,CACHE_WRITE]` (USD per million tokens) as `--price` takes it."""
    model, sep, figures = text.partition("=")
    try:
        numbers = [float(x) for x in figures.split(",")] if sep else []
    except ValueError:
        numbers = []
    if not model.strip() or len(numbers) not in (2, 4):
        raise BridgeError(
            f"--price {text!r}: expected MODEL=IN,OUT or MODEL=IN,OUT,CACHE_READ,CACHE_WRITE (USD per million tokens)"
        )
    return _name(model), numbers


@dataclass(frozen=True)
class Prices:
    """The table with the run's own prices before it (`--price`; run.json keeps them as
    `{model: [in, out]}` or `[in, out, cache_read, cache_write]`). With two figures, cache reads
    and writes are priced as input tokens."""

    overrides: Mapping[str, Price] = field(default_factory=dict)

    @classmethod
    def of(cls, given: Mapping[str, Sequence[float]] | None) -> Prices:
        """The run's prices, checked (run.json is read back from disk: untrusted)."""
        out: dict[str, Price] = {}
        for model, figures in (given or {}).items():
            numbers = [float(x) for x in figures] if isinstance(figures, list | tuple) else []
            if len(numbers) not in (2, 4) or not all(math.isfinite(x) and x >= 0 for x in numbers):
                raise BridgeError(
                    f"price of {model!r}: {figures!r} is not 2 or 4 non-negative numbers (USD per million tokens)"
                )
            cache = numbers[2:] or [numbers[0], numbers[0]]
            out[_name(model)] = Price(numbers[0], numbers[1], cache[0], cache[1])
        return cls(out)

    def price(self, model: str | None) -> Price | None:
        given = _match(model, list(self.overrides))
        return self.overrides[given] if given is not None else price(model)

    def cost(self, model: str | None, usage: Usage | None) -> float | None:
        found = self.price(model)
        if found is None or usage is None:
            return None
        return found.cost(usage)

    def source(self) -> dict[str, Any]:
        """Where the prices come from (rows and reports cite it): the table's source and date, and
        the run's own prices when it gave any."""
        out: dict[str, Any] = dict(source())
        if self.overrides:
            out["overrides"] = {
                m: [p.input, p.output, p.cache_read, p.cache_write] for m, p in sorted(self.overrides.items())
            }
            out["overrides_source"] = "--price (the run's own figures, USD per million tokens)"
        return out
