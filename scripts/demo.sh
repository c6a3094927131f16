#!/usr/bin/env bash
# The main job: a scripted MCP client solves a shipped task through the bridge and gets scored.
# Installs and builds only what the demo uses (setup.sh --demo: no test extras; the Python
# images only, the tester's wheels fetched while the base image builds) and prints each step's time.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step_start=$SECONDS
step() { echo "demo: [$((SECONDS - started)) s] $*" >&2; step_start=$SECONDS; }
done_step() { echo "demo: [$((SECONDS - started)) s]   $1 took $((SECONDS - step_start)) s" >&2; }

step "setup: the project, without its test extras"
bash scripts/setup.sh --demo
done_step setup
PY=.venv/bin/python  # made by scripts/setup.sh
step "images: the base and tester images (no Java: the demo's task is Python)"
"$PY" -m bridge.cli images build --python-only
done_step images
step "the demo: an MCP client solves kv-ledger, submits, waits for the score"
rc=0
"$PY" demo/run_demo.py "$@" || rc=$?
done_step "demo run"
echo "demo: total $((SECONDS - started)) s" >&2
exit "$rc"
