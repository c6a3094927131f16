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
