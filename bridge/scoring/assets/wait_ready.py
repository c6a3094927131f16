#!/usr/bin/env python3
"""Wait until something answers HTTP on localhost:PORT (strict DSR), run in the tester container.

Usage: wait_ready.py PORT TIMEOUT_SECONDS. Prints one JSON object: ready, seconds, status, error.
Any HTTP status line counts as an answer: DSR asks whether the service deploys and speaks HTTP
on its port, not whether `/` is routed.
"""

from __future__ import annotations

import http.client
import json
import sys
import time


def main() -> int:
    port, timeout = int(sys.argv[1]), float(sys.argv[2])
    started = time.monotonic()
    last_error = "no attempt"
    while True:
        elapsed = time.monotonic() - started
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/", headers={"User-Agent": "rgbridge-dsr"})
            status = conn.getresponse().status
            conn.close()
            print(json.dumps({"ready": True, "seconds": round(elapsed, 3), "status": status, "error": None}))
            return 0
        except (OSError, http.client.HTTPException) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if elapsed >= timeout:
            print(json.dumps({"ready": False, "seconds": round(elapsed, 3), "status": None, "error": last_error}))
            return 1
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
