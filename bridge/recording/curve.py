"""Score over time: Pass@1, DSR and AC at N moments of a session (`rgbridge curve`).

The moments are spread evenly in wall-clock time from the recorder's first checkpoint to the
submission: point i of N sits at start + i/N of the way, and the last point is the submission
commit itself. Each moment is materialised and scored with the current grader in a thread pool;
moments with the same tree are scored once (and the engine's result cache, keyed by snapshot
hash, makes re-runs cheap). The curve is stored as `results/curve-<stamp>-<grader>-<profile>.json`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.errors import RecordingError
from bridge.fs.files import write_json_atomic
from bridge.recording.clock import iso, parse_iso, utcnow
from bridge.recording.event_model import Checkpoint
from bridge.recording.moments import Moment, resolve_moment, state_at
from bridge.recording.reader import Recording, open_recording
from bridge.recording.replay import materialised
from bridge.recording.rescore import load_task_for
from bridge.recording.results import write_index
from bridge.recording.timeline import SPARK, fmt_secs
from bridge.scoring.types import ScoreRequest, profile_choice

if TYPE_CHECKING:
    from bridge.scoring.run.engine import ScoreOptions

CURVE_PROFILES = ("strict", "compat")


def curve_moments(rec: Recording, points: int) -> list[Moment]:
    if points < 1:
        raise RecordingError("--points must be at least 1")
    if rec.meta.submission is None:
        raise RecordingError(f"{rec.dir}: session was never submitted; a curve ends at the submission")
    first_ck = next((e for e in rec.events if isinstance(e, Checkpoint)), None)
    start = parse_iso(first_ck.t) if first_ck else rec.started
    end = parse_iso(rec.meta.submission.at)
    out: list[Moment] = []
    for i in range(1, points + 1):
        if i == points:
            out.append(resolve_moment(rec, "submission"))
        else:
            when = start + timedelta(seconds=(end - start).total_seconds() * i / points)
            out.append(resolve_moment(rec, iso(when)))
    return out


def _point(prof: Any) -> dict[str, Any]:
    ac = prof.api_coverage.score if prof.api_coverage is not None else None
    dyn = prof.dynamic_api_coverage.score if prof.dynamic_api_coverage is not None else None
    return {
        "outcome": prof.outcome,
        "dsr": bool(prof.dsr.success),
        "pass_at_1": prof.pass_at_1.score,
        "passed": prof.pass_at_1.passed,
        "total": prof.pass_at_1.total,
        "ac": ac,
        "dynamic_ac": dyn,
    }


def compute_curve(
    rec_dir: Path | str,
    *,
    points: int = 5,
    workers: int = 2,
    profile: str = "strict",
    catalog: Any | None = None,
    scoring: ScoreOptions | None = None,
    use_cache: bool = True,
    save: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score N moments; returns the curve (and writes it into results/ when `save`)."""
    if profile not in CURVE_PROFILES:
        raise RecordingError(f"curve profile must be one of {', '.join(CURVE_PROFILES)}")
    if workers < 1:
        raise RecordingError("--workers must be at least 1")
    from bridge.scoring.run.engine import score_repo  # lazy: docker only when scoring

    chosen = profile_choice(profile)
    rec_dir = Path(rec_dir)
    rec = open_recording(rec_dir)
    task = load_task_for(rec.meta.task_id, catalog)
    moments = curve_moments(rec, points)
    states = [state_at(rec, m) for m in moments]
    hashes = [s.tree_hash() for s in states]
    unique: dict[str, int] = {}
    for i, h in enumerate(hashes):
        unique.setdefault(h, i)
    say = progress or (lambda _m: None)

    def score(index: int) -> Any:
        with materialised(rec, states[index], "rgbridge-curve-") as repo:
            say(f"point {index + 1}/{points}: scoring {hashes[index][:12]}")
            request = ScoreRequest(
                output_dir=repo.parent / "out",
                run_id=f"curve-{rec.meta.session_id}-{index}"[:60],
                profile=chosen,
                use_cache=use_cache,
            )
            return score_repo(task, repo, request, scoring)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rgbridge-curve") as pool:
        futures = {h: pool.submit(score, i) for h, i in unique.items()}
        scored = {h: f.result() for h, f in futures.items()}

    from bridge.scoring.result import GRADER_VERSION

    rows = []
    for i, (m, st, h) in enumerate(zip(moments, states, hashes, strict=True)):
        result = scored[h]
        rows.append(
            {
                "index": i + 1,
                "moment": m.to_dict(),
                "tree_hash": h,
                "files": len(st.files),
                "snapshot_hash": result.snapshot_hash,
                "shared_with": unique[h] + 1 if unique[h] != i else None,
                **_point(result.profile(profile)),
            }
        )
    curve = {
        "kind": "curve",
        "session_id": rec.meta.session_id,
        "task_id": rec.meta.task_id,
        "profile": profile,
        "grader_version": GRADER_VERSION,
        "points": rows,
        "distinct_snapshots": len(unique),
        "created_at": iso(utcnow()),
    }
    if save:
        curve["path"] = str(save_curve(rec_dir, curve).relative_to(rec_dir))
    return curve


