"""DeepCode as the paper ran it: its `CodeImplementationWorkflow` in pure code mode, given a plan
file (`initial_plan.txt`) holding the prompt, the generated files then moved up out of
`generate_code/` (bridge/agents/adapters/library.py; the move is listed in the recording). The PyPI
distribution `deepcode-hku` carries DeepCode's `workflows` package.
"""

from __future__ import annotations

from bridge.agents.adapters.library import Framework, adapter_of

FRAMEWORK = Framework(
    name="deepcode",
    dist="deepcode-hku",
    pin="2.3.1",
    upstream_function="deepcode_generate",
    python_min=(3, 12),  # deepcode-hku 2.x declares Requires-Python >= 3.12
    entry="`workflows.code_implementation_workflow.CodeImplementationWorkflow().run_workflow(plan, repo, pure_code_mode=True)`",
    differs=(
        "the secrets file is written into the attempt's HOME and removed when the workflow ends; "
        "`generate_code/` is moved up and removed (upstream copies it up and leaves it)"
    ),
)
ADAPTER = adapter_of(FRAMEWORK)
