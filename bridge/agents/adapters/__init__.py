"""Agent adapters: what the run knows of each agent CLI (``base``: the adapter, its setup and
launch; ``registry``: the adapters by name; one module per CLI; ``probe``: the CLI's binary and
version on this machine), the MCP client config formats (``mcp_configs``), the CLIs' event
streams read back as steps (``events``) and why a CLI failed when it was not the agent's work
(``failures``)."""
