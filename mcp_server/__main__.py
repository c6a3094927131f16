"""`python -m mcp_server [serve options]`: the same as `rgbridge serve` (what IDE configs launch)."""

from __future__ import annotations

import sys

from mcp_server.cli import main

if __name__ == "__main__":
    sys.exit(main())
