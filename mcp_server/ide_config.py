"""MCP configuration entries for each supported IDE, printed or merged into the IDE's file: a thin
adapter over bridge/agents/adapters/mcp_configs.py (the formats; `rgbridge run` writes the same entries).

Formats follow each IDE's own MCP configuration documentation (README "Connecting an IDE
(MCP)" has a worked example for each). Every entry launches the server with an absolute
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
import tomllib
from pathlib import Path
from typing import Any, Literal

from bridge.agents.adapters.mcp_configs import (
    CLIENTS,
    DEFAULT_HTTP_URL,  # noqa: F401 - re-exported for callers of this module
    FORMATS,  # noqa: F401 - re-exported for callers of this module
    SERVER_KEY,
    ClientFormat,
    ConfigError,
    client_format,
    http_entry,
    render_text,
    stdio_entry,
    to_toml,
)

IDES: tuple[str, ...] = CLIENTS
TOKEN_ENV = "RGBRIDGE_TOKEN"
VSCODE_TOKEN_INPUT = "rgbridge-token"
#: how each IDE's config refers to the token without holding it (the variable interpolation each
#: IDE's MCP documentation describes); Antigravity documents none.
TOKEN_REFERENCES: dict[str, str] = {
    "cursor": "${env:" + TOKEN_ENV + "}",
    "windsurf": "${env:" + TOKEN_ENV + "}",
    "claude": "${" + TOKEN_ENV + "}",
    "vscode": "${input:" + VSCODE_TOKEN_INPUT + "}",
}
IdeFormat = ClientFormat


def home_dir() -> Path:
    """$HOME when set (tests point it at a temporary folder), else the user's home."""
    env = os.environ.get("HOME")
    return Path(env) if env else Path.home()


def config_path(ide: str, workspace: Path) -> Path:
    fmt = _format(ide)
    base = home_dir() if fmt.home_relative else Path(workspace)
    return (base / fmt.relative_path).absolute()


def _format(ide: str) -> ClientFormat:
    return client_format(ide)


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
    """The `rgbridge` server entry in the IDE's own format (bridge/agents/adapters/mcp_configs.py)."""
    _format(ide)
    if "${" in str(workspace):
        raise ConfigError(f"workspace {workspace} contains an unexpanded variable; give a real folder")
    if transport == "stdio":
        return stdio_entry(ide, python or sys.executable, server_args(workspace, extra_args))
    if transport != "http":
        raise ConfigError(f"unknown transport {transport!r} (stdio or http)")
    return http_entry(ide, url, token=token)


def is_inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def token_reference(ide: str, config_file: Path, workspace: Path) -> str:
    """The token as a config file inside the workspace must spell it: a reference the IDE
    expands, never the token itself (the workspace is recorded, snapshotted and packed)."""
    reference = TOKEN_REFERENCES.get(ide)
    if reference is None:
        raise ConfigError(
            f"{config_file} is inside the workspace {workspace} and {ide} cannot read the token "
            "from the environment; refusing to write the bearer token there"
        )
    return reference


def vscode_token_input() -> dict[str, Any]:
    return {
        "id": VSCODE_TOKEN_INPUT,
        "type": "promptString",
        "password": True,
        "description": "rgbridge HTTP client credential (printed by `rgbridge ide-config vscode --transport http`)",
    }


def render(ide: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A whole config document holding only our entry (what `ide-config` prints)."""
    return {_format(ide).top_key: {SERVER_KEY: entry}}


def render_document(ide: str, entry: dict[str, Any]) -> str:
    """`render` as the IDE's file spells it (JSON, or TOML for the Codex CLI)."""
    return render_text(ide, render(ide, entry))


def merge_into(
    path: Path,
    ide: str,
    entry: dict[str, Any],
    *,
    inputs: list[dict[str, Any]] | None = None,
    private_backup: bool = False,
) -> dict[str, Any]:
    """Merge our entry into the config file at `path`, keeping every other key and server.

    Refuses a file that is not a JSON object (an IDE config we cannot parse is never
    overwritten); writes atomically and keeps the previous content as `<name>.bak`.
    `inputs`: VS Code input definitions our entry refers to (merged by id). `private_backup`:
    the file is in a workspace, so the backup must not keep our old entry's bearer token.
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
            loaded = _parse(path, text, fmt)
            if not isinstance(loaded, dict):
                raise ConfigError(f"{path}: top level is not a JSON object; refusing to overwrite it")
            document = loaded
    servers = document.get(fmt.top_key)
    if servers is None:
        servers = {}
    elif not isinstance(servers, dict):
        raise ConfigError(f"{path}: '{fmt.top_key}' is not a JSON object; refusing to overwrite it")
    previous = json.loads(json.dumps(document)) if existed else None
    servers[SERVER_KEY] = entry
    document[fmt.top_key] = servers
    if inputs:
        known = document.get("inputs")
        if known is not None and not isinstance(known, list):
            raise ConfigError(f"{path}: 'inputs' is not a JSON list; refusing to overwrite it")
        kept = [i for i in (known or []) if not (isinstance(i, dict) and i.get("id") in {x["id"] for x in inputs})]
        document["inputs"] = kept + inputs
    path.parent.mkdir(parents=True, exist_ok=True)
    if existed:
        backup = path.with_name(path.name + ".bak")
        if private_backup and previous is not None:
            old = (previous.get(fmt.top_key) or {}).get(SERVER_KEY)
            if isinstance(old, dict) and "headers" in old:
                old["headers"] = {"Authorization": "Bearer <removed by rgbridge ide-config>"}
            _write_atomic(backup, json.dumps(previous, indent=2, ensure_ascii=False) + "\n")
        else:
            shutil.copy2(path, backup)
            if _has_secret(backup.read_text(encoding="utf-8", errors="replace")):
                os.chmod(backup, 0o600)
    _write_atomic(
        path, to_toml(document) if fmt.syntax == "toml" else json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    )
    return document


def _parse(path: Path, text: str, fmt: ClientFormat) -> Any:
    if fmt.syntax == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc}); refusing to overwrite it") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}); refusing to overwrite it"
        ) from None


def _write_atomic(path: Path, text: str) -> None:
    # A file holding a token is private even if an older version left it 0644.
    mode = 0o600 if _has_secret(text) else (path.stat().st_mode & 0o777) if path.exists() else 0o644
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
    # A bearer token: keep the file private to the user.
    return "Bearer " in text
