"""MetaGPT as the paper ran it: `metagpt.software_company.generate_repo` with the prompt as its
idea and upstream's arguments (project path = the workspace, implement, code review, 5 rounds,
investment 3.0), against an OpenAI-compatible endpoint (bridge/agents/adapters/library.py). Its
`config2.yaml` is written into the attempt's HOME without the key (the driver sets it in memory).

metagpt 0.8.2 (the newest release) does not install from PyPI today: it pins lancedb==0.4.0, which
the index no longer serves, and with that pin relaxed pip finds its other pins in conflict
(google-generativeai==0.4.1 against grpcio-status~=1.62.3 and grpcio-tools~=1.62.3). `rgbridge
agents install metagpt` says so and leaves no environment; with `--agent-home` an environment of the
user's runs it, and one where MetaGPT cannot be imported ends each attempt `cli_missing`.
"""

from __future__ import annotations

from bridge.agents.adapters.library import Framework, adapter_of

FRAMEWORK = Framework(
    name="metagpt",
    dist="metagpt",
    pin="0.8.2",
    upstream_function="metagpt_generate",
    # metagpt 0.8.2 pins lancedb==0.4.0, which the index no longer has (it lists 0.14.0 and later)
    overrides=(("lancedb", "lancedb"),),
    entry="`metagpt.software_company.generate_repo(idea, project_path=repo, n_round=5, investment=3.0)`",
    differs=(
        "the configuration file (no key in it) in the attempt's HOME instead of a temporary folder of the "
        "host; installed with lancedb unpinned (0.8.2 pins lancedb==0.4.0, which the index no longer has)"
    ),
)
ADAPTER = adapter_of(FRAMEWORK)
