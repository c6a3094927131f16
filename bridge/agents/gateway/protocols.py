"""What one request to the gateway is, read from its path, headers and body: which provider API
it speaks (Anthropic Messages and count_tokens, OpenAI Responses and Chat Completions, Gemini
generateContent / streamGenerateContent / countTokens), whether it is a billed model call, whether
it streams, its model, the tool names it offers, and where the agent put its credential.

Paths as the providers document them: Anthropic `POST /v1/messages` (and `/v1/messages/count_tokens`),
OpenAI `POST /v1/responses` and `/v1/chat/completions`, Gemini `POST /v1beta/models/MODEL:ACTION`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from bridge.agents.adapters.keys import Api

Kind = Literal["messages", "count_tokens", "responses", "chat", "generate", "other"]

#: credential headers an agent may send (and the gateway always strips before forwarding)
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
_GEMINI = re.compile(r"^/(?:v1|v1beta|v1alpha)/models/(?P<model>[^/:]+):(?P<action>[A-Za-z]+)$")
#: the bridge's own MCP tools (mcp_server/): how a request that carries them is recognised,
#: whatever prefix the CLI gives them (`mcp__rgbridge__submit_task`, a Codex namespace, bare)
BRIDGE_TOOLS = ("start_task", "submit_task")


@dataclass(frozen=True)
class Route:
    api: Api
    kind: Kind
    #: a model call that is billed and answers the agent (count_tokens and listings are not)
    billed: bool
    model: str | None = None  # from the path (Gemini); else read from the body


def route(method: str, path: str, headers: dict[str, str]) -> Route:
    """The API and kind of a request (headers lower-cased); an unknown path is `other` of the API
    its headers point to (Anthropic's `anthropic-version` or `x-api-key`, Google's key header)."""
    clean = path.rstrip("/")
    if method == "POST":
        if clean.endswith("/messages/count_tokens"):
            return Route("anthropic", "count_tokens", False)
        if clean.endswith("/messages"):
            return Route("anthropic", "messages", True)
        if clean.endswith("/responses"):
            return Route("openai", "responses", True)
        if clean.endswith("/chat/completions"):
            return Route("openai", "chat", True)
        found = _GEMINI.match(clean)
        if found:
            action = found.group("action")
            billed = action in ("generateContent", "streamGenerateContent")
            return Route("gemini", "generate" if billed else "other", billed, found.group("model"))
    if "anthropic-version" in headers or "x-api-key" in headers:
        return Route("anthropic", "other", False)
    if "x-goog-api-key" in headers or clean.startswith("/v1beta"):
        return Route("gemini", "other", False)
    return Route("openai", "other", False)


def streamed(route_: Route, path: str, query: str, body: dict[str, Any]) -> bool:
    if route_.api == "gemini":
        return path.rstrip("/").endswith(":streamGenerateContent") or "alt=sse" in query
    return body.get("stream") is True


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or {} (a body we cannot read is forwarded as it is)."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def model_of(route_: Route, body: dict[str, Any]) -> str | None:
    model = route_.model or body.get("model")
    return model[:200] if isinstance(model, str) and model else None


def tool_names(body: dict[str, Any]) -> list[str]:
    """Every tool name a request offers, flattened: Anthropic `tools[].name`, OpenAI Responses
    `tools[].name` (a `namespace` tool as `NS__inner`), Chat Completions `tools[].function.name`,
    Gemini `tools[].functionDeclarations[].name`."""
    names: list[str] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            names += [f"{tool.get('name')}__{t.get('name')}" for t in tool["tools"] if isinstance(t, dict)]
        elif isinstance(tool.get("function"), dict):
            names.append(str(tool["function"].get("name", "")))
        elif isinstance(tool.get("functionDeclarations"), list):
            names += [str(d.get("name", "")) for d in tool["functionDeclarations"] if isinstance(d, dict)]
        elif tool.get("name"):
            names.append(str(tool["name"]))
    return [n[:200] for n in names if n]


def carries_bridge_tools(names: list[str]) -> bool:
    return any(n.endswith(tool) for n in names for tool in BRIDGE_TOOLS)


def agent_credential(headers: dict[str, str], query: dict[str, str]) -> str | None:
    """The credential the agent sent, wherever its CLI puts it (headers lower-cased)."""
    for name in ("x-api-key", "x-goog-api-key", "api-key"):
        if headers.get(name):
            return headers[name].strip()
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("key") or None
