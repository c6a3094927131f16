"""The GitHub Copilot CLI (`copilot -p`): headless with `--allow-all-tools` (no approval prompts),
our server in `~/.copilot/mcp-config.json` under the attempt's HOME (`type: local`, `tools: ["*"]`).
Flags and file as the Copilot CLI documentation describes them; it prints text, not events, so
its trajectory holds the prompt and the final answer only. The key is a GitHub token.
"""

from __future__ import annotations

from typing import Any

from bridge.agents.adapters.base import Adapter, AttemptSetup, Launch, base_env, config_file
from bridge.agents.adapters.events import ParsedRun

NAME = "copilot"


def build(setup: AttemptSetup) -> Launch:
    path, text = config_file("copilot", setup)
    argv = [setup.binary, "-p", setup.prompt, "--allow-all-tools", "--no-color"]
    if setup.model:
        argv += ["--model", setup.model]
    env = base_env(ADAPTER, setup)
    env["XDG_CONFIG_HOME"] = str(setup.home)  # the CLI reads $XDG_CONFIG_HOME/.copilot when set
    return Launch(argv=argv, env=env, files={path: text}, cwd=setup.workspace)


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    run = ParsedRun.prompted(prompt)
    return run


ADAPTER = Adapter(
    name=NAME,
    client="copilot",
    binaries=("copilot",),
    wheel=None,
    version_args=("--version",),
    env_allow=("GH_TOKEN", "GITHUB_TOKEN", "COPILOT_GITHUB_TOKEN"),
    isolation_env={"NO_UPDATE_NOTIFIER": "1"},
    build=build,
    parse=parse,
    installed_by="npm install -g @github/copilot",
    key_env=("GH_TOKEN", "GITHUB_TOKEN", "COPILOT_GITHUB_TOKEN"),
)
