"""The Codex CLI (`codex exec --json`): its own CODEX_HOME per attempt whose config.toml holds the
MCP server, update checks, analytics, feedback, telemetry, plugin sync and shell snapshots off,
and (with `--model-base-url`) a Responses-API provider whose key is read from OPENAI_API_KEY at
run time.

Keys as the Codex configuration reference documents them; `--json` prints one event per line
(thread/turn/item events; items are agent messages, reasoning, commands, MCP tool calls, file
changes; `turn.completed` carries the usage).
"""

from __future__ import annotations

import re
from typing import Any

from bridge.agents.adapters.base import Adapter, AttemptSetup, Launch, base_env, server_entry
from bridge.agents.adapters.events import (
    Call,
    ParsedRun,
    Step,
    add_tokens,
    arguments,
    as_dict,
    as_list,
    clip,
    model_name,
)
from bridge.agents.adapters.failures import Failure, FailureClass, classify_text, from_status
from bridge.agents.adapters.failures import clip as clip_message
from bridge.agents.adapters.mcp_configs import SERVER_KEY, document, render_text

NAME = "codex"
PROVIDER = "rgbridge-endpoint"
KEY_ENV = "OPENAI_API_KEY"


def config(setup: AttemptSetup) -> dict[str, Any]:
    """config.toml for one attempt, as data (one document with our server in it)."""
    doc: dict[str, Any] = {
        "approval_policy": "never",
        # Codex's own sandbox (bubblewrap, Landlock) cannot start inside the run's (no user
        # namespace or uid map there): a confined attempt runs with it off, as Harbor runs Codex
        # inside its containers; an unconfined one keeps it.
        "sandbox_mode": "danger-full-access" if setup.confined else "workspace-write",
        "check_for_update_on_startup": False,
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "otel": {"exporter": "none"},
        # shell_snapshot off: Codex 0.163.0 writes the shell's environment (the API key with it) to
        # CODEX_HOME/shell_snapshots/ and leaves it there when a turn fails (tests/test_agent_errors.py)
        "features": {"plugins": False, "remote_plugin": False, "apps": False, "shell_snapshot": False},
    }
    if setup.model:
        doc["model"] = setup.model
    if setup.model_base_url:
        doc["model_provider"] = PROVIDER
        doc["model_providers"] = {
            PROVIDER: {
                "name": PROVIDER,
                "base_url": setup.model_base_url,
                "wire_api": "responses",
                "env_key": KEY_ENV,  # the key itself stays in the environment
            }
        }
    doc.update(document("codex", server_entry("codex", setup)))
    return doc


def build(setup: AttemptSetup) -> Launch:
    codex_home = setup.home / ".codex"
    last = setup.home / "last-message.txt"
    argv = [setup.binary, "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-C", str(setup.workspace)]
    if setup.model:
        argv += ["-m", setup.model]
    argv += ["-o", str(last), setup.prompt]
    env = base_env(ADAPTER, setup)
    env["CODEX_HOME"] = str(codex_home)
    return Launch(argv=argv, env=env, files={codex_home / "config.toml": render_text("codex", config(setup))})


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    run = ParsedRun.prompted(prompt)
    run.input_includes_cache = True  # `cached_input_tokens` is a part of `input_tokens`
    for ev in map(run.at, events):
        kind = ev.get("type")
        item = as_dict(ev.get("item"))
        if kind == "item.completed":
            itype = item.get("type")
            item_id = str(item.get("id", ""))[:200]
            if itype == "agent_message":
                run.final_message = clip(item.get("text", ""))
                run.add(Step("agent", message=run.final_message))
            elif itype == "reasoning":
                run.add(Step("agent", message=clip(item.get("text", ""))))
            elif itype == "mcp_tool_call":
                name = f"mcp__{item.get('server', SERVER_KEY)}__{item.get('tool', '')}"[:200]
                step = run.add(Step("agent", calls=[Call(item_id, name, arguments(item.get("arguments")))]))
                out = item.get("result") if item.get("result") is not None else item.get("error")
                step.results.append((item_id, clip(out if out is not None else item.get("status", ""))))
            elif itype == "command_execution":
                step = run.add(
                    Step("agent", calls=[Call(item_id, "exec_command", {"command": clip(item.get("command", ""))})])
                )
                step.results.append((item_id, clip(item.get("aggregated_output", ""))))
            elif itype == "file_change":
                changes = [as_dict(c) for c in as_list(item.get("changes"))]
                paths = [str(c.get("path", ""))[:500] for c in changes]
                step = run.add(Step("agent", calls=[Call(item_id, "apply_patch", {"paths": paths})]))
                step.results.append((item_id, clip(item.get("status", ""))))
        elif kind == "turn.completed":
            usage = as_dict(ev.get("usage"))
            add_tokens(run, usage.get("input_tokens"), usage.get("output_tokens"), usage.get("cached_input_tokens"))
            run.answered = True
        elif kind in ("error", "turn.failed"):
            message = str(ev.get("message") or as_dict(ev.get("error")).get("message") or kind)
            run.errors.append(clip(message, 500))
            if kind == "turn.failed":  # the turn's end; `error` events before it may be retries
                run.failure = failure_of(message)
        model = model_name(ev.get("model"))
        run.model = model or run.model
    return run


#: "unexpected status 401 Unauthorized: ...", "last status: 429 Too Many Requests"
_STATUS = re.compile(r"status:?\s+(\d{3})\b")


def failure_of(message: str) -> Failure:
    """A failed turn (`turn.failed`): the provider's HTTP status in Codex's message, else its
    wording ("stream disconnected before completion"); a failed turn with neither is a crash."""
    found = _STATUS.search(message)
    cls: FailureClass | None = (from_status(int(found.group(1))) if found else None) or classify_text(message)
    return Failure(cls or "cli_crash", clip_message(message))


ADAPTER = Adapter(
    name=NAME,
    client="codex",
    binaries=("codex",),
    wheel=("codex_cli_bin", "bin/codex"),
    version_args=("--version",),
    env_allow=(KEY_ENV, "OPENAI_BASE_URL", "CODEX_API_KEY"),
    isolation_env={},
    build=build,
    parse=parse,
    installed_by="pip install openai-codex-cli-bin (or npm i -g @openai/codex)",
    key_env=(KEY_ENV, "CODEX_API_KEY"),
)
