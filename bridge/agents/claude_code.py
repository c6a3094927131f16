"""Claude Code (`claude -p`): headless with `--output-format stream-json`, the MCP server from
`--mcp-config` only, telemetry and auto-update off, the model endpoint from ANTHROPIC_BASE_URL.

Flags and environment as Claude Code's CLI reference and its settings documentation describe
them; MCP tools are named `mcp__<server>__<tool>` and deferred behind a tool search unless
ENABLE_TOOL_SEARCH is false (all of ours go in the first request instead).
"""

from __future__ import annotations

from typing import Any

from bridge.agents.adapter import Adapter, AttemptSetup, Launch, base_env, config_file
from bridge.agents.events import (
    Call,
    ParsedRun,
    Step,
    add_tokens,
    arguments,
    as_dict,
    as_float,
    as_list,
    as_str,
    clip,
)
from bridge.agents.mcp_configs import SERVER_KEY

NAME = "claude-code"


def build(setup: AttemptSetup) -> Launch:
    path, text = config_file("claude", setup)
    # The config lives in the attempt's HOME, not the workspace (the workspace is what is scored).
    path = setup.home / ".rgbridge-mcp.json"
    argv = [
        setup.binary,
        "-p",
        setup.prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--mcp-config",
        str(path),
        "--strict-mcp-config",
        "--allowedTools",
        f"mcp__{SERVER_KEY}",
        "Write",
        "Read",
        "Edit",
        "Bash",
        "--permission-mode",
        "acceptEdits",
        "--no-session-persistence",
    ]
    if setup.model:
        argv += ["--model", setup.model]
    env = base_env(ADAPTER, setup)
    if setup.model_base_url:
        env["ANTHROPIC_BASE_URL"] = setup.model_base_url
    return Launch(argv=argv, env=env, files={path: text}, cwd=setup.workspace)


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    run = ParsedRun.prompted(prompt)
    for ev in map(run.at, events):
        kind = ev.get("type")
        if kind == "system" and ev.get("subtype") == "init":
            run.model = as_str(ev.get("model")) or run.model
        elif kind == "assistant":
            msg = as_dict(ev.get("message"))
            model = as_str(msg.get("model"))
            run.model = model or run.model
            step = Step("agent", model=model)
            texts: list[str] = []
            for block in as_list(msg.get("content")):
                block = as_dict(block)
                if block.get("type") == "text":
                    texts.append(clip(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    step.calls.append(
                        Call(
                            str(block.get("id", ""))[:200],
                            str(block.get("name", ""))[:200],
                            arguments(block.get("input")),
                        )
                    )
            step.message = "\n".join(texts)
            usage = as_dict(msg.get("usage"))
            step.prompt_tokens = usage.get("input_tokens") if isinstance(usage.get("input_tokens"), int) else None
            step.completion_tokens = usage.get("output_tokens") if isinstance(usage.get("output_tokens"), int) else None
            run.add(step)
        elif kind == "user":
            for block in as_list(as_dict(ev.get("message")).get("content")):
                block = as_dict(block)
                if block.get("type") == "tool_result":
                    run.attach_result(str(block.get("tool_use_id", "")), block.get("content", ""))
        elif kind == "result":
            usage = as_dict(ev.get("usage"))
            cached = (
                (usage.get("cache_read_input_tokens") or 0)
                if isinstance(usage.get("cache_read_input_tokens"), int)
                else None
            )
            add_tokens(run, usage.get("input_tokens"), usage.get("output_tokens"), cached)
            run.cost_usd = as_float(ev.get("total_cost_usd"))
            if isinstance(ev.get("result"), str):
                run.final_message = clip(ev["result"])
            if ev.get("is_error"):
                run.errors.append(clip(ev.get("result") or ev.get("subtype") or "error", 500))
            models = [m for m in as_dict(ev.get("modelUsage")) if isinstance(m, str)]
            if models and run.model is None:
                run.model = models[0][:200]
    return run


ADAPTER = Adapter(
    name=NAME,
    client="claude",
    binaries=("claude",),
    wheel=("claude_agent_sdk", "_bundled/claude"),
    version_args=("--version",),
    env_allow=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"),
    isolation_env={
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "false",
        "MCP_TIMEOUT": "60000",
        "MCP_TOOL_TIMEOUT": "600000",
    },
    build=build,
    parse=parse,
    installed_by="pip install claude-agent-sdk (bundles the CLI), or Anthropic's installer",
)
