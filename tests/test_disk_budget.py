"""The disk budget, `rgbridge cache`, `rgbridge doctor` and infra_error reasons (issue 23).

Tests that keep sets use their own cache folder (so their own books: usage.py): eviction only
ever considers sets those books track, so they cannot evict anyone else's sets on a shared
engine; the requirement sets (old `six` pins) are theirs alone.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from docker.errors import DockerException, ImageNotFound
from requests.exceptions import ReadTimeout

from bridge.scoring.doctor import check_disk, check_index, run_checks
from bridge.scoring.images.base import ensure_base_image, host
from bridge.scoring.images.disk import (
    BUDGET_ENV,
    DiskBudgetError,
    books_dir,
    evictions,
    holding,
    kept_inventory,
    lease,
    parse_age,
    parse_size,
    prune,
)
from bridge.scoring.images.sets import ensure_deps_image
from bridge.scoring.run.engine import score_repo
from bridge.scoring.run.reporting import summarize_strict
from bridge.scoring.run.runner import infra_reason
from bridge.scoring.sandbox.docker_client import make_labels
from bridge.scoring.types import ScoreRequest
from bridge.tasks.catalog import Catalog

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- units


def test_sizes_and_ages_parse_or_fail_clearly():
    assert parse_size("500M") == 500 * 1024**2
    assert parse_size("20G") == 20 * 1024**3
    assert parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert parse_size("4096") == 4096
    assert parse_size("unlimited") == 0
    assert parse_age("7d") == 7 * 86400 and parse_age("12h") == 43200 and parse_age("90s") == 90
    with pytest.raises(Exception, match="not a size"):
        parse_size("lots")
    with pytest.raises(Exception, match="not an age"):
        parse_age("3 fortnights")


def test_infra_reasons_are_classed_and_counted():
    assert infra_reason(DiskBudgetError("budget")) == "disk"
    assert infra_reason(OSError(errno.ENOSPC, "No space left on device")) == "disk"
    assert infra_reason(ReadTimeout("read timed out")) == "timeout-infra"
    assert infra_reason(ImageNotFound("no such image")) == "image"
    assert infra_reason(DockerException("Error while fetching server API version")) == "engine"
    assert infra_reason(RuntimeError("bug")) == "bridge"
    rows = [
        {"outcome": "infra_error", "infra_reason": "engine", "pass_at_1": {}, "dsr": {}},
        {"outcome": "infra_error", "infra_reason": "disk", "pass_at_1": {}, "dsr": {}},
        {"outcome": "scored", "pass_at_1": {"passed": 1, "total": 2}, "dsr": {"success": True}},
    ]
    summary = summarize_strict(rows)
    assert summary["infra_errors"] == 2 and summary["counted_repos"] == 1
    assert summary["infra_errors_by_reason"] == {"engine": 1, "disk": 1}
    assert summary["avg_pass_at_1"] == 0.5  # the infra errors are not in the agent's mean


def test_an_unexpected_fault_in_a_profile_is_its_infra_error_not_the_runs_end(tmp_path, monkeypatch):
    """A bug of ours inside one profile (here the SystemError CPython 3.11's parser raised under
    threads) ended a whole 60-repo evaluate; it is that job's infra_error, reason "bridge"."""
    from bridge.scoring.run import runner

    def broken(*_a: object, **_k: object) -> None:
        raise SystemError("AST constructor recursion depth mismatch (before=48, after=41)")

    monkeypatch.setattr(runner, "run_one_profile", broken)
    task = Catalog.from_options(REPO / "tasks").get("kv-ledger")
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "app.py").write_text("print('hi')\n")
    result = runner.run_profile(
        None,  # type: ignore[arg-type]  # never reached: the profile fails first
        task,
        snapshot,
        "strict",
        ctx=None,  # type: ignore[arg-type]
        log_dir=tmp_path / "logs",
        scratch=tmp_path / "scratch",
    )
    assert result.outcome == "infra_error" and result.infra_reason == "bridge"
    assert "SystemError" in (result.error or "")
    assert "recursion depth mismatch" in (tmp_path / "logs" / "infra_error.txt").read_text()


# ---------------------------------------------------------------- on a real engine


