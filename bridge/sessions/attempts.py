"""Attempts: how many scored submissions an agent run may make per task, and Pass@k over them.

A *run* is one bridge process holding sessions (one `rgbridge serve`, or one `rgbridge session
start`): the sessions it started and the ones it re-attached. `rgbridge serve --run-id ID` names
the run instead, so it spans server restarts: every session of that run id in the recordings
folder counts (an evaluator pins it to keep a restart from buying a fresh attempt). By default a run gets one attempt
per task, so an agent cannot open several sessions for a task, submit each and hill-climb on the
scores `get_result` returns; `rgbridge serve --attempts N` allows N. An attempt is a session
that is open or was submitted (a session quit without scoring used no attempt). Each session
records its run id and attempt number, and reports give Pass@k per task when a run made k > 1
attempts of it, with the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language
Models Trained on Code", eq. 1): pass@k = 1 - C(n-c, k) / C(n, k) over n scored attempts of
which c solved the task (every golden test passed).

Workspaces of one run may not nest: a session whose folder lies inside (or contains) another
session's folder would see — and record — that session's files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.errors import PathError, SessionError

OPEN_STATES = ("active", "paused")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_run_id(text: str) -> str:
    if not _RUN_ID.fullmatch(text):
        raise SessionError(f"invalid run id {text[:80]!r}: letters, digits, '.', '_' and '-' (at most 64)")
    return text


@dataclass(frozen=True)
class HeldSession:
    """What the attempt rules need to know of a session this run holds."""

    session_id: str
    task_id: str
    workspace: Path
    state: str
    submitted: bool


def uses_attempt(s: HeldSession) -> bool:
    return s.state in OPEN_STATES or s.submitted


def next_attempt(task_id: str, held: Iterable[HeldSession], limit: int) -> int:
    """The attempt number a new session of `task_id` gets, or SessionError past the limit."""
    mine = [s for s in held if s.task_id == task_id]
    used = [s for s in mine if uses_attempt(s)]
    if len(used) >= limit:
        open_ones = [s.session_id for s in used if s.state in OPEN_STATES]
        hint = f" (session {open_ones[0]} is still open)" if open_ones else ""
        raise SessionError(
            f"task {task_id} already used {len(used)} of {limit} attempt(s) in this run{hint}; "
            "one scored submission per task per run (start the server with --attempts N to allow more)"
        )
    return len(mine) + 1


def check_not_nested(workspace: Path, held: Iterable[HeldSession]) -> None:
    """Refuse a workspace inside, or containing, another session's workspace of this run."""
    for s in held:
        other = s.workspace
        if other == workspace:
            continue  # same folder: the open-session and non-empty checks decide
        if workspace.is_relative_to(other) or other.is_relative_to(workspace):
            raise PathError(
                f"workspace {workspace} overlaps the workspace {other} of session {s.session_id}: "
                "sessions of one run must use separate folders (neither inside the other)"
            )


def recorded_sessions_of_run(recordings_dir: Path, run_id: str, load: Callable[[Path], Any]) -> list[HeldSession]:
    """Sessions of `run_id` in the recordings folder (also those of earlier processes of the run);
    `load` reads a recording's session.json (bridge.sessions.live.load_record)."""
    from bridge.sessions.attach import is_session_id

    out: list[HeldSession] = []
    for rec_dir in sorted(p for p in recordings_dir.iterdir() if is_session_id(p.name)):
        try:
            record = load(rec_dir)
        except (SessionError, OSError):
            continue
        if record.run_id == run_id and record.session_id == rec_dir.name:
            out.append(
                HeldSession(
                    session_id=record.session_id,
                    task_id=record.task_id,
                    workspace=Path(record.workspace),
                    state=record.state,
                    submitted=record.submission is not None,
                )
            )
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from n attempts of which c succeeded (Chen et al. 2021, eq. 1)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # The product form of 1 - C(n-c, k) / C(n, k) (the paper's own numpy code): no factorials,
    # so it stays exact to float precision for any n.
    rest = 1.0
    for i in range(n - c + 1, n + 1):
        rest *= 1.0 - k / i
    return 1.0 - rest


def solved(summary: Mapping[str, Any] | None, profile: str) -> bool | None:
    """Whether a scored attempt passed every golden test in `profile` (None: not scored there)."""
    row = (summary or {}).get(profile)
    if not isinstance(row, Mapping):
        return None
    total, passed = row.get("total"), row.get("passed")
    if not isinstance(total, int) or not isinstance(passed, int) or total <= 0:
        return False
    return passed == total


def pass_at_k_table(attempts: Iterable[Mapping[str, Any]], profile: str) -> list[dict[str, Any]]:
    """Per (run, task) with more than one scored attempt: n, c and Pass@k for k = 1..n.

    `attempts` rows carry run_id, task_id, attempt and summary (summarize_result's shape)."""
    groups: dict[tuple[str, str], list[bool]] = {}
    for row in attempts:
        ok = solved(row.get("summary"), profile)
        if ok is None:
            continue
        groups.setdefault((str(row.get("run_id") or ""), str(row.get("task_id"))), []).append(ok)
    out = []
    for (run_id, task_id), results in sorted(groups.items()):
        n, c = len(results), sum(results)
        if n < 2:
            continue
        out.append(
            {
                "run_id": run_id,
                "task_id": task_id,
                "profile": profile,
                "n": n,
                "c": c,
                "pass_at_k": {str(k): round(pass_at_k(n, c, k), 4) for k in range(1, n + 1)},
            }
        )
    return out
