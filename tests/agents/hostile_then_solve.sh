#!/bin/sh
# A hostile agent for `rgbridge run --agent command`: before it ever connects to the bridge it
# tries every reach of tests/agents/reach_probe.sh (its findings on stdout, which the run keeps as
# the agent's stream), then, with `solve`, runs the scripted MCP agent that writes the task's
# files and submits; with `never` it ends without connecting at all. The probe's own arguments
# (the golden paths it tries, and so on) are read from ARGS_FILE.
#
# usage: sh hostile_then_solve.sh PROBE ARGS_FILE MODE [AGENT COMMAND...]
probe=$1 args=$2 mode=$3
shift 3
# shellcheck disable=SC2046 # the file holds space-separated paths of the test's own making
sh "$probe" $(cat "$args")
if [ "$mode" = solve ]; then
  exec "$@"
fi
exit 0
