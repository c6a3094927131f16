#!/bin/bash
# rgbridge strict-profile service launcher (runs in the service container, cwd /repo).
# Start-script discovery and fallbacks follow upstream (docs/upstream.md §2.5), except that
# vendored/virtualenv folders are never searched for a start.sh (W7). The launcher outlives
# start.sh: a start.sh that daemonises and exits is fine as long as the port answers, so after
# it exits we record its exit code and keep the container alive.
set -u
cd /repo || exit 2
PORT="${SERVICE_PORT:-8080}"
export SERVICE_PORT="$PORT" PORT
STATE=/tmp/rgbridge-service
mkdir -p "$STATE"

script=""
for candidate in ./start.sh ./scripts/start.sh ./bin/start.sh; do
  if [ -f "$candidate" ]; then script="$candidate"; break; fi
done
if [ -z "$script" ]; then
  script=$(find . -maxdepth 3 \( -name node_modules -o -name .venv -o -name venv -o -name .git \
           -o -name site-packages -o -name vendor -o -name third_party \) -prune -o \
           -name start.sh -type f -print 2>/dev/null | head -1)
fi

if command -v python >/dev/null 2>&1; then PY=python; else PY=python3; fi
if [ -n "$script" ]; then
  echo "rgbridge: starting $script" >&2
  echo "$script" > "$STATE/entry"
  bash "$script" &
else
  entry=""
  if [ "${REPO_LANG:-python}" = "java" ]; then
    # upstream's Java fallback, for every framework
    if [ -f pom.xml ]; then entry="mvn spring-boot:run -q"; fi
  else
    for f in app.py main.py run.py; do
      if [ -f "$f" ]; then entry="$PY $f"; break; fi
    done
    if [ -z "$entry" ] && [ -f manage.py ]; then entry="$PY manage.py runserver 0.0.0.0:$PORT"; fi
    if [ -z "$entry" ] && [ -f server.py ]; then entry="$PY server.py"; fi
  fi
  if [ -z "$entry" ] && [ "${REPO_LANG:-python}" != "java" ]; then
    for m in main app server api; do
      if $PY -c "import $m" >/dev/null 2>&1; then
        entry="$PY -m uvicorn $m:app --host 0.0.0.0 --port $PORT"; break
      fi
    done
  fi
  if [ -z "$entry" ]; then
    echo "none" > "$STATE/entry"
    echo "rgbridge: no service entry point found" >&2
    exec sleep infinity
  fi
  echo "$entry" > "$STATE/entry"
  echo "rgbridge: no start.sh; falling back to: $entry" >&2
  $entry &
fi
wait $!
echo $? > "$STATE/exit_code"
exec sleep infinity
