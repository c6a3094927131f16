"""The providers' keys and base URLs as environment variables: which variables hold each API's
key (first set wins) and the header it travels in, and each API's own base-URL variable. The
model gateway (bridge/agents/gateway/) reads them on the host; no agent whose CLI goes through the
gateway ever gets one of the key variables from the run's environment (``base.base_env``).
"""

from __future__ import annotations

from typing import Literal

Api = Literal["anthropic", "openai", "gemini"]

#: where each API's real key is read from and the header it goes in: Anthropic `x-api-key` (or a
#: bearer token for ANTHROPIC_AUTH_TOKEN), OpenAI a bearer token, Gemini `x-goog-api-key`
KEY_SOURCES: dict[Api, tuple[tuple[str, str], ...]] = {
    "anthropic": (("ANTHROPIC_API_KEY", "x-api-key"), ("ANTHROPIC_AUTH_TOKEN", "authorization")),
    "openai": (("OPENAI_API_KEY", "authorization"), ("CODEX_API_KEY", "authorization")),
    "gemini": (("GEMINI_API_KEY", "x-goog-api-key"), ("GOOGLE_API_KEY", "x-goog-api-key")),
}
#: every variable above
PROVIDER_KEY_VARS: tuple[str, ...] = tuple(var for sources in KEY_SOURCES.values() for var, _ in sources)
#: each API's own base-URL variable, honoured on the host when --model-base-url names none
BASE_URL_VARS: dict[Api, str] = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
}
