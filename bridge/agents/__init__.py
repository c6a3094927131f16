"""Layer 6, agents: real agent CLIs run unattended over tasks × attempts (`rgbridge run`) —
adapters, MCP client configs, the run plan, isolation, time limits, trajectories, run folders."""
