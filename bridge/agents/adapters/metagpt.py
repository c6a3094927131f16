"""MetaGPT as the paper ran it: `metagpt.software_company.generate_repo` with the prompt as its
idea and upstream's arguments (project path = the workspace, implement, code review, 5 rounds,
investment 3.0), against an OpenAI-compatible endpoint (bridge/agents/adapters/library.py). Its
`config2.yaml` is written into the attempt's HOME without the key (the driver sets it in memory).

metagpt 0.8.2 (the newest release; Requires-Python >=3.9, <3.12) pins lancedb==0.4.0, which the
index no longer serves; with only that pin relaxed, pip's resolver still finds its other pins in
conflict (google-generativeai==0.4.1 against grpcio-status~=1.62.3 and grpcio-tools~=1.62.3), where
uv's resolver finds a set that holds every other pin (grpcio 1.67, grpcio-status and -tools 1.62.3,
google-generativeai 0.4.1): `rgbridge agents install metagpt` installs it with uv, lancedb as the
one override (bridge/agents/adapters/installs.py). lancedb is imported only by MetaGPT's document
store, which `generate_repo` never reaches (in that environment it would not import: the pyarrow it
takes needs NumPy 2, metagpt pins numpy~=1.26.4).

A project path puts 0.8.2 in its incremental mode, whose WriteCode reads the project's source
folder (`<project>/<project name>/`) before anything created it and raises `ValueError: Call
with_srcs first.` (MetaGPT issue #2007): the driver creates that folder, empty, before the call,
and moves what MetaGPT wrote into it up into the workspace afterwards (the move is recorded).
"""

from __future__ import annotations

from bridge.agents.adapters.library import Framework, adapter_of

FRAMEWORK = Framework(
    name="metagpt",
    dist="metagpt",
    pin="0.8.2",
    upstream_function="metagpt_generate",
    # 0.8.2 pins lancedb==0.4.0, which the index no longer has (it lists 0.14.0 and later); the
    # newest is taken: generate_repo never imports it
    overrides=(("lancedb", "lancedb"),),
    # pip's resolver gives up on the pins that are left (google-generativeai==0.4.1 against
    # grpcio-status~=1.62.3 / grpcio-tools~=1.62.3); uv's finds the set that holds them all
    resolver="uv",
    entry="`metagpt.software_company.generate_repo(idea, project_path=repo, n_round=5, investment=3.0)`",
    differs=(
        "installed by uv with lancedb unpinned (0.8.2 pins lancedb==0.4.0, which the index no longer has); the "
        "configuration file (no key in it) in the attempt's HOME instead of a temporary folder of the host; the "
        "source folder `<repo>/<repo name>/` created empty before the call (without it 0.8.2's incremental mode, "
        "which the project path turns on, fails in WriteCode: MetaGPT issue #2007) and its files moved up into "
        "the repo afterwards (upstream's script leaves them there)"
    ),
)
ADAPTER = adapter_of(FRAMEWORK)
