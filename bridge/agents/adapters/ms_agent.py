"""MS-Agent as the paper ran it: `ms_agent.LLMAgent` with upstream's configuration (the `openai`
service, the endpoint and key, temperature 1, streaming, 100 chat rounds), plus its own
`file_system` tool rooted at the workspace (bridge/agents/adapters/library.py).

Upstream configured no tool, so its LLMAgent could only answer in text and wrote no file; with its
file tool it writes the repo itself. Installed without the packages only its retrieval, video and
speech features import (sentence-transformers with PyTorch, faiss, moviepy, edge-tts): LLMAgent
and its file tool never load them, and they are gigabytes.
"""

from __future__ import annotations

from bridge.agents.adapters.library import Framework, adapter_of

FRAMEWORK = Framework(
    name="ms-agent",
    dist="ms-agent",
    pin="1.6.0",
    upstream_function="ms_agent_generate",
    # without the packages only its retrieval, video and speech features import (PyTorch with them)
    overrides=(("sentence-transformers", ""), ("faiss-cpu", ""), ("moviepy", ""), ("edge_tts", "")),
    also=("loguru",),  # its LLMAgent imports it (ms_agent/knowledge_search) without declaring it
    entry="`ms_agent.LLMAgent(config=OmegaConf.create({...}))`, `await agent.run(prompt)`",
    differs=(
        "its `file_system` tool is configured (output folder = the workspace): upstream gave LLMAgent no "
        "tool, so it could not write the repo; installed without its retrieval/video/speech dependencies"
    ),
)
ADAPTER = adapter_of(FRAMEWORK)
