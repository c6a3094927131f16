#!/usr/bin/env bash
# The test command: set up, build the scoring images once, run the whole suite.
# RGBRIDGE_REQUIRE_DOCKER=1 turns a missing Docker engine into a failure instead of skips.
#
# `--fast`: the inner loop. Every test that needs neither the Docker engine nor an agent CLI (the
# `docker` and `agent_cli` markers, set from the fixtures a test takes: tests/conftest.py), with
# the engine hidden, so a test that uses it without taking its fixture fails here rather than
# passing by luck; one pytest-xdist worker per core (most of these tests wait on processes and
# sockets, not the CPU). Sets up only a checkout whose .venv is missing or lacks the test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python  # made by scripts/setup.sh
if [ "${1:-}" = "--fast" ]; then
  shift
  { [ -x "$PY" ] && "$PY" -c "import xdist" 2>/dev/null; } || bash scripts/setup.sh
  DOCKER_HOST=unix:///nonexistent.rgbridge-fast-lane exec "$PY" -m pytest -m "not docker and not agent_cli" \
    -n auto -ra --durations=15 "$@"
fi
bash scripts/setup.sh
if "$PY" -c "from bridge.scoring.sandbox.docker_client import engine_available as e; import sys; sys.exit(0 if e()[0] else 1)"; then
  "$PY" -m bridge.cli images build
fi
# --durations: the slowest tests in every log, so the suite's time can be watched (CI budget).
# -n auto --dist loadgroup: the engine and CLI tests (one xdist group: tests/conftest.py) run on one
# worker, one after the other as in a serial run, while the other workers run the rest, which the
# fast lane already runs in parallel; each worker has a temp folder of its own (tests/conftest.py).
# `-n 0` after it runs everything serially.
exec "$PY" -m pytest -ra --durations=25 -n auto --dist loadgroup "$@"
