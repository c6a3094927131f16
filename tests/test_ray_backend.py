"""The Ray backend on a real multi-node Ray cluster started on this machine.

A head and two worker nodes run as separate `ray start --block` processes (tests/raycluster.py),
each with its own `docker` resource. The predictions folder is the kv-ledger oracle plus an
empty library-api repo, scored under both profiles (4 jobs). Proves: the Ray report equals the
local backend's; a worker node killed mid-run still gives a complete report with each repo
recorded once; a run scored half locally and half on Ray resumes into one report; cancelling
stops the jobs and leaves no container behind. The cache is off so every job really runs.

Without Ray installed these tests skip, unless RGBRIDGE_REQUIRE_RAY=1 (CI) makes that a failure.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from raycluster import LocalCluster, joined, require_ray

from bridge.errors import ScoringError
from bridge.scoring.run.engine import ScoreOptions
from bridge.scoring.run.evaluate import EvaluationOptions, EvaluationRequest, evaluate
from bridge.tasks.catalog import Catalog

pytestmark = pytest.mark.docker

ORACLE, EMPTY = "kv-ledger", "library-api"
#: fields that legitimately differ between two scorings of the same inputs
VOLATILE = {
    "elapsed_seconds",
    "total_elapsed_seconds",
    "created_at",
    "timestamp",
    "run_id",
    "workers",
    "backend",
    "resumed",
    "duration",
    "time",
    "time_to_ready",
}


def _strip_logs(logs: dict[str, str]) -> dict[str, str]:
    # build.log exists only when this scoring built the dependency image: whichever run comes
    # first on the shared engine builds it, so it says nothing about the backend.
    return {k: v for k, v in logs.items() if k != "build"}


def _strip(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: (_strip_logs(v) if k == "logs" and isinstance(v, dict) else _strip(v))
            for k, v in data.items()
            if k not in VOLATILE
        }
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


def _comparable(report_path: Path) -> dict[str, Any]:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    report.pop("metadata")
    return _strip(report)


def _leftovers(client, prefix: str) -> list[str]:
    # the list call alone (no per-container inspect): containers come and go while we look
    found = client.api.containers(all=True, filters={"label": ["rgbridge.owner=rgbridge"]})
    return [c["Names"][0] for c in found if (c.get("Labels") or {}).get("rgbridge.run_id", "").startswith(prefix)]


def _new_node(before: set[str], timeout: float = 120.0) -> str:
    """The id of the node that joined after `before` was taken."""
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before]
        if new:
            return new[0]
        time.sleep(0.5)
    raise AssertionError("the added node never joined the cluster")


@pytest.fixture(scope="module")
def cluster(docker_client):
    require_ray()
    with joined(LocalCluster(workers=2)) as running:
        yield running


@pytest.fixture(scope="module")
def backend(cluster):
    from bridge.scoring.run.ray_backend import RayBackend

    be = RayBackend(address=cluster.address)
    yield be
    be.close()


@pytest.fixture(scope="module")
def catalog(tasks_dir: Path) -> Catalog:
    return Catalog.from_options(tasks_dir)


@pytest.fixture(scope="module")
def preds(catalog: Catalog, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("preds")
    shutil.copytree(catalog.get(ORACLE).solution_dir, root / ORACLE)
    (root / EMPTY).mkdir()
    return root


@pytest.fixture(scope="module")
def slow_preds(preds: Path, tmp_path_factory) -> Path:
    """`preds` with the oracle's service starting 8 s late (within the task's 20 s startup
    limit), for the tests that cancel a run while a job runs: the in-process cancel comes 3 s
    after the first job starts, and a quick oracle could be done by then. (The CLI test's exit 0
    in CI had another cause: a blocked SIGINT, see that test.)"""
    root = tmp_path_factory.mktemp("slow-preds")
    shutil.copytree(preds, root, dirs_exist_ok=True)
    start = root / ORACLE / "start.sh"
    text = start.read_text(encoding="utf-8")
    assert "exec " in text
    start.write_text(text.replace("exec ", "sleep 8\nexec ", 1), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def local_report(catalog: Catalog, preds: Path, tmp_path_factory, docker_client) -> Path:
    out = tmp_path_factory.mktemp("local")
    path, _, _ = evaluate(
        catalog,
        EvaluationRequest(predictions_dir=preds, output_dir=out, profile="both", use_cache=False),
        EvaluationOptions(workers=2),
    )
    return path


def test_ray_report_equals_local(
    backend, catalog: Catalog, preds: Path, local_report: Path, tmp_path: Path, docker_client
) -> None:
    seen: list[str] = []
    path, writer, _ = evaluate(
        catalog,
        EvaluationRequest(predictions_dir=preds, output_dir=tmp_path, profile="both", use_cache=False, run_id="raycmp"),
        EvaluationOptions(workers=4, progress=lambda _t, m: seen.append(m), scoring=ScoreOptions(backend=backend)),
    )
    local, remote = _comparable(local_report), _comparable(path)
    assert remote == local
    entries = {e["repo_name"]: e for e in writer.results}
    assert entries[ORACLE]["rgbridge"]["profiles"]["strict"]["pass_at_1"]["score"] == 1.0
    assert entries[EMPTY]["outcome"] == "deploy_failed"
    assert json.loads(path.read_text())["metadata"]["backend"] == "ray"
    # the jobs ran on the cluster and the driver heard which node ran them
    assert any(m.startswith("strict: done on node ") for m in seen), seen
    assert any("] started" in m for m in seen), seen
    # logs came back with the results: the paths the report names exist in the run folder
    for task_id, entry in entries.items():
        for prof in entry["rgbridge"]["profiles"].values():
            for rel in prof["logs"].values():
                assert (tmp_path / "tasks" / writer.run_id / task_id / rel).is_file(), rel
    assert _leftovers(docker_client, "raycmp-") == []


def test_node_killed_mid_run_still_complete(
    cluster, backend, catalog: Catalog, preds: Path, local_report: Path, tmp_path: Path, docker_client
) -> None:
    import ray

    before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    extra = cluster.add_worker(name="victim")
    victim = _new_node(before)
    hit = threading.Event()

    def on_progress(_task: str, message: str) -> None:
        if message.startswith("[") and f"/{victim[:6]}] started" in message:
            hit.set()

    box: dict[str, Any] = {}

    def run() -> None:
        box["path"], box["writer"], _ = evaluate(
            catalog,
            EvaluationRequest(
                predictions_dir=preds, output_dir=tmp_path, profile="both", use_cache=False, run_id="raykill"
            ),
            EvaluationOptions(workers=4, progress=on_progress, scoring=ScoreOptions(backend=backend)),
        )

    backend.timings.clear()
    thread = threading.Thread(target=run)
    thread.start()
    assert hit.wait(timeout=300), "no job was scheduled on the extra node"
    time.sleep(2)  # let the job get into its containers
    cluster.kill_node(extra)
    thread.join(timeout=900)
    assert not thread.is_alive()
    # every job finished exactly once, none of them on the killed node: the one it ran was retried
    assert len(backend.timings) == 4
    assert not [t for t in backend.timings if t["node"].endswith(victim[:6])]
    report = json.loads(box["path"].read_text(encoding="utf-8"))
    names = [e["repo_name"] for e in report["results"]]
    assert sorted(names) == sorted([ORACLE, EMPTY])  # complete, each repo once
    files = sorted(p.name for p in (tmp_path / "intermediate" / "raykill").glob("*.json"))
    assert files == sorted(f"{n}.json" for n in (ORACLE, EMPTY))
    # the killed job was retried on another node: same numbers as the local run, no infra_error
    assert _comparable(box["path"]) == _comparable(local_report)
    backend.sweep_nodes()
    assert _leftovers(docker_client, "raykill-") == []


def test_retries_exhausted_is_infra_error_then_resume(
    cluster, backend, catalog: Catalog, preds: Path, local_report: Path, tmp_path: Path
) -> None:
    import ray

    from bridge.scoring.run.ray_backend import RayBackend

    no_retry = RayBackend(max_retries=0)
    before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    extra = cluster.add_worker(name="victim-noretry")
    victim = _new_node(before)
    hit = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        box["path"], _, _ = evaluate(
            catalog,
            EvaluationRequest(
                predictions_dir=preds, output_dir=tmp_path, profile="both", use_cache=False, run_id="raynoretry"
            ),
            EvaluationOptions(
                workers=4,
                progress=lambda _t, m: hit.set() if f"/{victim[:6]}] started" in m else None,
                scoring=ScoreOptions(backend=no_retry),
            ),
        )

    thread = threading.Thread(target=run)
    thread.start()
    assert hit.wait(timeout=300), "no job was scheduled on the extra node"
    time.sleep(2)
    cluster.kill_node(extra)
    thread.join(timeout=900)
    no_retry.close()
    report = json.loads(box["path"].read_text(encoding="utf-8"))
    failed = [
        (e["repo_name"], name, p)
        for e in report["results"]
        for name, p in e["rgbridge"]["profiles"].items()
        if p["outcome"] == "infra_error"
    ]
    assert len(failed) == 1  # the job on the dead node, and only it
    _repo, _profile, prof = failed[0]
    assert prof["error"].startswith("RuntimeError: ray (0 retries): "), prof
    assert re.search(r"died|dead|crash|unavailable|lost", prof["error"], re.IGNORECASE), prof["error"]
    # --resume re-runs exactly that repo (infra errors are not the agent's fault) into a full report
    path, _, plan = evaluate(
        catalog,
        EvaluationRequest(
            predictions_dir=preds,
            output_dir=tmp_path,
            profile="both",
            resume=True,
            use_cache=False,
            run_id="raynoretry2",
        ),
        EvaluationOptions(scoring=ScoreOptions(backend=backend)),
    )
    assert [t.id for t, _ in plan.todo] == [failed[0][0]]
    assert _comparable(path) == _comparable(local_report)


def test_resume_half_local_half_ray(backend, catalog: Catalog, preds: Path, local_report: Path, tmp_path: Path) -> None:
    first, _, _ = evaluate(
        catalog,
        EvaluationRequest(
            predictions_dir=preds,
            output_dir=tmp_path,
            profile="both",
            only=[ORACLE],
            use_cache=False,
            run_id="half-local",
        ),
    )
    assert [e["repo_name"] for e in json.loads(first.read_text())["results"]] == [ORACLE]
    seen: list[str] = []
    path, _, plan = evaluate(
        catalog,
        EvaluationRequest(
            predictions_dir=preds, output_dir=tmp_path, profile="both", resume=True, use_cache=False, run_id="half-ray"
        ),
        EvaluationOptions(progress=lambda t, _m: seen.append(t), scoring=ScoreOptions(backend=backend)),
    )
    assert [t.id for t, _ in plan.todo] == [EMPTY] and set(seen) == {EMPTY}  # only the rest ran on Ray
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["metadata"]["resumed"] == [ORACLE]
    assert _comparable(path) == _comparable(local_report)


def _assert_only_finished_repos_recorded(folder: Path) -> None:
    """After a cancel: repos whose jobs all finished before it may be recorded, fully scored;
    the cancelled ones are not recorded at all (no infra_error stands in for them)."""
    entries = [json.loads(f.read_text(encoding="utf-8")) for f in folder.glob("*.json")]
    assert len(entries) < 2, "the cancel came after every job had finished"
    for entry in entries:
        outcomes = [p["outcome"] for p in entry["rgbridge"]["profiles"].values()]
        assert len(outcomes) == 2 and "infra_error" not in outcomes, entry["repo_name"]


def test_cancel_stops_jobs_and_sweeps(
    backend, catalog: Catalog, slow_preds: Path, tmp_path: Path, docker_client
) -> None:
    from bridge.scoring.run.ray_backend import RayBackend

    mine = RayBackend()  # same cluster (already joined); cancelling it leaves the shared one usable
    started = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            evaluate(
                catalog,
                EvaluationRequest(
                    predictions_dir=slow_preds, output_dir=tmp_path, profile="both", use_cache=False, run_id="raycancel"
                ),
                EvaluationOptions(
                    workers=4,
                    progress=lambda _t, m: started.set() if "] started" in m else None,
                    scoring=ScoreOptions(backend=mine),
                ),
            )
        except BaseException as exc:  # the test inspects it
            box["exc"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(timeout=300)
    time.sleep(3)
    mine.cancel()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(box.get("exc"), KeyboardInterrupt)
    _assert_only_finished_repos_recorded(tmp_path / "intermediate" / "raycancel")
    mine.close()
    deadline = time.monotonic() + 60
    while _leftovers(docker_client, "raycancel-") and time.monotonic() < deadline:
        time.sleep(2)
    assert _leftovers(docker_client, "raycancel-") == []
    # the run picks up where it stopped on --resume
    path, _, _ = evaluate(
        catalog,
        EvaluationRequest(
            predictions_dir=slow_preds,
            output_dir=tmp_path,
            profile="both",
            resume=True,
            use_cache=False,
            run_id="raycancel2",
        ),
        EvaluationOptions(scoring=ScoreOptions(backend=backend)),
    )
    assert sorted(e["repo_name"] for e in json.loads(path.read_text())["results"]) == sorted([ORACLE, EMPTY])
    # the cancelled jobs' workers were killed mid-job: their staging folders (golden files in
    # them) went with the sweep when the next jobs started, as their containers did
    import tempfile

    from bridge.scoring.run.ray_backend import STAGING_PREFIX

    assert list(Path(tempfile.gettempdir()).glob(f"{STAGING_PREFIX}*")) == []


# ----------------------------------------------------------------------------- fast checks (no cluster)


def test_shipped_task_is_verified_by_hash(catalog: Catalog, tmp_path: Path) -> None:
    from bridge.scoring.run.ray_backend import pack_task, unpack_task

    task = catalog.get(ORACLE)
    desc, blob = pack_task(task)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        names = tar.getnames()
    assert "README.md" in names and any(n.startswith("tests/") for n in names)
    assert not any(n.startswith("solution") for n in names)  # the worker gets what it needs, no more
    rebuilt = unpack_task(desc, blob, tmp_path / "ok")
    assert rebuilt.content_hash == task.content_hash and rebuilt.id == task.id
    tampered = dict(desc, content_hash="sha256:" + "0" * 64)
    with pytest.raises(ScoringError, match="hash"):
        unpack_task(tampered, blob, tmp_path / "bad")


def test_unpack_refuses_paths_out_of_the_folder(tmp_path: Path) -> None:
    from bridge.scoring.run.ray_backend import unpack_tree

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"x"
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ScoringError, match="'..'"):
        unpack_tree(buf.getvalue(), tmp_path / "dest")
    assert not (tmp_path / "escaped.txt").exists()


def test_backend_switch_errors() -> None:
    from bridge.scoring.run.engine import make_backend

    with pytest.raises(ScoringError, match="--ray-address only applies"):
        make_backend("local", ray_address="127.0.0.1:1")
    with pytest.raises(ScoringError, match="unknown backend"):
        make_backend("slurm")


SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


def test_curve_and_rescore_cli_on_ray(cluster, backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli import main

    rec = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, rec)
    stored = json.loads(next((rec / "results").glob("submission-*/result.json")).read_text())["profiles"]["strict"]
    capsys.readouterr()
    assert (
        main(
            [
                "curve",
                str(rec),
                "--points",
                "2",
                "--profile",
                "strict",
                "--no-cache",
                "--backend",
                "ray",
                "--ray-address",
                cluster.address,
                "--json",
            ]
        )
        == 0
    )
    curve = json.loads(capsys.readouterr().out)
    assert curve["points"][-1]["pass_at_1"] == stored["pass_at_1"]["score"] and curve["points"][-1]["dsr"] is True
    assert curve["points"][0]["pass_at_1"] < curve["points"][-1]["pass_at_1"]
    assert (
        main(
            ["rescore", str(rec), "--profile", "strict", "--backend", "ray", "--ray-address", cluster.address, "--json"]
        )
        == 0
    )
    rescored = json.loads(capsys.readouterr().out)
    prof = rescored["profiles"]["strict"]
    assert prof["pass_at_1"] == stored["pass_at_1"] and prof["outcome"] == stored["outcome"]
    result_dir = Path(rescored["result"]).parent
    assert all((result_dir / rel).is_file() for rel in prof["logs"].values())  # logs came back


def test_cli_ray_address_needs_the_ray_backend(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from bridge.cli import main

    (tmp_path / "preds").mkdir()
    assert (
        main(
            [
                "evaluate",
                "--predictions-dir",
                str(tmp_path / "preds"),
                "--backend",
                "local",
                "--ray-address",
                "127.0.0.1:1",
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "--ray-address only applies" in capsys.readouterr().err


def test_ctrl_c_on_the_cli_cancels_then_resume_completes(
    cluster, catalog: Catalog, slow_preds: Path, tmp_path: Path, docker_client
) -> None:
    import signal
    import subprocess
    import sys

    repo_root = Path(__file__).resolve().parent.parent
    # a result cache of its own: every job must really run (the driver's cache would answer)
    env = {**os.environ, **cluster.auth_env(), "PYTHONPATH": str(repo_root), "RGBRIDGE_CACHE": str(tmp_path / "c")}
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "bridge.cli",
        "evaluate",
        "--predictions-dir",
        str(slow_preds),
        "--backend",
        "ray",
        "--ray-address",
        cluster.address,
        "--output-dir",
        str(out),
        "--workers",
        "4",
    ]

    def ctrl_c_as_a_terminal_gives_it() -> None:
        # An ignored or blocked SIGINT outlives exec: a child started from such a process (a
        # shell's background job ignores it; an earlier test may have left it so) gets no
        # KeyboardInterrupt and its run went on to the end (exit 0, twice in CI). A user's
        # terminal delivers Ctrl-C to a process that neither ignores nor blocks it.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [*cmd, "--run-id", "raysigint"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_a_terminal_gives_it,
    )
    deadline = time.monotonic() + 300
    while not _leftovers(docker_client, "raysigint-") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)  # wait until a job's containers run on some node
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    mine = [x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(("SigBlk", "SigIgn"))]
    assert proc.returncode == 130, f"{err}\n(this test process: {mine})"
    _assert_only_finished_repos_recorded(out / "intermediate" / "raysigint")
    deadline = time.monotonic() + 60
    while _leftovers(docker_client, "raysigint-") and time.monotonic() < deadline:
        time.sleep(1)
    assert _leftovers(docker_client, "raysigint-") == []  # cancelled jobs' containers swept
    done = subprocess.run(
        [*cmd, "--resume", "--run-id", "raysigint2", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(e["repo_name"] for e in report["results"]) == sorted([ORACLE, EMPTY])
    assert report["metadata"]["backend"] == "ray"


def test_ray_backend_without_ray_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from bridge.scoring.run.engine import make_backend

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    with pytest.raises(ScoringError, match=r"pip install 'repogenesis-bridge\[ray\]'"):
        make_backend("ray")


def test_staging_folders_of_dead_workers_are_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancelled job's worker is killed before its temporary folder is removed: the folder,
    with the task's golden files, stayed in the node's temp folder."""
    import subprocess
    import sys
    import tempfile

    from bridge.scoring.run.ray_backend import STAGING_PREFIX, sweep_stale_staging

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{STAGING_PREFIX}{gone.pid}-abc"
    (dead / "task" / "tests").mkdir(parents=True)
    (dead / "task" / "tests" / "test_x.py").write_text("golden")
    alive = tmp_path / f"{STAGING_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    elsewhere = tmp_path / "outside"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    link = tmp_path / f"{STAGING_PREFIX}{gone.pid}-link"
    link.symlink_to(elsewhere)
    assert sweep_stale_staging() == 1
    assert not dead.exists() and alive.is_dir() and link.is_symlink() and (elsewhere / "keep").exists()
