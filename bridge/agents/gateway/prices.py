"""What a model call cost, from the price table kept as data (`prices.json` beside this module:
USD per million tokens per model, with its source and the date it was taken). A model the table
does not list is unpriced (None), never free.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.agents.gateway.usage import Usage

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


def price(model: str | None) -> Price | None:
    """The model's price: its exact name, else the longest listed name it starts with (a dated
    snapshot takes its family's price); None when unlisted."""
    if not model:
        return None
    models: dict[str, dict[str, float]] = table()["models"]
    name = model.strip().lower().removeprefix("models/")
    best = name if name in models else max((m for m in models if name.startswith(m + "-")), key=len, default=None)
    if best is None:
        return None
    p = models[best]
    return Price(p["input"], p["output"], p["cache_read"], p["cache_write"])


def cost(model: str | None, usage: Usage | None) -> float | None:
    found = price(model)
    if found is None or usage is None:
        return None
    return found.cost(usage)
