#!/usr/bin/env bash
# The test command: set up, build the scoring images once, run the whole suite.
# RGBRIDGE_REQUIRE_DOCKER=1 turns a missing Docker engine into a failure instead of skips.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python  # made by scripts/setup.sh
if "$PY" -c "from bridge.scoring.sandbox.docker_client import engine_available as e; import sys; sys.exit(0 if e()[0] else 1)"; then
  "$PY" -m bridge.cli images build
fi
# --durations: the slowest tests in every log, so the suite's time can be watched (CI budget).
exec "$PY" -m pytest -ra --durations=25 "$@"
