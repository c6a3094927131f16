#!/usr/bin/env bash
# The main job: a scripted MCP client solves a shipped task through the bridge and gets scored.
set -euo pipefail
cd "$(dirname "$0")/.."
RGBRIDGE_SKIP_CHROMIUM=1 bash scripts/setup.sh
PY=.venv/bin/python  # made by scripts/setup.sh
"$PY" -m bridge.cli images build
exec "$PY" demo/run_demo.py "$@"
