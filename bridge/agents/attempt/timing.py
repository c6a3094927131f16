"""Where an attempt's time went, read back from its recording: the scoring window (from the
submission to the last score) and how much of it overlapped the agent's run."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.recording.clock import parse_iso


def scoring_window(rec_dir: Path) -> tuple[float, float] | None:
    """From the submission to the last score of a recording (epoch seconds), from its events."""
    start = end = None
    try:
        lines = (rec_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
            at = parse_iso(str(event.get("t"))).timestamp()
        except (ValueError, AttributeError):
            continue
        if event.get("type") == "submit" and start is None:
            start = at
        elif event.get("type") in ("score", "score_failed"):
            end = at
    return (start, end) if start is not None and end is not None and end >= start else None


def scoring_span(rec_dir: Path) -> float | None:
    window = scoring_window(rec_dir)
    return round(window[1] - window[0], 3) if window else None


def overlap(a: tuple[float, float], b: tuple[float, float] | None) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) if b else 0.0
