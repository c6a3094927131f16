"""Pipelined cold scoring (issue 41): with one worker, `evaluate` builds the next repos'
dependency sets while a repo's service and tests run; the disk budget is kept."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

from bridge.scoring.images.disk import Budget, Inventory, KeptItem, room_ahead
from bridge.scoring.images.disk import budget as budget_mod
from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate
from bridge.tasks.catalog import Catalog


def _inventory(monkeypatch, tmp_path: Path, items: list[KeptItem], budget: int) -> None:
    monkeypatch.setattr(budget_mod, "books_dir", lambda _c: tmp_path)
    monkeypatch.setattr(budget_mod, "kept_inventory", lambda _c: Inventory(items=items))
    monkeypatch.setattr(budget_mod, "resolve_budget", lambda _c, _kept: Budget(budget, "test"))


def test_sets_are_built_ahead_only_beside_the_sets_in_use(monkeypatch, tmp_path):
    """Room ahead counts every set in use and one being built for the score under way; sets
    nobody uses may go. A set built ahead is never one the budget would have to evict."""
    sets = [KeptItem(kind="python-set", name=f"rgbridge-env-{i}", bytes=100, last_used=i) for i in range(4)]
    # 4 sets of 100 kept, none in use, budget 500: room for the current build and two ahead
    _inventory(monkeypatch, tmp_path, sets, 500)
    assert room_ahead(None, 2)  # type: ignore[arg-type]
    assert not room_ahead(None, 5)  # type: ignore[arg-type]
    # the same sets in use: only what is left of the budget counts
    for item in sets:
        item.in_use = True
    assert not room_ahead(None, 1)  # type: ignore[arg-type]  (400 in use + 100 now + 100 ahead > 500)
    sets[0].in_use = False
    assert room_ahead(None, 1)  # type: ignore[arg-type]
    # a set being built elsewhere grows to a whole set
    sets.append(KeptItem(kind="python-set", name="rgbridge-env-b", bytes=10, last_used=9, in_use=True, building=True))
    assert not room_ahead(None, 1)  # type: ignore[arg-type]
    # no budget: always
    _inventory(monkeypatch, tmp_path, sets, 0)
    assert room_ahead(None, 50)  # type: ignore[arg-type]


@pytest.mark.docker
def test_one_worker_builds_the_next_repos_sets_while_a_repo_runs(docker_client, base_image, tasks_dir, tmp_path):
    """Three repos, each with a never-seen set: the second and third repos' sets are prepared
    while the first one scores, so their runners find them on disk (no build log); the results
    and their order are those of the runner alone. On the old code every repo built its own."""
    tasks, preds = tmp_path / "tasks", tmp_path / "predictions"
    ids = [f"kv-ahead-{c}" for c in "abc"]
    nonce = uuid.uuid4().int % 10**12
    for n, new_id in enumerate(ids):
        shutil.copytree(tasks_dir / "kv-ledger", tasks / new_id)
        toml = tasks / new_id / "task.toml"
        toml.write_text(toml.read_text().replace('id = "kv-ledger"', f'id = "{new_id}"', 1))
        shutil.copytree(tasks_dir / "kv-ledger" / "solution", preds / new_id)
        # a never-seen key, a small set: six, with a floor every version meets
        (preds / new_id / "requirements.txt").write_text(f"six==1.16.0\nsix>=0.0.{nonce + n}\n")
    events: list[tuple[float, str, str]] = []
    catalog = Catalog.from_options(tasks)
    report, _writer, _plan = evaluate(
        catalog,
        EvaluationRequest(predictions_dir=preds, output_dir=tmp_path / "out", profile="both"),
        EvaluationOptions(workers=1, progress=lambda tid, msg: events.append((time.monotonic(), tid, msg))),
    )
    try:
        import json

        rows = json.loads(report.read_text())["results"]
        assert [r["repo_name"] for r in rows] == ids
        assert all(r["pass_at_1"]["score"] == 1.0 for r in rows), rows
        run_dir = next((tmp_path / "out" / "tasks").iterdir())
        for tid in ids[1:]:
            prepared = [t for t, who, msg in events if who == tid and msg.startswith("sets prepared ahead")]
            scored = [t for t, who, msg in events if who == tid and "ahead" not in msg]
            assert prepared and scored, events
            for profile in ("strict", "compat"):
                assert not (run_dir / tid / "logs" / profile / "build.log").exists(), f"{tid} {profile} built its set"
        first_done = max(t for t, who, msg in events if who == ids[0])
        second_began = min(t for t, who, msg in events if who == ids[1] and msg == "preparing sets ahead")
        assert second_began < first_done, "the second repo's sets began while the first repo ran"
        assert (run_dir / ids[0] / "logs" / "strict" / "build.log").exists()  # the first one built its own
    finally:
        _remove_sets(docker_client, base_image, catalog, preds, ids)


def _remove_sets(client, base: str, catalog: Catalog, preds: Path, ids: list[str]) -> None:
    from docker.errors import ImageNotFound

    from bridge.scoring.images.sets import deps_image_tag, remove_volume, volume_for, wait_for_compiles
    from bridge.scoring.python.compat import compat_extras
    from bridge.scoring.run.workdir import requirements_of

    wait_for_compiles()
    for tid in ids:
        repo, task = preds / tid, catalog.get(tid)
        reqs = requirements_of(repo)
        for tag in (
            deps_image_tag(base, reqs, in_volume=True),
            deps_image_tag(base, reqs, compat_extras(task, repo), in_volume=True),
        ):
            try:
                client.images.remove(tag)
            except ImageNotFound:
                pass
            remove_volume(client, volume_for(tag, "/opt/venv").name)


def _fake_ahead(monkeypatch, tasks_dir: Path, n: int, build) -> tuple[object, list]:
    """A SetsAhead over ``n`` kv-ledger repos whose builds are ``build(index, record, weight)``."""
    from bridge.scoring.run import prepare

    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    ahead = prepare.SetsAhead(
        None, [(task, tasks_dir / f"repo{i}") for i in range(n)], profile="both", use_cache=False, wheelhouse=None
    )  # type: ignore[arg-type]
    by_task: list[int] = []

    def fake_build(self, _task, repo: Path, record, weight) -> None:
        index = int(repo.name.removeprefix("repo"))
        by_task.append(index)
        build(index, record, weight)
        record.state = "ready"

    monkeypatch.setattr(prepare.SetsAhead, "_build", fake_build)
    return ahead, by_task


def test_builds_ahead_take_turns_in_the_plans_order(monkeypatch, tasks_dir: Path) -> None:
    """Three repos' builds at once beside the score under way made the batch slower than none
    (docs/measurements.md): one build at a time, the next repo first."""
    import threading

    running, most = [0], [0]
    guard = threading.Lock()

    def build(_index, _record, _weight) -> None:
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with guard:
            running[0] -= 1

    ahead, order = _fake_ahead(monkeypatch, tasks_dir, 4, build)
    ahead.starting(0)
    deadline = time.monotonic() + 30
    while any(ahead.prepared[i].state == "pending" for i in (1, 2, 3)) and time.monotonic() < deadline:
        time.sleep(0.05)
    ahead.close(timeout=30)
    assert order == [1, 2, 3] and most[0] == 1
    assert [ahead.prepared[i].state for i in (1, 2, 3)] == ["ready"] * 3


def test_a_repo_whose_score_begins_first_is_not_built_ahead_and_its_build_is_lifted(
    monkeypatch, tasks_dir: Path
) -> None:
    """A build ahead gives way (a low CPU weight) until its repo's score begins and waits for it;
    a repo whose score began before its turn builds its own sets."""
    import threading

    from bridge.scoring.run.prepare import AHEAD_CPU_SHARES

    gate, inside = threading.Event(), threading.Event()
    seen: dict[int, object] = {}

    def build(index, _record, weight) -> None:
        seen[index] = weight
        if index == 1:
            inside.set()
            assert gate.wait(30)

    ahead, order = _fake_ahead(monkeypatch, tasks_dir, 4, build)
    ahead.starting(0)
    assert inside.wait(30)
    weight = seen[1]
    assert weight.shares == AHEAD_CPU_SHARES  # type: ignore[attr-defined]
    ahead.starting(1)  # repo 1's score waits for the build under way: it is lifted
    assert weight.shares == 1024  # type: ignore[attr-defined]
    ahead.starting(2)  # repo 2's score began before its turn
    gate.set()
    deadline = time.monotonic() + 30
    while ahead.prepared[3].state == "pending" and time.monotonic() < deadline:
        time.sleep(0.05)
    ahead.close(timeout=30)
    assert order == [1, 3]
    assert 2 not in order and ahead.prepared[2].state == "skipped"
    assert "began before its turn" in ahead.prepared[2].note
