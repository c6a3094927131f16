"""One `rgbridge run` over tasks × attempts: its options as given (``options``), what its
attempts share (``settings``), its configuration and hash (``config``), the agent's checks before
any attempt starts (``agent_checks``: its model key, its CLI and version), retries and spending
(``retries``), the agents' prompt (``prompt``), where its attempts run (``backend``: the protocol;
``local``: here; the Ray one is bridge/agents/ray/driver.py), the plan from the command line and
the resume (``plan``) and the execution (``runner``)."""
