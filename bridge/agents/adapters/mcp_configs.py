"""MCP client configuration formats, one home: which file each client reads and what our server
entry looks like in it (JSON for IDEs and most CLIs, TOML for the Codex CLI).

Both `rgbridge ide-config` (mcp_server/ide_config.py, which adds merging into a user's existing
file) and `rgbridge run` (bridge/agents/, which writes a fresh file per attempt) build entries
here. Formats follow each client's own MCP documentation: Cursor `.cursor/mcp.json`, VS Code
`.vscode/mcp.json` (`servers`, typed), Claude Code `.mcp.json`, Antigravity and Windsurf under
$HOME with `serverUrl`, the Codex CLI `$CODEX_HOME/config.toml` `[mcp_servers.<name>]`, the
Gemini CLI `~/.gemini/settings.json` (`trust`, `timeout` in ms, `httpUrl`), the Copilot CLI
`~/.copilot/mcp-config.json` (`type` local/http, `tools`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.errors import BridgeError

SERVER_KEY = "rgbridge"
DEFAULT_HTTP_URL = "http://127.0.0.1:8765/mcp"
#: a scoring poll or a start can take long; clients with a hard per-call limit get this much
TOOL_TIMEOUT_SECONDS = 600
STARTUP_TIMEOUT_SECONDS = 60


class ConfigError(BridgeError):
    """An MCP client config file cannot be generated or merged."""


@dataclass(frozen=True)
class ClientFormat:
    top_key: str  # "mcpServers", "servers" or "mcp_servers" (TOML)
    typed: bool  # entries carry "type"
    http_url_key: str  # "url", "serverUrl" or "httpUrl"
    home_relative: bool  # the file lives under $HOME (or the client's own home), not in the workspace
    relative_path: str
    syntax: Literal["json", "toml"] = "json"
    stdio_type: str = "stdio"  # the "type" of a local server ("local" for the Copilot CLI)
    #: extra keys of every entry (trust, timeouts, tool allow-lists) as each client documents them
    extras: dict[str, Any] = field(default_factory=dict)


FORMATS: dict[str, ClientFormat] = {
    "cursor": ClientFormat("mcpServers", False, "url", False, ".cursor/mcp.json"),
    "vscode": ClientFormat("servers", True, "url", False, ".vscode/mcp.json"),
    "antigravity": ClientFormat("mcpServers", False, "serverUrl", True, ".gemini/config/mcp_config.json"),
    "claude": ClientFormat("mcpServers", True, "url", False, ".mcp.json"),
    "windsurf": ClientFormat("mcpServers", False, "serverUrl", True, ".codeium/windsurf/mcp_config.json"),
    # Codex: CODEX_HOME defaults to ~/.codex. With approval_policy "never" it refuses tools not
    # annotated as safe unless the server says default_tools_approval_mode = "approve"; its
    # per-call limit (tool_timeout_sec, default 60 s) is hard (docs/agent-clis notes in README).
    "codex": ClientFormat(
        "mcp_servers",
        False,
        "url",
        True,
        ".codex/config.toml",
        syntax="toml",
        extras={
            "startup_timeout_sec": STARTUP_TIMEOUT_SECONDS,
            "tool_timeout_sec": TOOL_TIMEOUT_SECONDS,
            "default_tools_approval_mode": "approve",
        },
    ),
    # Gemini CLI: `trust` skips its confirmation prompts, `timeout` is in milliseconds.
    "gemini": ClientFormat(
        "mcpServers", False, "httpUrl", True, ".gemini/settings.json", extras={"trust": True, "timeout": 600_000}
    ),
    # Copilot CLI: `tools` is the allow-list of the server's tools ("*" = all).
    "copilot": ClientFormat(
        "mcpServers", True, "url", True, ".copilot/mcp-config.json", stdio_type="local", extras={"tools": ["*"]}
    ),
}
CLIENTS: tuple[str, ...] = tuple(FORMATS)


def client_format(client: str) -> ClientFormat:
    try:
        return FORMATS[client]
    except KeyError:
        raise ConfigError(f"unknown MCP client {client!r} (choose from {', '.join(CLIENTS)})") from None


def stdio_entry(client: str, command: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Our server launched over stdio, in the client's format."""
    fmt = client_format(client)
    entry: dict[str, Any] = {}
    if fmt.typed:
        entry["type"] = fmt.stdio_type
    entry["command"] = command
    entry["args"] = list(args)
    if env:
        entry["env"] = dict(env)
    entry.update(fmt.extras)
    return entry


def http_entry(
    client: str, url: str | None = None, *, token: str | None = None, token_env: str | None = None
) -> dict[str, Any]:
    """Our server over streamable HTTP. `token`: the bearer token, or a reference the client
    expands; `token_env`: Codex reads the token from this variable instead (never in the file)."""
    fmt = client_format(client)
    entry: dict[str, Any] = {}
    if fmt.typed:
        entry["type"] = "http"
    entry[fmt.http_url_key] = url or DEFAULT_HTTP_URL
    if fmt.syntax == "toml":
        if token_env:
            entry["bearer_token_env_var"] = token_env
        elif token:
            entry["http_headers"] = {"Authorization": f"Bearer {token}"}
    elif token:
        entry["headers"] = {"Authorization": f"Bearer {token}"}
    # the startup limit too: an attempt's server may still be loading the MCP SDK when the agent
    # connects (mcp_server/attempt_mode.py)
    entry.update(fmt.extras)
    return entry


def document(client: str, entry: dict[str, Any], name: str = SERVER_KEY) -> dict[str, Any]:
    """A whole config document holding only our entry."""
    return {client_format(client).top_key: {name: entry}}


def render_text(client: str, doc: dict[str, Any]) -> str:
    """A config document as the client's file holds it (JSON, or TOML for Codex)."""
    if client_format(client).syntax == "toml":
        return to_toml(doc)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------- a small TOML writer

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else json.dumps(k)


def _value(v: Any) -> str:
    # TOML basic strings share JSON's escapes for the characters json.dumps emits.
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise ConfigError(f"cannot write {type(v).__name__} into a TOML config")


def to_toml(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """TOML for a document of tables, scalars, arrays and arrays of tables (what config.toml uses).

    Tables two levels down (an entry's `env`, `http_headers`) are written inline, shallower
    ones as `[a.b]` headers.
    """
    scalars: list[str] = []
    tables: list[str] = []
    for k, v in doc.items():
        path = (*prefix, _key(k))
        if isinstance(v, dict) and len(prefix) < 2:
            body = to_toml(v, path)
            tables.append(f"[{'.'.join(path)}]\n{body}")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.extend(f"[[{'.'.join(path)}]]\n" + to_toml(x, path) for x in v)
        else:
            scalars.append(f"{_key(k)} = {_value(v)}")
    text = "".join(line + "\n" for line in scalars)
    if tables:
        text += ("\n" if text else "") + "\n".join(tables)
    return text
