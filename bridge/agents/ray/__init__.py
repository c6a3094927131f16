"""Agent runs on a Ray cluster (`rgbridge run --backend ray`): the runs (``runs``), the checks of
the nodes (``checks``), what a node sends back (``transfer``) and the reaper of a dead worker's
attempt (``reaper``)."""
