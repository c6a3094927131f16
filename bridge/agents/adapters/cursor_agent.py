"""Cursor's CLI agent (`cursor-agent --print`): headless with `--output-format stream-json`,
`--force` (no write confirmations), `--trust` (the workspace) and `--approve-mcps` (our server
without a prompt); the MCP config is the global `~/.cursor/mcp.json` under the attempt's HOME.
Flags as Cursor's CLI documentation describes them; the key is CURSOR_API_KEY.
"""

from __future__ import annotations

from typing import Any

from bridge.agents.adapters.base import Adapter, AttemptSetup, Launch, base_env, config_file
from bridge.agents.adapters.events import Call, ParsedRun, Step, arguments, as_dict, as_list, clip, model_name
from bridge.agents.adapters.failures import Failure, classify_text
from bridge.agents.adapters.failures import clip as clip_message

NAME = "cursor-agent"


def build(setup: AttemptSetup) -> Launch:
    _, text = config_file("cursor", setup)
    path = setup.home / ".cursor" / "mcp.json"  # the global file: the workspace stays the agent's own
    argv = [setup.binary, "--print", "--output-format", "stream-json", "--trust", "--force", "--approve-mcps"]
    if setup.model:
        argv += ["--model", setup.model]
    argv.append(setup.prompt)
    return Launch(argv=argv, env=base_env(ADAPTER, setup), files={path: text}, cwd=setup.workspace)


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    run = ParsedRun.prompted(prompt)
    for ev in map(run.at, events):
        kind = ev.get("type")
        if kind == "system":
            run.model = model_name(ev.get("model")) or run.model
        elif kind == "assistant":
            texts = [clip(as_dict(b).get("text", "")) for b in as_list(as_dict(ev.get("message")).get("content"))]
            run.add(Step("agent", message="\n".join(t for t in texts if t)))
        elif kind == "tool_call":
            call_id = str(ev.get("call_id", ""))[:200]
            body = as_dict(ev.get("tool_call"))
            name = next(iter(body), "tool")[:200]
            detail = as_dict(body.get(name))
            if ev.get("subtype") == "started":
                run.add(Step("agent", calls=[Call(call_id, name, arguments(detail.get("args")))]))
            elif ev.get("subtype") == "completed":
                run.attach_result(call_id, detail.get("result", ""))
        elif kind == "result":
            run.answered = True
            if isinstance(ev.get("result"), str):
                run.final_message = clip(ev["result"])
            if ev.get("is_error"):
                text = str(ev.get("result") or "error")
                run.errors.append(clip(text, 500))
                cls = classify_text(text)
                run.failure = Failure(cls, clip_message(text)) if cls else None
    return run


ADAPTER = Adapter(
    name=NAME,
    client="cursor",
    binaries=("cursor-agent",),
    wheel=None,
    version_args=("--version",),
    env_allow=("CURSOR_API_KEY",),
    isolation_env={"NO_UPDATE_NOTIFIER": "1"},
    build=build,
    parse=parse,
    installed_by="curl https://cursor.com/install -fsS | bash",
    key_env=("CURSOR_API_KEY",),
)
