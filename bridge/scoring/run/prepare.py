"""Dependency sets prepared ahead: while one repo's service and tests run, the next repos' sets are
resolved, downloaded and installed, so a one-worker `evaluate` waits on the network less.

Preparing a set is mostly network and disk, running a repo mostly CPU (issue 41). With one
worker, ``SetsAhead`` builds the sets of up to ``ahead`` repos after the one being scored, each
in a thread of its own, with exactly the arguments the profiles' runners give
``ensure_deps_image`` (bridge/scoring/python/strict.py, compat.py): when the runner gets there,
its set is on disk (or being built: it waits on the set's build lock instead of building again).

The disk budget: a repo's sets are built ahead only when they fit beside every set in use and
the current score's (``disk.room_ahead``); a prepared set is held (a lease, as a score holds its
sets) until its repo's score ends, so no eviction removes it before it is used. The order of the
results is the runner's, unchanged. A failure here only means the runner builds the set itself
and reports what went wrong, as without this module.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker

from bridge.errors import ScoringError
from bridge.fs.hashing import tree_hash
from bridge.scoring.images.disk import holding, room_ahead
from bridge.scoring.images.sets import ensure_deps_image
from bridge.scoring.python.compat import compat_base_image, compat_extras
from bridge.scoring.run.engine import ResultCache, cache_key, profiles_for
from bridge.scoring.run.workdir import requirements_of, stage_repo
from bridge.tasks.model import Task

#: how many repos after the one being scored get their sets built ahead (0: none)
AHEAD_ENV = "RGBRIDGE_PREPARE_AHEAD"
DEFAULT_AHEAD = 3


def ahead_from_env() -> int:
    raw = os.environ.get(AHEAD_ENV, "").strip()
    if not raw:
        return DEFAULT_AHEAD
    try:
        return max(0, int(raw))
    except ValueError as exc:
        raise ScoringError(f"{AHEAD_ENV} must be a whole number of repos, not {raw!r}") from exc


@dataclass
class Prepared:
    """What happened to one repo's sets: ``state`` is ``ready``, ``skipped`` (why in ``note``) or
    ``failed``; times are ``time.monotonic()``."""

    task_id: str
    state: str = "pending"
    note: str = ""
    started: float = 0.0
    ended: float = 0.0
    sets: list[str] = field(default_factory=list)


class SetsAhead:
    """The sets of the repos after the one being scored, built ahead (see the module docstring)."""

    def __init__(
        self,
        client: docker.DockerClient,
        todo: Sequence[tuple[Task, Path]],
        *,
        profile: str,
        use_cache: bool,
        wheelhouse: Path | None,
        cache: ResultCache | None = None,
        ahead: int = DEFAULT_AHEAD,
        progress: Callable[[str, str], None] | None = None,
    ) -> None:
        self._client = client
        self._todo = list(todo)
        self._profiles = profiles_for(profile)
        self._use_cache = use_cache
        self._wheelhouse = wheelhouse
        self._cache = cache or ResultCache()
        self._ahead = ahead
        self._progress = progress
        self._guard = threading.Lock()
        self._threads: dict[int, threading.Thread] = {}
        self._release: dict[int, threading.Event] = {}
        self.prepared: dict[int, Prepared] = {}

    def starting(self, index: int) -> None:
        """Repo ``index`` is being scored now: build ahead for the ``ahead`` repos after it."""
        with self._guard:
            for k in range(index + 1, min(len(self._todo), index + 1 + self._ahead)):
                if k in self._threads or self._todo[k][0].lang != "python":
                    continue
                self._release[k] = threading.Event()
                self.prepared[k] = Prepared(self._todo[k][0].id)
                thread = threading.Thread(target=self._prepare, args=(k,), name=f"rgbridge-ahead-{k}", daemon=True)
                self._threads[k] = thread
                thread.start()

    def finished(self, index: int) -> None:
        """Repo ``index``'s score ended: its prepared sets need no holding any more."""
        with self._guard:
            event = self._release.get(index)
        if event is not None:
            event.set()

    def close(self, timeout: float = 60.0) -> None:
        """Release every hold and wait (at most ``timeout``) for builds still running."""
        with self._guard:
            events, threads = list(self._release.values()), list(self._threads.values())
        for event in events:
            event.set()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _say(self, task_id: str, message: str) -> None:
        if self._progress is not None:
            self._progress(task_id, message)

    def _prepare(self, index: int) -> None:
        task, repo = self._todo[index]
        record = self.prepared[index]
        record.started = time.monotonic()
        self._say(task.id, "preparing sets ahead")
        try:
            with holding():  # the sets stay in use (never evicted) until this repo's score ends
                self._build(task, repo, record)
                record.ended = time.monotonic()
                if record.state == "ready":
                    self._say(task.id, f"sets prepared ahead in {record.ended - record.started:.1f}s")
                self._release[index].wait()
        except Exception as exc:  # whatever it is, the runner meets it again and reports it
            record.state, record.note, record.ended = "failed", f"{type(exc).__name__}: {exc}", time.monotonic()
            self._say(task.id, "sets not prepared ahead (the score builds them)")

    def _build(self, task: Task, repo: Path, record: Prepared) -> None:
        with tempfile.TemporaryDirectory(prefix="rgbridge-ahead-") as tmp:
            staged = Path(tmp) / "snapshot"
            stage_repo(repo, staged)  # as score_repo stages it: the same requirements, read safely
            profiles = self._profiles_to_score(task, staged)
            if not profiles:
                record.state, record.note = "skipped", "every profile's result is cached"
                return
            if not room_ahead(self._client, len(profiles)):
                record.state, record.note = "skipped", "the disk budget has no room for sets built ahead"
                return
            requirements = requirements_of(staged)
            timeout = task.manifest.timeouts.build
            # The runners' own arguments (strict.py, compat.py), so the keys are the same sets.
            if "compat" in profiles:
                base = compat_base_image(self._client, None)
                extras = compat_extras(task, staged)
                built = ensure_deps_image(
                    self._client,
                    requirements,
                    extra_packages=extras,
                    wheelhouse=self._wheelhouse,
                    base=base,
                    timeout=timeout,
                    env_volume=True,
                    twin="strict" in profiles and base is None,  # strict's set, as the runner's does
                )
                record.sets.append(built.tag)
            if "strict" in profiles:
                built = ensure_deps_image(
                    self._client, requirements, wheelhouse=self._wheelhouse, timeout=timeout, env_volume=True
                )
                record.sets.append(built.tag)
            record.state = "ready"

    def _profiles_to_score(self, task: Task, staged: Path) -> list[str]:
        if not self._use_cache:
            return list(self._profiles)
        snapshot = tree_hash(staged, frozenset())
        return [p for p in self._profiles if self._cache.get(cache_key(snapshot, task.content_hash, p)) is None]
