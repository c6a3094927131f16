#!/usr/bin/env bash
# Build a wheel, install it into a fresh venv (deps from the package index) and use it from a
# folder outside the checkout: the shipped tasks must be found as package data, the demo must
# pass, and nothing may be written into the install folder (bridge/locations.py).
# Usage: scripts/wheel_smoke.sh [--no-demo]
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
PY="${PYTHON:-python3}"
# Images live in the engine keyed by recipe hash; the rootfs cache is shared with the caller's so
# a warm machine does not rebuild them (a fresh one builds them here).
cache="${RGBRIDGE_CACHE:-$HOME/.cache/rgbridge}"
work=$(mktemp -d /tmp/rgbridge-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/dist" .
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$work"/dist/*.whl
mkdir -p "$work/run" "$work/home"
cd "$work/run"
export HOME="$work/home" RGBRIDGE_CACHE="$cache"
unset XDG_DATA_HOME XDG_CACHE_HOME RGBRIDGE_TASKS RGBRIDGE_RECORDINGS RGBRIDGE_HOME PYTHONPATH
site=$("$work/venv/bin/python" -c "import bridge, pathlib; print(pathlib.Path(bridge.__file__).parent.parent)")
case "$site" in "$work/venv/"*) ;; *) echo "wheel smoke: bridge imported from $site, not the venv" >&2; exit 1;; esac
snapshot() { find "$site/bridge" "$site/mcp_server" "$site/rgbridge_tasks" -name __pycache__ -prune -o -print | sort; }
snapshot > "$work/before"
"$work/venv/bin/rgbridge" tasks list --json > tasks.json
"$work/venv/bin/python" - <<'PY'
import json
ids = {t["id"] for t in json.load(open("tasks.json"))["tasks"]}
assert {"kv-ledger", "library-api"} <= ids, ids
print("wheel smoke: shipped tasks found:", ", ".join(sorted(ids)))
PY
if [ "${1:-}" != "--no-demo" ]; then
  "$work/venv/bin/rgbridge" images build --python-only
  "$work/venv/bin/python" "$checkout/demo/run_demo.py"
fi
snapshot > "$work/after"
if ! diff -u "$work/before" "$work/after"; then
  echo "wheel smoke: files appeared in the install folder" >&2; exit 1
fi
echo "wheel smoke: ok"
