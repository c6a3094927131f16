"""Qwen-Agent as the paper ran it: `qwen_agent.agents.Assistant` with the `code_interpreter` tool,
the prompt as its system message, against an OpenAI-compatible endpoint (bridge/agents/adapters/library.py).

Pinned to 0.0.31, the last release whose `code_interpreter` runs a local Jupyter kernel: from
0.0.32 on it starts the kernel in a Docker container built on first use, which a confined attempt
(no Docker socket, no registry) cannot do. Installed with its `code_interpreter` extra (Jupyter,
matplotlib and the other packages its kernel imports at start).
"""

from __future__ import annotations

from bridge.agents.adapters.library import Framework, adapter_of

FRAMEWORK = Framework(
    name="qwen-agent",
    dist="qwen-agent",
    pin="0.0.31",
    extras=("code-interpreter",),
    also=("tqdm",),  # 0.0.31 imports it (qwen_agent/tools/python_executor.py) without declaring it
    upstream_function="qwen_agent_generate",
    entry="`qwen_agent.agents.Assistant(function_list=['code_interpreter'])`, `bot.run(messages)`",
    differs=(
        "0.0.31, not the newest (its code interpreter runs in a local Jupyter kernel, not a Docker "
        "container); the tool's work folder in the attempt's HOME, not `workspace/` in the repo; the user "
        "turn is the bridge's own sentence naming the workspace"
    ),
)
ADAPTER = adapter_of(FRAMEWORK)
