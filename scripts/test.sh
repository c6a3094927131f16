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
# Two pytest runs at once: the engine and CLI tests (the `docker` and `agent_cli` markers) one
# after the other as always, and beside them the rest (the fast lane's tests, engine visible), whose
# log follows the engine run's. Each run has a temp folder of its own (tests/conftest.py), so the
# golden-copy checks of one never see the other's folders. --durations: the slowest tests of each
# run in every log, so the suite's time can be watched (CI budget). The rest runs niced: it ends
# long before the engine run, whose tests hold wall-clock bounds (a flood scored within 120 s, say)
# that a CPU taken by the rest would push.
#
# The rest runs in a copy of the checkout (its .venv linked): an engine test's session watches its
# task's golden files for opens (bridge/sessions/contamination.py), and a rest test that reads the
# same files (task hashes, the golden-copy checks) would be that session's contamination. The
# copy's files are other files, so neither run ever sees the other's reads.
rest_log=$(mktemp)
rest_root=$(mktemp -d)
chmod 755 "$rest_root"  # readable as the checkout is: some tests run as an unprivileged user
tar --exclude=./.venv -cf - . | tar -xf - -C "$rest_root"
ln -s "$PWD/.venv" "$rest_root/.venv"
(cd "$rest_root" && PYTHONPATH="$rest_root" exec nice -n 10 "$PY" -m pytest -m "not docker and not agent_cli" -ra \
  --durations=25 "$@") >"$rest_log" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null || true; rm -rf "$rest_log" "$rest_root"' EXIT
set +e
"$PY" -m pytest -m "docker or agent_cli" -ra --durations=25 "$@"
engine_rc=$?
wait "$rest"
rest_rc=$?
set -e
echo "=== the tests that need neither the engine nor an agent CLI (run beside the ones above) ==="
cat "$rest_log"
# pytest's "no tests" (exit 5) is a failure of the whole suite, and of either half when no
# arguments narrowed it (a half that collects nothing would check nothing).
for rc in "$engine_rc" "$rest_rc"; do
  if [ "$rc" -ne 0 ] && { [ "$rc" -ne 5 ] || [ $# -eq 0 ]; }; then
    exit "$rc"
  fi
done
if [ "$engine_rc" -eq 5 ] && [ "$rest_rc" -eq 5 ]; then
  exit 5
fi