def save_curve(rec_dir: Path, curve: dict[str, Any]) -> Path:
    from bridge.recording import integrity

    results = rec_dir / "results"
    results.mkdir(exist_ok=True)
    sealed = (rec_dir / integrity.INTEGRITY_NAME).is_file()
    grader = re.sub(r"[^A-Za-z0-9.]+", "_", str(curve["grader_version"]))
    path = results / f"curve-{utcnow().strftime('%Y%m%dT%H%M%S%fZ')}-{grader}-{curve['profile']}.json"
    write_json_atomic(path, curve)
    write_index(rec_dir)
    if sealed:
        integrity.seal_recording(rec_dir)
    return path


def latest_curve(rec_dir: Path | str) -> dict[str, Any] | None:
    """The newest stored curve of a recording, or None."""
    files = sorted((Path(rec_dir) / "results").glob("curve-*.json"))
    for path in reversed(files):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("points"), list):
            return data
    return None


def _bar(value: float | None, width: int = 10) -> str:
    if value is None:
        return "n/a".ljust(width)
    full = value * width
    n = int(full)
    rest = full - n
    partial = " ▏▎▍▌▋▊▉"[int(rest * 8)] if n < width else ""
    return ("█" * n + partial).ljust(width)


def render_curve(curve: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    pts = curve["points"]
    t = Table(
        title=f"{curve['task_id']} — {curve['profile']} profile, grader {curve['grader_version']}", title_justify="left"
    )
    for col in ("#", "wall", "working", "files", "outcome", "DSR", "Pass@1", "", "AC"):
        t.add_column(col, justify="right" if col in ("#", "files") else "left")
    for p in pts:
        m = p["moment"]
        t.add_row(
            str(p["index"]),
            fmt_secs(m["wall_seconds"]),
            fmt_secs(m["working_seconds"]),
            str(p["files"]),
            str(p["outcome"]),
            "PASS" if p["dsr"] else "FAIL",
            f"{p['passed']}/{p['total']} {p['pass_at_1']:.2f}",
            _bar(p["pass_at_1"]),
            "-" if p["ac"] is None else f"{p['ac']:.2f}",
        )
    console.print(t)

    def spark(values: list[float]) -> str:
        return "".join(SPARK[min(len(SPARK) - 1, int(max(0.0, v) * (len(SPARK) - 1) + 0.5))] for v in values)

    rows = 8
    p1 = [float(p["pass_at_1"]) for p in pts]
    console.print("[bold]Pass@1 over time[/] (1.0 at the top)", highlight=False)
    for r in range(rows, 0, -1):
        line = "".join("██ " if v * rows >= r - 0.5 and v > 0 else "   " for v in p1)
        console.print(f"  {'1.0' if r == rows else '   '} │{line}", highlight=False)
    console.print("      └" + "───" * len(p1), highlight=False)
    console.print(
        f"  Pass@1 │{spark(p1)}│  DSR │{spark([1.0 if p['dsr'] else 0.0 for p in pts])}│  "
        f"AC │{spark([float(p['ac'] or 0.0) for p in pts])}│",
        highlight=False,
    )
    console.print(f"[dim]{curve.get('distinct_snapshots')} distinct snapshot(s) scored for {len(pts)} point(s)[/]")
