"""One attempt of an agent on a task: its lifecycle from start to score (``lifecycle``), the MCP
server the run starts for it (``server``), its state file (``state``), where its time went
(``timing``), its trajectory (``trajectory``) and its report row (``rows``)."""
