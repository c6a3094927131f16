"""The Gemini CLI (`gemini -p`): headless with `--output-format stream-json` and `--yolo` (tool
calls approved), the settings file `~/.gemini/settings.json` under the attempt's HOME holding our
server (`trust`, `timeout`) with telemetry, usage statistics and auto-update off. Keys and events
as the Gemini CLI's configuration and headless-mode documentation describe them.
"""

from __future__ import annotations

import json
from typing import Any

from bridge.agents.adapters.base import Adapter, AttemptSetup, Launch, base_env, server_entry
from bridge.agents.adapters.events import Call, ParsedRun, Step, add_tokens, arguments, as_dict, clip, model_name
from bridge.agents.adapters.failures import Failure, classify_text
from bridge.agents.adapters.failures import clip as clip_message
from bridge.agents.adapters.mcp_configs import client_format, document

NAME = "gemini"


def settings(setup: AttemptSetup) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    doc.update(document("gemini", server_entry("gemini", setup)))
    return doc


def build(setup: AttemptSetup) -> Launch:
    path = setup.home / client_format("gemini").relative_path
    argv = [setup.binary, "-p", setup.prompt, "--output-format", "stream-json", "--yolo"]
    if setup.model:
        argv += ["-m", setup.model]
    env = base_env(ADAPTER, setup)
    if setup.model_base_url:
        env["GOOGLE_GEMINI_BASE_URL"] = setup.model_base_url
    text = json.dumps(settings(setup), indent=2) + "\n"
    return Launch(argv=argv, env=env, files={path: text}, cwd=setup.workspace)


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    run = ParsedRun.prompted(prompt)
    run.input_includes_cache = True  # `cached` is a part of `input_tokens` (Gemini's usage metadata)
    for ev in map(run.at, events):
        kind = ev.get("type")
        if kind == "init":
            run.model = model_name(ev.get("model")) or run.model
        elif kind == "message" and ev.get("role") == "assistant":
            last = run.steps[-1]
            if ev.get("delta") and last.source == "agent" and not last.calls:
                last.message = clip(last.message + str(ev.get("content", "")))
            else:
                run.add(Step("agent", message=clip(ev.get("content", ""))))
        elif kind == "tool_use":
            call = Call(
                str(ev.get("tool_id", ""))[:200], str(ev.get("tool_name", ""))[:200], arguments(ev.get("parameters"))
            )
            run.add(Step("agent", calls=[call]))
        elif kind == "tool_result":
            run.attach_result(str(ev.get("tool_id", "")), ev.get("output", ev.get("status", "")))
        elif kind == "error":
            run.errors.append(clip(ev.get("message", "error"), 500))
        elif kind == "result":
            stats = as_dict(ev.get("stats"))
            add_tokens(run, stats.get("input_tokens"), stats.get("output_tokens"), stats.get("cached"))
            run.answered = ev.get("status") != "error"
            if ev.get("status") == "error":
                text = str(as_dict(ev.get("error")).get("message") or (run.errors[-1] if run.errors else "error"))
                cls = classify_text(text)
                run.failure = Failure(cls, clip_message(text)) if cls else None
    final = [s.message for s in run.steps if s.source == "agent" and s.message]
    run.final_message = final[-1] if final else None
    return run


ADAPTER = Adapter(
    name=NAME,
    client="gemini",
    binaries=("gemini",),
    wheel=None,
    version_args=("--version",),
    env_allow=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    isolation_env={"GEMINI_CLI_NO_RELAUNCH": "true", "NO_UPDATE_NOTIFIER": "1"},
    build=build,
    parse=parse,
    installed_by="npm install -g @google/gemini-cli",
    key_env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
)
