"""CLI verbs of the sessions group."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Registered verbs of this group (filled in as capabilities land)."""
