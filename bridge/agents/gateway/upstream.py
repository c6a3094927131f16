"""The gateway's leg to the provider: where each API's calls go (`--model-base-url`, else the
provider's documented host), which real key they carry and in which header (read from the run's
environment on the host, never handed to the agent), and how long to wait before retrying a rate
limit or an outage (`Retry-After` first, else exponential backoff, never past the attempt's time).
"""

from __future__ import annotations

import email.utils
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bridge.agents.adapters.keys import BASE_URL_VARS, KEY_SOURCES, Api

#: each API's documented host (used when --model-base-url names none)
DEFAULT_HOSTS: dict[Api, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
    "gemini": "https://generativelanguage.googleapis.com",
}
_VERSION_END = re.compile(r"/v\d+(?:alpha|beta)?$")
_VERSION_START = re.compile(r"^/v\d+(?:alpha|beta)?(?:/|$)")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0
#: a retry is not started with less than this left of the attempt's time
MARGIN_SECONDS = 2.0


@dataclass(frozen=True)
class Key:
    api: Api
    variable: str
    value: str
    header: str

    def headers(self) -> dict[str, str]:
        if self.header == "authorization":
            return {"authorization": f"Bearer {self.value}"}
        return {self.header: self.value}


@dataclass(frozen=True)
class Providers:
    """Where the run's model calls go and with which keys."""

    base_url: str | None
    keys: dict[Api, Key]
    #: per API, the base URL the host's environment names (ANTHROPIC_BASE_URL, ...)
    env_bases: dict[Api, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, base_url: str | None, env: Mapping[str, str] | None = None) -> Providers:
        env = os.environ if env is None else env
        bases: dict[Api, str] = {api: env[var].rstrip("/") for api, var in BASE_URL_VARS.items() if env.get(var)}
        keys: dict[Api, Key] = {}
        for api, sources in KEY_SOURCES.items():
            for variable, header in sources:
                if env.get(variable):
                    keys[api] = Key(api, variable, env[variable], header)
                    break
        return cls(base_url.rstrip("/") if base_url else None, keys, bases)

    def url(self, api: Api, path: str, query: str) -> str:
        """The provider URL of a request the agent sent to `path`: the base URL's own path is
        kept, minus a trailing API version (`/v1`, `/v1beta`) when the agent's path starts with
        one (Codex's provider base URL ends in `/v1`, Claude Code's does not: both reach the same
        endpoint)."""
        base = self.base(api)
        if _VERSION_END.search(base) and _VERSION_START.match(path):
            base = _VERSION_END.sub("", base)
        return base + path + (f"?{query}" if query else "")

    def base(self, api: Api) -> str:
        """--model-base-url, else the API's variable on the host, else its documented host."""
        return self.base_url or self.env_bases.get(api) or DEFAULT_HOSTS[api]

    def endpoint(self, api: Api) -> str:
        parts = urlsplit(self.base(api))
        return f"{parts.scheme}://{parts.netloc}"

    def hint(self, api: Api) -> str:
        """The fix an auth failure names: which variable, which endpoint."""
        key = self.keys.get(api)
        names = key.variable if key else " or ".join(v for v, _ in KEY_SOURCES[api])
        return f"check {names} (sent to {self.endpoint(api)})"

    def secrets(self) -> list[str]:
        return [k.value for k in self.keys.values()]


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` as seconds (a number, or an HTTP date: RFC 9110 §10.2.3), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff(retry: int, header: str | None) -> float:
    """The wait before retry `retry` (1-based): the provider's `Retry-After` when it gives one,
    else 1, 2, 4 ... seconds up to MAX_BACKOFF."""
    told = retry_after(header)
    if told is not None:
        return min(told, MAX_BACKOFF * 4)
    return float(min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (retry - 1)))
