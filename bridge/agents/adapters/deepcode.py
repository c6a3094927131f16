"""DeepCode as the paper ran it: its `CodeImplementationWorkflow` in pure code mode, given a plan
file (`initial_plan.txt`) holding the prompt, the generated files then moved up out of
`generate_code/` (bridge/agents/adapters/library.py; the move is listed in the recording). The PyPI
distribution `deepcode-hku` carries DeepCode's `workflows` package; 2.x needs Python 3.12.

DeepCode 2.x reads a `deepcode_config.json` (its home, `DEEPCODE_HOME`) where upstream's checkout
read `mcp_agent.config.yaml` and `mcp_agent.secrets.yaml`: the driver writes one into the attempt's
HOME with the endpoint as its `custom` provider, the key as a `${OPENAI_API_KEY}` reference, and the
code-implementation and command-executor MCP servers of the installed package.
"""

from __future__ import annotations

from bridge.agents.adapters.library import Framework, adapter_of

FRAMEWORK = Framework(
    name="deepcode",
    dist="deepcode-hku",
    pin="2.3.1",
    upstream_function="deepcode_generate",
    python_min=(3, 12),  # deepcode-hku 2.x declares Requires-Python >= 3.12
    entry=(
        "`workflows.code_implementation_workflow.CodeImplementationWorkflow().run_workflow(plan, repo, "
        "pure_code_mode=True)`"
    ),
    differs=(
        "2.3.1 (Python 3.12) configured by a `deepcode_config.json` in the attempt's HOME (no key in it) "
        "instead of the checkout's YAML files; `generate_code/` is moved up and removed (upstream copies "
        "it up and leaves it)"
    ),
)
ADAPTER = adapter_of(FRAMEWORK)
