"""Compare a recording with its seal: each file, the events chain and the store as they were
sealed in `integrity.json` (bridge/recording/integrity.py) against what is on disk now.

A difference is a problem, except records a finished session may still append after an intact
sealed prefix (`APPENDABLE`), which are a warning.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from bridge.recording.integrity import (
    CHAIN_MARK_EVERY,
    CHAIN_SEED,
    INTEGRITY_VERSION,
    events_chain,
    recording_files,
    store_digest,
)

#: records a finished session may still append (a client polling get_result, a server stopping);
#: appended after an intact sealed prefix they are reported as a warning, anything else fails
APPENDABLE = frozenset({"mcp_call", "log_opened", "detach"})


def compare_seal(rec_dir: Path, sealed: dict[str, Any], problems: list[str], warnings: list[str]) -> None:
    """Append one line per difference between the recording now and its seal `sealed`."""
    compare_files(rec_dir, sealed, problems)
    compare_events(rec_dir, sealed, problems, warnings)
    compare_store(rec_dir, sealed, problems)
    if sealed.get("integrity_version") not in (None, INTEGRITY_VERSION):
        warnings.append(f"integrity.json version {sealed.get('integrity_version')} is not {INTEGRITY_VERSION}")


def compare_files(rec_dir: Path, sealed: dict[str, Any], problems: list[str]) -> None:
    """Files outside the store removed, added or changed since sealing (events.jsonl aside)."""
    now_files = recording_files(rec_dir)
    old_files = sealed.get("files") or {}
    for rel in sorted(set(old_files) | set(now_files)):
        if rel == "events.jsonl":
            continue  # the chain says where (compare_events)
        if rel not in now_files:
            problems.append(f"{rel}: removed after sealing")
        elif rel not in old_files:
            problems.append(f"{rel}: added after sealing")
        elif old_files[rel] != now_files[rel]:
            problems.append(f"{rel}: changed after sealing")


def compare_events(rec_dir: Path, sealed: dict[str, Any], problems: list[str], warnings: list[str]) -> None:
    """events.jsonl against its sealed hash chain: where it differs, and whether that is benign."""
    ev_path = rec_dir / "events.jsonl"
    old_chain = sealed.get("events") or {}
    if ev_path.is_file():
        chain = events_chain(ev_path)
        if chain["head"] != old_chain.get("head") or chain["lines"] != old_chain.get("lines"):
            message, benign = locate_event_change(ev_path, old_chain, chain)
            (warnings if benign else problems).append(message)
    elif "events.jsonl" in (sealed.get("files") or {}):
        problems.append("events.jsonl: removed after sealing")


def compare_store(rec_dir: Path, sealed: dict[str, Any], problems: list[str]) -> None:
    """The store's refs, non-object files and object digest against the seal."""
    old_store = sealed.get("store") or {}
    now_store = store_digest(rec_dir / "store")
    old_refs, now_refs = old_store.get("refs") or {}, now_store["refs"]
    problems.extend(_compare_digests(old_refs, now_refs, "ref ", show_values=True))
    old_sf, now_sf = old_store.get("files") or {}, now_store["files"]
    problems.extend(
        _compare_digests(
            {k: v for k, v in old_sf.items() if not _is_ref_file(k)},  # refs are reported above
            {k: v for k, v in now_sf.items() if not _is_ref_file(k)},
            "",
        )
    )
    old_obj, now_obj = old_store.get("objects") or {}, now_store["objects"]
    if old_obj.get("digest") != now_obj["digest"]:
        problems.append(
            f"store/objects: object files changed after sealing ({old_obj.get('count')} sealed, {now_obj['count']} now)"
        )


def locate_event_change(path: Path, old: dict[str, Any], now: dict[str, Any]) -> tuple[str, bool]:
    """Where events.jsonl differs from its seal, and whether the change is benign (only
    `APPENDABLE` records appended after an intact sealed prefix: e.g. get_result polls)."""
    every = int(old.get("mark_every") or CHAIN_MARK_EVERY)
    old_marks = old.get("marks") or {}
    old_lines = int(old.get("lines") or 0)
    # Replay the chain; the first mark that differs bounds the first altered line.
    h = hashlib.sha256(CHAIN_SEED).digest()
    n = 0
    appended: list[bytes] = []
    with open(path, "rb") as fh:
        for raw in fh:
            if n >= old_lines:
                appended.append(raw)
                continue
            h = hashlib.sha256(h + raw.rstrip(b"\n")).digest()
            n += 1
            if n % every == 0 and str(n) in old_marks and old_marks[str(n)] != h.hex():
                return f"events.jsonl: altered after sealing (first difference in lines {n - every + 1}–{n})", False
            if n == old_lines and h.hex() != old.get("head"):
                lo = (n - 1) // every * every + 1
                return f"events.jsonl: altered after sealing (first difference in lines {lo}–{n})", False
    if n < old_lines:
        return f"events.jsonl: truncated after sealing ({old_lines} lines sealed, {n} now)", False
    types: list[str] = []
    for raw in appended:
        try:
            types.append(str(json.loads(raw).get("type")))
        except (ValueError, AttributeError, UnicodeDecodeError):
            types.append("(unparsable)")
    kinds = ", ".join(sorted(set(types)))
    benign = all(t in APPENDABLE for t in types)
    return (f"events.jsonl: {len(appended)} line(s) appended after sealing (after line {old_lines}: {kinds})", benign)


def _is_ref_file(rel: str) -> bool:
    return rel.startswith("refs/") or rel == "packed-refs"


def _compare_digests(old: dict[str, str], now: dict[str, str], what: str, *, show_values: bool = False) -> list[str]:
    """One problem line per store entry removed, added or changed since sealing."""
    out = []
    for key in sorted(set(old) | set(now)):
        if key not in now:
            out.append(f"store/{key}: {what}removed after sealing")
        elif key not in old:
            out.append(f"store/{key}: {what}added after sealing")
        elif old[key] != now[key]:
            detail = f" ({old[key][:12]} → {now[key][:12]})" if show_values else ""
            out.append(f"store/{key}: {what}changed after sealing{detail}")
    return out
