"""MCP configuration entries for each supported IDE, printed or merged into the IDE's file.

Formats follow `reference/mcp-sdk.md` §7. Every entry launches the server with an absolute
interpreter path (IDEs started from a desktop often lack the shell's PATH) and an absolute
`--workspace`, because Antigravity and Windsurf expand no workspace variable and Antigravity
starts stdio servers in the home directory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bridge.errors import BridgeError

IDE = Literal["cursor", "vscode", "antigravity", "claude", "windsurf"]
IDES: tuple[str, ...] = ("cursor", "vscode", "antigravity", "claude", "windsurf")
SERVER_KEY = "rgbridge"
DEFAULT_HTTP_URL = "http://127.0.0.1:8765/mcp"


class ConfigError(BridgeError):
    """An IDE config file cannot be generated or merged."""


@dataclass(frozen=True)
class IdeFormat:
    top_key: str          # "mcpServers" or "servers"
    typed: bool           # entries carry "type": "stdio" | "http"
    http_url_key: str     # "url" or "serverUrl"
    home_relative: bool   # the file lives under $HOME, not in the workspace
    relative_path: str


FORMATS: dict[str, IdeFormat] = {
    "cursor": IdeFormat("mcpServers", False, "url", False, ".cursor/mcp.json"),
    "vscode": IdeFormat("servers", True, "url", False, ".vscode/mcp.json"),
    "antigravity": IdeFormat("mcpServers", False, "serverUrl", True, ".gemini/config/mcp_config.json"),
    "claude": IdeFormat("mcpServers", True, "url", False, ".mcp.json"),
    "windsurf": IdeFormat("mcpServers", False, "serverUrl", True, ".codeium/windsurf/mcp_config.json"),
}


def home_dir() -> Path:
    """$HOME when set (tests point it at a temporary folder), else the user's home."""
    env = os.environ.get("HOME")
    return Path(env) if env else Path.home()


def config_path(ide: str, workspace: Path) -> Path:
    fmt = _format(ide)
    base = home_dir() if fmt.home_relative else Path(workspace)
    return (base / fmt.relative_path).absolute()


def _format(ide: str) -> IdeFormat:
    try:
        return FORMATS[ide]
    except KeyError:
        raise ConfigError(f"unknown IDE {ide!r} (choose from {', '.join(IDES)})") from None


def server_args(workspace: Path, extra_args: list[str] | None = None) -> list[str]:
    return ["-m", "mcp_server", "--workspace", str(Path(workspace).absolute()), *(extra_args or [])]


def server_entry(
    ide: str,
    workspace: Path,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    url: str | None = None,
    token: str | None = None,
    extra_args: list[str] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """The `rgbridge` server entry in the IDE's own format."""
    fmt = _format(ide)
    if "${" in str(workspace):
        raise ConfigError(f"workspace {workspace} contains an unexpanded variable; give a real folder")
    entry: dict[str, Any] = {}
    if transport == "stdio":
        if fmt.typed:
            entry["type"] = "stdio"
        entry["command"] = python or sys.executable
        entry["args"] = server_args(workspace, extra_args)
        return entry
    if transport != "http":
        raise ConfigError(f"unknown transport {transport!r} (stdio or http)")
    if fmt.typed:
        entry["type"] = "http"
    entry[fmt.http_url_key] = url or DEFAULT_HTTP_URL
    if token:
        entry["headers"] = {"Authorization": f"Bearer {token}"}
    return entry


def render(ide: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A whole config document holding only our entry (what `ide-config` prints)."""
    return {_format(ide).top_key: {SERVER_KEY: entry}}


def merge_into(path: Path, ide: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Merge our entry into the config file at `path`, keeping every other key and server.

    Refuses a file that is not a JSON object (an IDE config we cannot parse is never
    overwritten); writes atomically and keeps the previous content as `<name>.bak`.
    """
    fmt = _format(ide)
    document: dict[str, Any] = {}
    existed = path.exists()
    if existed:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read ({exc})") from None
        if text.strip():
            try:
                loaded = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}); refusing to overwrite it"
                ) from None
            if not isinstance(loaded, dict):
                raise ConfigError(f"{path}: top level is not a JSON object; refusing to overwrite it")
            document = loaded
    servers = document.get(fmt.top_key)
    if servers is None:
        servers = {}
    elif not isinstance(servers, dict):
        raise ConfigError(f"{path}: '{fmt.top_key}' is not a JSON object; refusing to overwrite it")
    servers[SERVER_KEY] = entry
    document[fmt.top_key] = servers
    path.parent.mkdir(parents=True, exist_ok=True)
    if existed:
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    _write_atomic(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return document


def _write_atomic(path: Path, text: str) -> None:
    mode = (path.stat().st_mode & 0o777) if path.exists() else 0o600 if _has_secret(text) else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _has_secret(text: str) -> bool:
    # A bearer token in a new file: keep it private to the user (anchors.md §7.4).
    return "Bearer " in text
