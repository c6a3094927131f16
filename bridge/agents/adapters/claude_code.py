"""Claude Code (`claude -p`): headless with `--output-format stream-json`, the MCP server from
`--mcp-config` only, telemetry and auto-update off, the model endpoint from ANTHROPIC_BASE_URL.

Flags and environment as Claude Code's CLI reference and its settings documentation describe
them; MCP tools are named `mcp__<server>__<tool>` and deferred behind a tool search unless
ENABLE_TOOL_SEARCH is false (all of ours go in the first request instead).
"""

from __future__ import annotations

from typing import Any

from bridge.agents.adapters.base import Adapter, AttemptSetup, Launch, base_env, config_file
from bridge.agents.adapters.events import (
    Call,
    ParsedRun,
    Step,
    arguments,
    as_dict,
    as_float,
    as_int,
    as_list,
    clip,
    model_name,
)
from bridge.agents.adapters.failures import Failure, classify_text, from_status
from bridge.agents.adapters.failures import clip as clip_message
from bridge.agents.adapters.mcp_configs import SERVER_KEY

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
            run.model = model_name(ev.get("model")) or run.model
        elif kind == "assistant":
            msg = as_dict(ev.get("message"))
            model = model_name(msg.get("model"))
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
            # the result event's usage is the whole run's: input (not cached), output, cache read/write
            run.prompt_tokens = as_int(usage.get("input_tokens"))
            run.completion_tokens = as_int(usage.get("output_tokens"))
            run.cached_tokens = as_int(usage.get("cache_read_input_tokens"))
            run.cache_write_tokens = as_int(usage.get("cache_creation_input_tokens"))
            run.cost_usd = as_float(ev.get("total_cost_usd"))
            run.answered = True
            if isinstance(ev.get("result"), str):
                run.final_message = clip(ev["result"])
            if ev.get("is_error"):
                run.errors.append(clip(ev.get("result") or ev.get("subtype") or "error", 500))
                run.failure = failure_of(ev)
            models = [m for m in as_dict(ev.get("modelUsage")) if isinstance(m, str) and model_name(m)]
            if models and run.model is None:
                run.model = models[0][:200]
    return run


def failure_of(result: dict[str, Any]) -> Failure | None:
    """A result event with `is_error`: the provider's HTTP status when the CLI gives it
    (`api_error_status`), else its error type and text ("Not logged in · Please run /login",
    "Prompt is too long", "Connection to the API was lost"). Turn limits and the like are the
    agent's own end: not a failure."""
    text = " ".join(
        str(ev) for ev in (result.get("result"), result.get("api_error_type"), result.get("api_error")) if ev
    )
    for error in as_list(result.get("errors")):
        text += " " + str(error)[:500]
    cls = from_status(result.get("api_error_status")) or classify_text(text)
    return Failure(cls, clip_message(text or "error")) if cls else None


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
    key_env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
)
