"""Where scoring jobs run: the Backend protocol shared by the local engine and a Ray cluster.

One job = one (snapshot, task, profile). The engine (`score_repo`) stages the repo, hashes it,
answers from the result cache and writes result.json; a backend only runs the jobs that missed
the cache and returns their `ProfileResult`s with each job's logs written under `job.log_dir`.
So the result cache key, the grader version and the report are the same whatever the backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, get_args

from bridge.errors import ScoringError
from bridge.scoring.types import Profile, ProgressFn

if TYPE_CHECKING:
    from bridge.scoring.java.layers import MavenSources
    from bridge.scoring.result import ProfileResult
    from bridge.tasks.model import Task

#: the backends by name (`--backend` of scoring and agent runs alike)
BackendName = Literal["local", "ray"]
BACKENDS: tuple[BackendName, ...] = get_args(BackendName)


class JobCancelled(ScoringError):
    """The run was interrupted while this job was queued or running; nothing is recorded for it."""


@dataclass(frozen=True)
class ScoringJob:
    task: Task
    snapshot: Path  # the staged tree on the driver (read-only for backends)
    snapshot_hash: str
    profile: Profile
    log_dir: Path  # where this profile's logs must end up on the driver
    run_id: str
    wheelhouse: Path | None = None
    maven: MavenSources | None = None
    progress: ProgressFn | None = None


class Backend(Protocol):
    name: str

    def run_jobs(self, jobs: Sequence[ScoringJob]) -> dict[str, ProfileResult]:
        """Run the jobs (profiles of one snapshot) and return their results by profile."""
        ...

    def default_workers(self) -> int:
        """How many repos `evaluate` keeps in flight when --workers is not given."""
        ...

    def activity(self) -> dict[str, int]:
        """Jobs running now, per node (for the progress display)."""
        ...

    def cancel(self) -> None:
        """Ctrl-C: stop queued and running jobs; their `run_jobs` calls raise JobCancelled."""
        ...

    def close(self) -> None: ...
