"""Agent runs on a Ray cluster (`rgbridge run --backend ray`): the driver's side (``driver``:
`RayAttempts`, the run's `AgentBackend`), the node's side (``node``: the body of one Ray task),
the typed messages between them (``wire``), the checks of the nodes (``checks``), what a node
sends back (``transfer``) and the reaper of a dead worker's attempt (``reaper``)."""
