"""Google Antigravity's CLI (`agy -p`), the headless form of the paper's third IDE: print mode
with `--output-format stream-json` (Antigravity CLI 1.1.8 and later) and
`--dangerously-skip-permissions` (no approval prompts; the run confines the agent itself), our
server in the global MCP file `~/.gemini/config/mcp_config.json` under the attempt's HOME
(`mcpServers`; a remote server under `serverUrl`), written by the same code as `rgbridge
ide-config antigravity`, and its settings file `~/.gemini/antigravity-cli/settings.json` with
tools and artifacts approved and telemetry, tips and surveys off.

Flags, files and keys as the Antigravity CLI's documentation describes them (its "Using AGY CLI"
settings and overrides, the CLI reference's `settings.json` keys, the Gemini migration page's MCP
file and `serverUrl`, and the 1.1.8 release notes for print mode's stream: `init`, `step_update`
with a `step_type` and, for a tool call, `tool_info` (name, parameters, output), and a terminal
`result` with `status`, `response` and `usage` including `cache_read_tokens`). Checked against
those documents only (tests/test_agent_adapters.py), not run here: see the README.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.agents.adapters import mcp_configs
from bridge.agents.adapters.base import Adapter, AttemptSetup, Launch, base_env, config_file
from bridge.agents.adapters.events import Call, ParsedRun, Step, add_tokens, arguments, as_dict, as_int, as_str, clip

NAME = "antigravity"
SETTINGS = ".gemini/antigravity-cli/settings.json"

#: settings.json keys as the CLI reference lists them: nothing waits for a person, nothing is sent home
SETTINGS_DOC: dict[str, Any] = {
    "toolPermission": "always-proceed",
    "artifactReviewPolicy": "always-proceed",
    "allowNonWorkspaceAccess": False,
    "enableTelemetry": False,
    "showFeedbackSurvey": False,
    "showTips": False,
    "notifications": False,
}


def mcp_config(setup: AttemptSetup) -> tuple[Path, str]:
    """The MCP file: the attempt's server over streamable HTTP on loopback when it is served so
    (`url`, and the attempt's own `token` as a bearer header: Antigravity documents no variable
    expansion in this file), else launched over stdio."""
    url = getattr(setup.server, "url", None)
    if isinstance(url, str) and url:
        token = getattr(setup.server, "token", None)
        entry = mcp_configs.http_entry("antigravity", url, token=token if isinstance(token, str) else None)
        fmt = mcp_configs.client_format("antigravity")
        return setup.home / fmt.relative_path, mcp_configs.render_text(
            "antigravity", mcp_configs.document("antigravity", entry)
        )
    return config_file("antigravity", setup)


def build(setup: AttemptSetup) -> Launch:
    mcp_path, mcp_text = mcp_config(setup)
    argv = [setup.binary, "-p", setup.prompt, "--output-format", "stream-json", "--dangerously-skip-permissions"]
    if setup.model:
        argv += ["--model", setup.model]
    files = {mcp_path: mcp_text, setup.home / SETTINGS: json.dumps(SETTINGS_DOC, indent=2) + "\n"}
    return Launch(argv=argv, env=base_env(ADAPTER, setup), files=files, cwd=setup.workspace)


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    """`init` (the model), `step_update` (agent text deltas and tool calls, per `step_index`),
    `result` (the final answer, its status and the usage)."""
    run = ParsedRun.prompted(prompt)
    by_index: dict[int, Step] = {}
    for ev in map(run.at, events):
        kind = ev.get("event")
        if kind == "init":
            run.model = as_str(as_dict(ev.get("init")).get("model")) or run.model
        elif kind == "step_update":
            _step(run, by_index, as_dict(ev.get("step_update")))
        elif kind == "result":
            result = as_dict(ev.get("result"))
            if isinstance(result.get("response"), str) and result["response"]:
                run.final_message = clip(result["response"])
            usage = as_dict(result.get("usage"))
            add_tokens(run, usage.get("input_tokens"), usage.get("output_tokens"), usage.get("cache_read_tokens"))
            status = result.get("status")
            if isinstance(status, str) and status.upper() != "SUCCESS":
                run.errors.append(clip(f"{status}: {result.get('error') or result.get('response') or ''}", 500))
        elif kind == "error":
            run.errors.append(clip(as_dict(ev.get("error")).get("message") or ev.get("message") or "error", 500))
    if run.final_message is None:
        said = [s.message for s in run.steps if s.source == "agent" and s.message]
        run.final_message = said[-1] if said else None
    return run


def _step(run: ParsedRun, by_index: dict[int, Step], update: dict[str, Any]) -> None:
    index = as_int(update.get("step_index"))
    kind = update.get("step_type")
    info = as_dict(update.get("tool_info"))
    known = by_index.get(index) if index is not None else None
    if kind == "tool" or info:
        call_id = f"step-{index}" if index is not None else f"step-{len(run.steps)}"
        if known is None:
            name = str(info.get("name") or update.get("tool_name") or "tool")[:200]
            known = run.add(Step("agent", calls=[Call(call_id, name, arguments(info.get("parameters")))]))
            if index is not None:
                by_index[index] = known
        if "output" in info and known.calls and not known.results:
            run.attach_result(known.calls[0].call_id, info["output"])
    elif kind == "agent_response" or (known is not None and known.source == "agent" and not known.calls):
        delta = update.get("text_delta")
        text = delta if isinstance(delta, str) else ""
        if known is None:
            known = run.add(Step("agent", message=clip(text)))
            if index is not None:
                by_index[index] = known
        elif text and not (update.get("state") == "DONE" and known.message.endswith(text)):
            # an ACTIVE update adds a fragment; the DONE update that closes the step may repeat the
            # last fragment (or the whole text), which is not said twice
            known.message = clip(known.message + text)


ADAPTER = Adapter(
    name=NAME,
    client="antigravity",
    binaries=("agy",),
    wheel=None,
    version_args=("--version",),
    env_allow=("ANTIGRAVITY_API_KEY", "GEMINI_API_KEY"),
    isolation_env={"NO_UPDATE_NOTIFIER": "1", "AGY_CLI_HIDE_ACCOUNT_INFO": "1"},
    build=build,
    parse=parse,
    installed_by="curl -fsSL https://antigravity.google/cli/install.sh | bash",
)