@pytest.fixture()
def own_cache(tmp_path, monkeypatch) -> Path:
    """A cache folder (and so disk books) of this test's own; uv is shared, not fetched again."""
    from bridge.locations import cache_dir

    real = cache_dir()
    root = tmp_path / "cache"
    root.mkdir()
    if (real / "tools").is_dir():
        (root / "tools").symlink_to(real / "tools")
    monkeypatch.setenv("RGBRIDGE_CACHE", str(root))
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    return root


def _age(client: docker.DockerClient, name: str, seconds: float) -> None:
    path = books_dir(client) / "use" / name
    os.utime(path, (time.time() - seconds, time.time() - seconds))


def _set(client: docker.DockerClient, pin: str):
    deps = ensure_deps_image(client, f"{pin}\n", env_volume=True)
    assert deps.settle() and deps.volume is not None
    return deps.volume.name


def test_lru_eviction_spares_sets_in_use_and_stays_within_budget(docker_client, own_cache, monkeypatch):
    ensure_base_image(docker_client)
    a = _set(docker_client, "six==1.12.0")
    b = _set(docker_client, "six==1.13.0")
    sizes = {i.name: i.bytes for i in kept_inventory(docker_client).sets()}
    assert set(sizes) == {a, b} and all(s > 1_000_000 for s in sizes.values())
    one = max(sizes.values())
    # room for two sets and the one being built, not three
    monkeypatch.setenv(BUDGET_ENV, str(sizes[a] + sizes[b] + one - 1))
    try:
        with holding():
            lease(docker_client, a)  # a score is using A ...
            _age(docker_client, a, 3600)  # ... though A is the least recently used
            _age(docker_client, b, 1800)
            c = _set(docker_client, "six==1.14.0")
        kept = {i.name for i in kept_inventory(docker_client).sets()}
        assert kept == {a, c}, "B (unused) goes, A (in use) stays"
        assert [e["name"] for e in evictions(books_dir(docker_client))] == [b]

        # nothing in use now: the least recently used set goes, and one used by a container stays
        _age(docker_client, a, 3600)
        holder = docker_client.containers.create(
            ensure_base_image(docker_client),
            command=["true"],
            labels=make_labels(kind="test"),
            mounts=[docker.types.Mount("/opt/held", a, type="volume", read_only=True)],
        )
        try:
            assert {i.name: i.in_use for i in kept_inventory(docker_client).sets()}[a] is True
            d = _set(docker_client, "six==1.15.0")
            kept = {i.name for i in kept_inventory(docker_client).sets()}
            assert kept == {a, d}, "A is held by a container, so C (next least recently used) went"
        finally:
            holder.remove(force=True)
        assert kept_inventory(docker_client).budgeted_bytes <= parse_size(os.environ[BUDGET_ENV]) + one
        # a dry run says what a prune would free and removes nothing
        dry = prune(docker_client, max_bytes=0, dry_run=True)
        assert {i.name for i in dry.evicted} == {a, d}
        assert {i.name for i in kept_inventory(docker_client).sets()} == {a, d}
    finally:
        prune(docker_client, max_bytes=0)  # only sets these books track: this test's own
    assert kept_inventory(docker_client).sets() == []


def test_a_budget_smaller_than_one_set_is_a_clear_error(docker_client, own_cache, monkeypatch, tmp_path, tasks_dir):
    monkeypatch.setenv(BUDGET_ENV, "1M")
    started = time.monotonic()
    with pytest.raises(DiskBudgetError, match=r"disk budget 1\.0M is smaller than one dependency set"):
        ensure_deps_image(docker_client, "six==1.11.0\n", env_volume=True)
    assert time.monotonic() - started < 30, "an error at once, not a loop"
    # a score under that budget: infra_error classed "disk", not the agent's fault
    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    repo = tmp_path / "repo"
    shutil.copytree(task.root / "solution", repo)
    with open(repo / "requirements.txt", "a") as fh:
        fh.write("\nsix==1.11.0\n")  # a set never built: the budget is asked for room
    result = score_repo(task, repo, ScoreRequest(profile="strict", use_cache=False, output_dir=tmp_path / "out"))
    strict = result.profiles["strict"]
    assert strict.outcome == "infra_error" and strict.infra_reason == "disk"
    assert "smaller than one dependency set" in (strict.error or "")


