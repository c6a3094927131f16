"""What an agent adapter is: data about one agent CLI (where its binary is, how it runs headless,
which environment it may see, where its MCP config goes, how its event stream reads) and the
launch it yields for one attempt. Modelled on Harbor's installed-agent adapters: each adapter is
one module of declarations, the runner (bridge/agents/attempt/lifecycle.py) does the rest.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.agents.adapters import mcp_configs
from bridge.agents.adapters.events import ParsedRun
from bridge.agents.adapters.keys import PROVIDER_KEY_VARS
from bridge.errors import BridgeError

#: what every agent process may inherit from the runner's environment (nothing else: keys of
#: other providers, tokens and the runner's own settings stay out); adapters add their keys
BASE_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR")
#: bridge settings the MCP server launched by the agent needs to find the same data and engine
SERVER_ENV_ALLOW = ("PYTHONPATH", "DOCKER_HOST", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")
SERVER_ENV_SECRET = ("RGBRIDGE_TOKEN",)


class AgentError(BridgeError):
    """An agent cannot be run (unknown adapter, no binary, bad template)."""


@dataclass(frozen=True)
class McpServer:
    """A bridge the agent's MCP client launches itself over stdio (IDE-style; `rgbridge run` starts
    the attempt's server itself instead: HttpServer)."""

    command: str
    args: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class HttpServer:
    """The attempt's MCP server the run started (bridge/agents/attempt/server.py): its streamable
    HTTP endpoint on loopback and the agent's own credential, the bearer token of every request."""

    url: str
    token: str


@dataclass(frozen=True)
class ModelDoor:
    """The attempt's way to the model: the run's gateway on the host (bridge/agents/gateway/) and
    the attempt's placeholder credential, which the agent holds instead of the provider's key."""

    url: str
    token: str


@dataclass(frozen=True)
class AttemptSetup:
    """Everything an adapter needs to build one attempt's launch."""

    binary: str
    prompt: str
    workspace: Path
    home: Path
    tmp: Path
    server: McpServer | HttpServer
    model: str | None = None
    model_base_url: str | None = None
    agent_cmd: str | None = None  # the `command` adapter's template
    #: the run confines the agent itself (bridge/agents/confine/): a CLI's own sandbox, which
    #: cannot nest inside it, is turned off
    confined: bool = False
    #: the model gateway: the CLI's base URL and key variable point there (None: the CLI talks to
    #: its provider itself, with the key from env_allow)
    door: ModelDoor | None = None


