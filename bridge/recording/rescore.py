"""Re-score a recorded moment with the current grader, beside the recording's old results.

Apart from replay (which only reads) because it writes: a new result folder, the results
index, and a fresh seal when the recording was sealed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.errors import RecordingError
from bridge.fs.files import write_json_atomic
from bridge.recording import integrity
from bridge.recording.clock import iso, utcnow
from bridge.recording.moments import Moment, State, resolve_moment, state_at
from bridge.recording.reader import Recording, open_recording
from bridge.recording.replay import materialised
from bridge.recording.results import write_index
from bridge.recording.verify import verify_recording
from bridge.scoring.types import ScoreRequest, profile_choice

if TYPE_CHECKING:
    from bridge.scoring.result import ScoreResult
    from bridge.scoring.run.engine import ScoreOptions


def _now_stamp() -> str:
    return utcnow().strftime("%Y%m%dT%H%M%S%fZ")


def load_task_for(task_id: str, catalog: Any | None) -> Any:
    """The task a recording names, from `catalog` (default: the shipped tasks)."""
    if catalog is None:
        from bridge.tasks.catalog import Catalog

        catalog = Catalog.from_options()
    return catalog.get(task_id)


def score_moment(
    rec: Recording, moment: Moment, *, task: Any, request: ScoreRequest, options: ScoreOptions | None = None
) -> tuple[ScoreResult, State]:
    """Materialise a moment into a temp dir and score it with the current grader."""
    from bridge.scoring.run.engine import score_repo  # lazy: docker only when scoring

    state = state_at(rec, moment)
    with materialised(rec, state, "rgbridge-replay-") as repo:
        result = score_repo(task, repo, request, options)
    return result, state


def rescore(
    rec_dir: Path | str,
    *,
    profile: str = "both",
    at: str = "submission",
    catalog: Any | None = None,
    use_cache: bool = False,
    scoring: ScoreOptions | None = None,
    progress: Callable[[str], None] | None = None,
    verify_first: bool = True,
) -> Path:
    """Re-score a moment with the current grader; returns the new result.json path.

    The result goes beside the old ones in `results/rescore-<UTC stamp>-<grader>-<profile>/`
    (result.json, logs/, label.json) and `results/index.json` is rewritten. A recording that
    fails verification is refused (`verify_first=False` overrides); a sealed one is re-sealed.
    """
    from bridge.scoring.result import GRADER_VERSION

    rec_dir = Path(rec_dir)
    sealed = (rec_dir / integrity.INTEGRITY_NAME).is_file()
    if verify_first:
        report = verify_recording(rec_dir)
        if not report.ok:
            raise RecordingError(f"{rec_dir}: recording fails verification ({report.problems[0]}); not rescoring")
    rec = open_recording(rec_dir)
    moment = resolve_moment(rec, at)
    task = load_task_for(rec.meta.task_id, catalog)
    results = rec_dir / "results"
    results.mkdir(exist_ok=True)
    safe_grader = re.sub(r"[^A-Za-z0-9.]+", "_", GRADER_VERSION)
    name = f"rescore-{_now_stamp()}-{safe_grader}-{profile}"
    tmp_out = results / f".{name}.partial"
    shutil.rmtree(tmp_out, ignore_errors=True)
    tmp_out.mkdir()
    try:
        from bridge.scoring.run.engine import ScoreOptions  # lazy: docker only when scoring

        request = ScoreRequest(
            output_dir=tmp_out,
            run_id=f"rescore-{rec.meta.session_id}"[:60],
            profile=profile_choice(profile),
            use_cache=use_cache,
        )
        result, state = score_moment(
            rec, moment, task=task, request=request, options=replace(scoring or ScoreOptions(), progress=progress)
        )
        label = {
            "kind": "rescore",
            "grader_version": getattr(result, "grader_version", GRADER_VERSION),
            "profile": profile,
            "moment": moment.to_dict(),
            "tree_hash": state.tree_hash(),
            "base_commit": state.base_commit,
            "task_hash_recorded": rec.meta.task_hash,
            "task_hash_now": task.content_hash,
            "task_changed": bool(rec.meta.task_hash) and rec.meta.task_hash != task.content_hash,
            "use_cache": use_cache,
            "created_at": iso(utcnow()),
        }
        write_json_atomic(tmp_out / "label.json", label)
        final = results / name
        os.replace(tmp_out, final)
    except BaseException:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise
    write_index(rec_dir)
    if sealed:
        integrity.seal_recording(rec_dir)
    return final / "result.json"
