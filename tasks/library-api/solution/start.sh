#!/bin/sh
# Start the library catalogue API in the foreground on the task port (tests expect 8081).
set -e
cd "$(dirname "$0")"
exec python3 -m uvicorn app.main:app --host 0.0.0.0 --port 8081 --no-access-log
