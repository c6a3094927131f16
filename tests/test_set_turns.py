"""The profiles of one score take turns building never-seen dependency sets (workdir.SetTurns):
compat's set first, strict's once it is ready (bounded), a set on disk never waits. Unit tests,
then a real score of both profiles on a never-seen set (real engine and index)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path

from bridge.scoring.images.sets import twin
from bridge.scoring.run import workdir
from bridge.scoring.run.workdir import SetTurns

#: The limit of the waits below: a wait that should not happen would last all of it, so "less than
#: half the limit" tells no wait from one whatever the machine's load (a fixed 0.1 s is a scheduling delay there).
LIMIT = 20.0


def _waited(turns: SetTurns, profile: str) -> float:
    started = time.monotonic()
    turns.wait(profile)
    return time.monotonic() - started


def test_compat_goes_first_only_when_both_profiles_score() -> None:
    assert SetTurns(["strict", "compat"]).first == "compat"
    assert SetTurns(["compat"]).first is None
    assert SetTurns(["strict"]).first is None
    assert SetTurns().first is None
    assert SetTurns(["strict", "compat"]).paired and not SetTurns(["compat"]).paired  # a twin is wanted
    assert _waited(SetTurns(["strict"], limit=LIMIT), "strict") < LIMIT / 2


def test_strict_waits_for_compats_set_and_compat_never_waits() -> None:
    turns = SetTurns(["strict", "compat"], limit=LIMIT)
    assert _waited(turns, "compat") < LIMIT / 2
    timer = threading.Timer(0.5, turns.done, args=("compat",))
    started = time.monotonic()  # before the timer starts: a late start of the wait cannot shorten it
    timer.start()
    turns.wait("strict")
    took = time.monotonic() - started
    assert 0.45 < took < LIMIT / 2  # until compat's set was ready, not the limit
    assert _waited(turns, "strict") < LIMIT / 2  # its turn came: a rebuild does not wait again


def test_the_wait_is_bounded_and_only_the_first_profile_releases_it(monkeypatch) -> None:
    monkeypatch.setattr(workdir, "TURN_LIMIT", 0.3)
    turns = SetTurns(["compat", "strict"])
    turns.done("strict")  # not the first profile: releases nothing
    took = _waited(turns, "strict")
    assert 0.25 < took < LIMIT / 2  # the limit ended it (a wait for ever would fail by pytest's timeout)


def _phase_times(log: Path, phase: str) -> list[float]:
    text = log.read_text(encoding="utf-8")
    return [float(m) for m in re.findall(rf"^RGBRIDGE_PHASE {phase} ([0-9.]+)$", text, flags=re.M)]


def test_stricts_build_starts_once_compats_set_is_installed(
    docker_client, base_image, index_needed, tasks_dir, tmp_path, monkeypatch, score_sets
) -> None:
    import shutil

    from bridge.scoring.run.engine import ScoreOptions, score_repo
    from bridge.scoring.types import ScoreRequest
    from bridge.tasks.catalog import Catalog

    monkeypatch.setattr(workdir, "TURN_LIMIT", 300.0)  # a slow first download must not end the wait
    monkeypatch.setenv("RGBRIDGE_CLOSEST_SET", "never")
    # strict builds its own set when compat's build cannot make it as its twin (no room for it
    # in the disk budget here; tests/test_twin_sets.py has the twin)
    monkeypatch.setattr(twin, "room_ahead", lambda client, sets: False)
    task = Catalog.from_options(tasks_dir).get("library-api")
    repo = tmp_path / "repo"
    shutil.copytree(task.solution_dir, repo)
    reqs = (repo / "requirements.txt").read_text(encoding="utf-8") + f"fastapi>=0.0.{uuid.uuid4().int % 10**12}\n"
    (repo / "requirements.txt").write_text(reqs, encoding="utf-8")
    score_sets(base_image, repo, task)
    result = score_repo(
        task,
        repo,
        ScoreRequest(profile="both", use_cache=False, output_dir=tmp_path / "out"),
        ScoreOptions(client=docker_client),
    )
    assert result.profile("compat").pass_at_1.score == 1.0
    assert result.profile("strict").pass_at_1.score == 1.0
    logs = tmp_path / "out" / "logs"
    compat_installed = _phase_times(logs / "compat" / "build.log", "installed")
    strict_start = _phase_times(logs / "strict" / "build.log", "start")
    assert len(compat_installed) == 2 and len(strict_start) == 1, "both sets were built"
    # strict's build container started after compat's last file was installed
    assert strict_start[0] > compat_installed[-1]
    # pip's check of each set ran and its verdict is in the set's build log
    for profile in ("strict", "compat"):
        assert len(_phase_times(logs / profile / "build.log", "checked")) == 1, profile
