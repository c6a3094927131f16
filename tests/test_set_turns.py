"""The profiles of one score take turns building never-seen dependency sets (workdir.SetTurns):
compat's set first at the default CPU weight; strict's build, started meanwhile, at a low one
until compat's set is ready (it no longer waits); a set on disk never builds. Unit tests, then a real score of both profiles
on a never-seen set (real engine and index)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from bridge.scoring.images.sets import DEFAULT_CPU_SHARES
from bridge.scoring.run import workdir
from bridge.scoring.run.workdir import YIELD_CPU_SHARES, SetTurns


class FakeContainer:
    def __init__(self, name: str) -> None:
        self.id = name
        self.shares: list[int] = []

    def update(self, *, cpu_shares: int) -> None:
        self.shares.append(cpu_shares)


def test_compat_goes_first_only_when_both_profiles_score() -> None:
    assert SetTurns(["strict", "compat"]).first == "compat"
    assert SetTurns(["compat"]).first is None
    assert SetTurns(["strict"]).first is None
    assert SetTurns().first is None
    assert SetTurns(["strict"]).priority("strict").shares() is None


def test_stricts_build_yields_until_compats_set_is_ready_then_gets_the_default_weight() -> None:
    turns = SetTurns(["strict", "compat"])
    assert turns.priority("compat").shares() is None  # compat never yields
    strict = turns.priority("strict")
    assert strict.shares() == YIELD_CPU_SHARES
    box = FakeContainer("strict-build")
    strict.started(box)
    turns.done("strict")  # not the first profile: changes nothing
    assert box.shares == []
    turns.done("compat")  # compat's set is ready: strict's build is on its own path now
    assert box.shares == [DEFAULT_CPU_SHARES]
    assert 0 < YIELD_CPU_SHARES < DEFAULT_CPU_SHARES
    assert turns.priority("strict").shares() is None  # a rebuild after it: the default weight


def test_a_build_whose_set_is_final_is_left_at_the_stores_weight() -> None:
    turns = SetTurns(["strict", "compat"])
    strict = turns.priority("strict")
    assert strict.shares() == YIELD_CPU_SHARES
    box = FakeContainer("strict-build")
    strict.started(box)
    strict.settled(box)  # its set is final: pip's check beside the score keeps its low weight
    turns.done("compat")
    assert box.shares == []


def test_a_build_started_as_compats_set_became_ready_is_raised_at_once() -> None:
    turns = SetTurns(["strict", "compat"])
    strict = turns.priority("strict")
    assert strict.shares() == YIELD_CPU_SHARES  # asked just before compat's set was ready
    turns.done("compat")
    box = FakeContainer("strict-build")
    strict.started(box)
    assert box.shares == [DEFAULT_CPU_SHARES]


def _phase_times(log: Path, phase: str) -> list[float]:
    text = log.read_text(encoding="utf-8")
    return [float(m) for m in re.findall(rf"^RGBRIDGE_PHASE {phase} ([0-9.]+)$", text, flags=re.M)]


def test_stricts_build_runs_beside_compats_at_a_low_weight(
    docker_client, base_image, index_needed, tasks_dir, tmp_path, monkeypatch, score_sets
) -> None:
    import shutil

    from bridge.scoring.images.sets import env_volume
    from bridge.scoring.run.engine import ScoreOptions, score_repo
    from bridge.scoring.types import ScoreRequest
    from bridge.tasks.catalog import Catalog

    monkeypatch.setenv("RGBRIDGE_CLOSEST_SET", "never")
    seen: list[tuple[tuple[str, ...], int]] = []
    real_start = env_volume.start_build_container

    def start(*args: Any, **kwargs: Any) -> Any:
        container, mark = real_start(*args, **kwargs)
        container.reload()  # what the engine was told, not what was asked
        seen.append((tuple(kwargs["requirement_files"]), int(container.attrs["HostConfig"]["CpuShares"])))
        return container, mark

    monkeypatch.setattr(env_volume, "start_build_container", start)
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
    weights = dict(seen)
    assert len(weights) == 2, f"both sets were built: {seen}"
    assert weights[("requirements.txt", "extras.txt")] in (0, 1024)  # compat's: the default
    assert weights[("requirements.txt",)] == YIELD_CPU_SHARES  # strict's, started while compat's was built
    logs = tmp_path / "out" / "logs"
    compat_installed = _phase_times(logs / "compat" / "build.log", "installed")
    strict_start = _phase_times(logs / "strict" / "build.log", "start")
    assert len(compat_installed) == 2 and len(strict_start) == 1
    assert workdir.SetTurns(["strict", "compat"]).first == "compat"