@dataclass
class Launch:
    """One attempt's process: argv, the environment added to the allow-listed one, files to
    write first (absolute path -> text; MCP configs), and the model the run asked for."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[Path, str] = field(default_factory=dict)
    cwd: Path | None = None


@dataclass(frozen=True)
class Adapter:
    name: str
    client: str  # the MCP client format (bridge/agents/adapters/mcp_configs.py)
    binaries: tuple[str, ...]  # names looked up on PATH
    #: the binary inside an installed Python package: (import name, path inside it)
    wheel: tuple[str, str] | None
    version_args: tuple[str, ...]
    #: environment variables passed through (API keys only from the environment, never files)
    env_allow: tuple[str, ...]
    #: what keeps the CLI quiet and local: telemetry, auto-update, plugin sync off
    isolation_env: dict[str, str]
    build: Callable[[AttemptSetup], Launch]
    parse: Callable[[list[dict[str, object]], str], ParsedRun]
    installed_by: str  # README: what the CLI needs installed
    #: the variables that hold its model key (any one will do): the run refuses to start without
    #: one unless --model-base-url names another endpoint (bridge/agents/run/agent_checks.py)
    key_env: tuple[str, ...] = ()
    #: its CLI's model host can be pointed at the run's model gateway (bridge/agents/gateway/), so
    #: the key stays on the host; False (cursor-agent, copilot, antigravity: no documented base-URL
    #: setting) passes the key in env_allow to the agent as before (README "Model gateway")
    via_gateway: bool = True
    #: where the adapter's own install keeps the binary, when it has one (a library agent's
    #: environment built by `rgbridge agents install`: bridge/agents/adapters/library.py)
    installed_binary: Callable[[], str | None] | None = None
    #: a library agent's framework (bridge/agents/adapters/library.py Framework); None for a CLI
    library: Any = None
    #: the agent is the `--agent-cmd` template, not a CLI of its own (the `command` adapter): no
    #: CLI to look for when none is named, and the template is part of the run's configuration
    takes_command: bool = False
    #: its model calls offer the bridge's MCP tools (a CLI given our server): an attempt none of
    #: whose calls did is `mcp_unavailable` (bridge/agents/gateway/door.py). False for a `command`
    #: agent (it may name its tools anything) and a library agent (no MCP client)
    offers_bridge_tools: bool = True

    # Hooks: what the run asks of an adapter instead of testing its name (issue 37). The
    # `command` adapter (bridge/agents/adapters/command.py) overrides them.

    def locate(self, agent_bin: str | None, agent_cmd: str | None, probe_home: Path) -> tuple[str, str]:
        """(binary, version) of the CLI on this machine: `--agent-bin` or the adapter's own binary,
        and the version it prints with `probe_home` as its HOME and TMPDIR."""
        binary = self.find_binary(agent_bin)
        probe_home.mkdir(parents=True, exist_ok=True)
        probe = AttemptSetup(binary, "", probe_home, probe_home, probe_home, McpServer("", [], {}))
        return binary, self.version(binary, base_env(self, probe))

    def check_runnable(self, binary: str, version: str) -> None:
        """Refuses a CLI that cannot run here: one that printed no version."""
        if version == "unknown":
            raise AgentError(
                f"agent {self.name}: `{binary} {' '.join(self.version_args)}` printed no version: the CLI "
                f"cannot run here ({self.installed_by}); no agent was started"
            )

    def resolve(self, binary: str) -> str:
        """The binary as this machine finds it (`locate` found the CLI's already)."""
        return binary

    def program(self, binary: str, agent_cmd: str | None) -> list[str]:
        """The words of what the attempt starts: what its sandbox binds read-only."""
        return [binary]

    def find_binary(self, override: str | None = None) -> str:
        """`--agent-bin`, else the adapter's own install, else PATH, else the Python wheel that
        bundles the CLI."""
        if override:
            path = shutil.which(override) or override
            if not os.access(path, os.X_OK):
                raise AgentError(f"--agent-bin {override}: not an executable file")
            return str(Path(path).absolute())
        found_here = self.installed_binary() if self.installed_binary is not None else None
        if found_here:
            return found_here
        for name in self.binaries:
            found = shutil.which(name)
            if found:
                return found
        if self.wheel is not None:
            module, inner = self.wheel
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.submodule_search_locations:
                candidate = Path(list(spec.submodule_search_locations)[0]) / inner
                if os.access(candidate, os.X_OK):
                    return str(candidate)
        if self.library is not None:
            raise AgentError(
                f"agent {self.name}: its environment is not installed here; run `rgbridge agents install "
                f"{self.name}` or pass --agent-home DIR (a virtual environment with {self.name} in it)"
            )
        raise AgentError(
            f"agent {self.name}: no binary found ({' or '.join(self.binaries) or 'none'} on PATH"
            + (f", or the {self.wheel[0]} package" if self.wheel else "")
            + f"); install it ({self.installed_by}) or pass --agent-bin"
        )

    def version(self, binary: str, env: dict[str, str]) -> str:
        """The CLI's own version line (first 80 characters), or "unknown"."""
        if not self.version_args:
            return "unknown"
        try:
            out = subprocess.run(
                [binary, *self.version_args], capture_output=True, text=True, timeout=30, env=env, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return "unknown"
        line = (out.stdout or out.stderr).strip().splitlines()
        return line[0][:80] if line else "unknown"


def base_env(adapter: Adapter, setup: AttemptSetup) -> dict[str, str]:
    """The allow-listed environment plus the attempt's own HOME and TMPDIR and the isolation env."""
    # a provider key never reaches an agent whose calls go through the gateway: it holds the key
    held = PROVIDER_KEY_VARS if adapter.via_gateway else ()
    names = [k for k in (*BASE_ENV_ALLOW, *adapter.env_allow) if k not in held]
    env = {k: os.environ[k] for k in names if k in os.environ}
    env.update(
        HOME=str(setup.home),
        TMPDIR=str(setup.tmp),
        XDG_CONFIG_HOME=str(setup.home / ".config"),
        XDG_CACHE_HOME=str(setup.home / ".cache"),
        XDG_DATA_HOME=str(setup.home / ".local/share"),
    )
    env.update(adapter.isolation_env)
    return env


def server_entry(client: str, setup: AttemptSetup) -> dict[str, Any]:
    """Our server's entry in the client's format: an HTTP entry with the agent's bearer token for
    the attempt's server, a stdio entry for a server the client launches."""
    server = setup.server
    if isinstance(server, HttpServer):
        return mcp_configs.http_entry(client, server.url, token=server.token)
    return mcp_configs.stdio_entry(client, server.command, server.args, server.env)


def config_file(client: str, setup: AttemptSetup, name: str = mcp_configs.SERVER_KEY) -> tuple[Path, str]:
    """The client's MCP config for this attempt's server: path (under the attempt's HOME for
    home-relative formats, else the workspace) and text, from the same writers as `ide-config`."""
    fmt = mcp_configs.client_format(client)
    entry = server_entry(client, setup)
    base = setup.home if fmt.home_relative else setup.workspace
    return base / fmt.relative_path, mcp_configs.render_text(client, mcp_configs.document(client, entry, name))
