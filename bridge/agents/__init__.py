"""Layer 6, agents: real agent CLIs run unattended over tasks × attempts (`rgbridge run`) —
adapters, MCP client configs, the run plan, isolation, time limits, trajectories, run folders.

The wing holds only sub-packages, one concern each, each with its face (its ``__init__.py``):

* ``adapters/`` -- one module per agent CLI and what they share: the base adapter, the registry,
  MCP client configs, event-stream parsing, failure classes.
* ``confine/`` -- what one attempt may see and use: the sandbox kinds, limits, the agent's
  process, the paths it must never see.
* ``attempt/`` -- one attempt from start to score: its lifecycle, MCP server, state file, timing
  and trajectory.
* ``run/`` -- one run over tasks × attempts: its options, shared settings, configuration hash,
  pre-flight, retries, prompts and execution.
* ``ray/`` -- agent runs on a Ray cluster: the runs, node checks, transfer of results, the reaper.

Imports point one way, each of these using only those before it: ``adapters``, ``confine``, the
run's data (``run.options``, ``run.prompt``, ``run.settings``), ``attempt``, ``ray``, then the
run's execution (the rest of ``run``); no import circle, ``TYPE_CHECKING`` imports included
(tests/test_architecture.py checks both).
"""