def test_doctor_reports_a_stopped_engine_with_its_fix(own_cache, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{own_cache}/no-engine.sock")
    checks = {c.name: c for c in run_checks(index=False)}
    assert not checks["engine"].ok and checks["engine"].severity == "error"
    assert "unreachable" in checks["engine"].detail and "DOCKER_HOST" in checks["engine"].fix
    # the same through the CLI: exit status 1 and the fix in the JSON
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "doctor", "--json", "--no-index"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    engine = next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "engine")
    assert not engine["ok"] and "DOCKER_HOST" in engine["fix"]


@pytest.fixture()
def small_fs(tmp_path):
    """A real 4 MB file system (tmpfs), nearly filled."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        (mount / "filler").write_bytes(b"\0" * (3 * 1024 * 1024))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_doctor_reports_a_full_disk_with_its_fix(docker_client, own_cache, small_fs):
    check = check_disk(docker_client, small_fs)
    assert not check.ok and check.severity == "error"
    assert "disk full" in check.detail and str(small_fs) in check.detail
    assert "cache prune" in check.fix
    # the roomy default location passes
    assert check_disk(docker_client, own_cache).ok


def test_doctor_reports_an_unreachable_index_with_its_fix(docker_client, own_cache, monkeypatch):
    ensure_base_image(docker_client)
    before = host.host_pip_index_settings()
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    check = check_index(docker_client)
    assert not check.ok and "127.0.0.1:9" in check.detail
    assert "PIP_INDEX_URL" in check.fix and "--wheelhouse" in check.fix
    monkeypatch.delenv("PIP_INDEX_URL")
    assert host.host_pip_index_settings() == before  # the probe did not change what builds use


def test_sets_other_builds_are_making_count_as_whole_sets(tmp_path):
    """Concurrent builds: a pass reserves a whole set for each set being built elsewhere, so
    the high-water mark stays within the budget plus one set (bench/scale.py)."""
    from bridge.scoring.images.disk import Budget, Inventory, KeptItem
    from bridge.scoring.images.disk import budget as budget_mod

    building = KeptItem(kind="python-set", name="rgbridge-env-x", bytes=10, last_used=0, in_use=True, building=True)
    inv = Inventory(items=[building])
    report = budget_mod._evict(None, tmp_path, inv, Budget(150, "test"), 100, None, "test")  # type: ignore[arg-type]
    assert report.short == 50  # 10 kept + 90 still to come + 100 for the new set = 200, against 150
    assert report.evicted == []


def test_room_is_made_for_a_large_set_not_the_median_one(tmp_path, monkeypatch):
    """Sets differ in size (more packages, bytecode): reserving the median let a run of larger
    sets end over budget + one set at N=60 (bench/scale.py: 1.89 GB against 1.82 GB + 45 MB).
    The room made is the 90th percentile of the kept sets' sizes; the "smaller than one set"
    error still compares the budget with a typical (median) set."""
    from bridge.scoring.images.disk import Budget, Inventory, KeptItem, set_estimate
    from bridge.scoring.images.disk import budget as budget_mod

    sizes = [40, 41, 42, 43, 44, 45, 46, 47, 48, 90]
    inv = Inventory(
        items=[KeptItem(kind="python-set", name=f"rgbridge-env-{i}", bytes=b, last_used=i) for i, b in enumerate(sizes)]
    )
    assert set_estimate(inv, "python-set") == 44  # the median (44.5, rounded down)
    assert set_estimate(inv, "python-set", quantile=0.9) == 90
    asked: list[int] = []

    def fake_evict(_client, _books, _inv, budget, need, _progress, _reason):
        asked.append(need)
        return budget_mod.RoomReport(budget, 0, 0, [])

    monkeypatch.setattr(budget_mod, "books_dir", lambda _c: tmp_path)
    monkeypatch.setattr(budget_mod, "kept_inventory", lambda _c: inv)
    monkeypatch.setattr(budget_mod, "resolve_budget", lambda _c, _kept: Budget(1000, "test"))
    monkeypatch.setattr(budget_mod, "_evict", fake_evict)
    budget_mod.make_room(None)  # type: ignore[arg-type]
    assert asked == [90]
    monkeypatch.setattr(budget_mod, "resolve_budget", lambda _c, _kept: Budget(60, "test"))
    budget_mod.make_room(None)  # type: ignore[arg-type]
    assert asked == [90, 60]  # never more room than the whole budget: a 60-byte budget still holds a typical set
