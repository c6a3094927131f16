"""The Ray backend: scoring jobs run on the Docker engines of a Ray cluster's nodes.

One job = one Ray task scoring one (snapshot, task, profile) on the node it lands on. Jobs ask
for one unit of the custom `docker` resource (a node started with `--resources='{"docker": N}'`
takes N jobs at a time, so its engine is never oversubscribed) plus CPU and memory per profile.

Inputs travel by content: the staged snapshot and the task's golden files are packed once per
hash and put in the object store; a worker unpacks them into a private temporary folder,
checks both hashes and deletes the folder when the job ends, so golden files exist nowhere else.
Images are built on a node's first use (recipe hash tags; builds are serialised per machine by
the image module's file locks). Results and logs come back to the driver, which alone writes
the run folder and the result cache (see `bridge.scoring.run.engine.score_repo`).

Why this module is long: the driver side (submit, progress per node, retries, cancel) and the
worker side (unpack, verify, score, sweep) are one protocol and are read together.

A job whose worker or node dies is retried by Ray (`max_retries`), then reported as
`infra_error` with Ray's reason, which `--resume` re-runs. Containers of a killed job carry the
dead worker's pid and are swept when a job next starts on that node (and by the end-of-run sweep),
as is its staging folder, named after the worker's pid (``sweep_stale_staging``).
Ray is imported lazily: the rest of the bridge works without the `ray` extra.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import ScoringError
from bridge.fs.tarball import unpack
from bridge.fs.tarpack import add_entries, list_tree
from bridge.scoring.result import ProfileResult
from bridge.scoring.run.backend import JobCancelled, ScoringJob
from bridge.scoring.types import ProgressFn
from bridge.tasks.model import Manifest, Task, compute_task_hash

DOCKER_RESOURCE = "docker"
#: what one job reserves on its node, per profile: each runs one service container and one
#: test run at a time (strict's Java/white-box runs are the heaviest).
PROFILE_RESOURCES: dict[str, dict[str, float]] = {
    "strict": {"num_cpus": 1, "memory": 1 << 30},
    "compat": {"num_cpus": 1, "memory": 1 << 30},
}
DEFAULT_MAX_RETRIES = 2
#: how long jobs may wait while no alive node offers the docker resource before they fail
NO_DOCKER_GRACE_SECONDS = 60.0
POLL_SECONDS = 0.25


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ScoringError("the Ray backend needs Ray: pip install 'repogenesis-bridge[ray]'") from exc
    return ray


def connect(address: str | None) -> Any:
    """Ray, joined to the cluster at `address` (else $RAY_ADDRESS, else `auto`) unless this
    process already is; the scoring backend and agent runs (bridge/agents/ray/driver.py) share it."""
    ray = import_ray()
    if not ray.is_initialized():
        try:
            ray.init(
                address=address or os.environ.get("RAY_ADDRESS") or "auto",
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ScoringError(
                f"cannot reach a Ray cluster at {address or 'auto'}: {exc} "
                "(start one with `ray start --head`, see the README)"
            ) from exc
    return ray


# ----------------------------------------------------------------------------- packing by content


def pack_tree(root: Path) -> bytes:
    """A tar of a folder (paths relative, sorted, modes and symlinks kept, no owners, mtime 0),
    read through the one tar helper (bridge/fs/tarball.py: no link followed, no rule left out)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_entries(tar, root, list_tree(root, ignore=False))
    return buf.getvalue()


def unpack_tree(data: bytes, dest: Path) -> None:
    """Unpack a `pack_tree` archive (it came over the network): the one tar helper refuses the
    whole archive for an absolute path, `..`, a link out of the folder, a special file or a
    limit passed. `dest` may hold files already (a job's log folder): they are replaced."""
    unpack(io.BytesIO(data), dest, links=True, fresh=False, error=ScoringError)


def pack_task(task: Task) -> tuple[dict[str, Any], bytes]:
    """What a worker needs to score the task: manifest, README, golden tests and test extras
    (never the solution or seed files), as (description, archive)."""
    with tempfile.TemporaryDirectory(prefix="rgbridge-taskpack-") as tmp:
        root = Path(tmp)
        (root / "README.md").write_bytes(task.readme_path.read_bytes())
        shutil.copytree(
            task.tests_dir, root / "tests", symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        (root / "extras").mkdir()
        for name, path in task.test_extras.items():
            (root / "extras" / name).write_bytes(path.read_bytes())
        blob = pack_tree(root)
    desc = {
        "manifest": task.manifest.model_dump(mode="json"),
        "extras": sorted(task.test_extras),
        "source": task.source,
        "content_hash": task.content_hash,
    }
    return desc, blob


def unpack_task(desc: dict[str, Any], blob: bytes, dest: Path) -> Task:
    """Rebuild a task from `pack_task` output under `dest`; its content hash must match."""
    unpack_tree(blob, dest)
    manifest = Manifest.model_validate(desc["manifest"])
    extras = {name: dest / "extras" / name for name in desc["extras"]}
    task = Task(
        manifest=manifest,
        root=dest,
        readme_path=dest / "README.md",
        tests_dir=dest / "tests",
        test_extras=extras,
        source=desc["source"],
    )
    task.content_hash = compute_task_hash(manifest, task.readme_path, task.tests_dir, extras)
    if task.content_hash != desc["content_hash"]:
        raise ScoringError(
            f"task {manifest.id}: shipped files hash to {task.content_hash}, expected {desc['content_hash']}"
        )
    return task


# ----------------------------------------------------------------------------- worker side


def node_label() -> str:
    ray = import_ray()
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id() or "?"
    try:
        ip = ray.util.get_node_ip_address()
    except Exception:  # a label only
        ip = "?"
    return f"{ip}/{node_id[:6]}"


def score_on_node(
    meta: dict[str, Any], task_desc: dict[str, Any], task_blob: bytes, snapshot_blob: bytes, reporter: Any
) -> dict[str, Any]:
    """Body of one Ray job: unpack, verify, score one profile on this node's engine, pack logs."""
    from bridge.fs.hashing import tree_hash
    from bridge.scoring.run.runner import node_context, run_profile, sweep_stale
    from bridge.scoring.run.sweep import sweep
    from bridge.scoring.sandbox.docker_client import get_client

    began = time.monotonic()
    node = node_label()
    key = meta["key"]

    def say(message: str) -> None:
        if reporter is None:
            return
        with contextlib.suppress(Exception):  # progress is best effort; the driver may be gone
            reporter.say.remote(key, node, message)

    say("started")
    client = get_client()
    sweep_stale(client)  # containers of jobs killed on this node earlier (their worker pid is dead)
    sweep_stale_staging()  # and their staging folders, golden files included
    with tempfile.TemporaryDirectory(prefix=f"{STAGING_PREFIX}{os.getpid()}-") as tmp:
        os.chmod(tmp, 0o700)
        work = Path(tmp)
        task = unpack_task(task_desc, task_blob, work / "task")
        snapshot = work / "snapshot"
        unpack_tree(snapshot_blob, snapshot)
        got = tree_hash(snapshot, frozenset())
        if got != meta["snapshot_hash"]:
            raise ScoringError(f"snapshot arrived with hash {got}, expected {meta['snapshot_hash']}")
        log_dir = work / "logs" / meta["profile"]
        ctx = node_context(
            meta["container_run"], wheelhouse=Path(meta["wheelhouse"]) if meta["wheelhouse"] else None, progress=say
        )
        scoring = time.monotonic()
        try:
            result = run_profile(
                client,
                task,
                snapshot,
                meta["profile"],
                ctx=ctx,
                log_dir=log_dir,
                scratch=work,
                maven=meta["maven"],
                progress=say,
            )
        finally:
            sweep(client, run_id=meta["container_run"])
        score_seconds = time.monotonic() - scoring
        logs = pack_tree(log_dir) if log_dir.is_dir() else b""
    return {
        "result": result.model_dump(mode="json"),
        "logs": logs,
        "node": node,
        "score_seconds": score_seconds,
        "worker_seconds": time.monotonic() - began,
    }


#: a job's staging folder in the node's temp folder: the prefix, the worker's pid, a dash
STAGING_PREFIX = "rgbridge-ray-job-"


def sweep_stale_staging() -> int:
    """Remove the staging folders of jobs whose worker died (a cancelled job's worker is killed:
    its folder, golden files included, outlived it). A folder is named after its worker's pid;
    only this user's real folders are touched, never through a link."""
    from bridge.fs.files import pid_alive

    removed = 0
    root = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            pid_text = entry.name.removeprefix(STAGING_PREFIX).partition("-")[0]
            if not entry.name.startswith(STAGING_PREFIX) or not pid_text.isdigit() or pid_alive(int(pid_text)):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False) and st.st_uid == os.getuid():
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    return removed


def sweep_node(run_ids: list[str]) -> int:
    """Remove the given runs' containers (and orphans) from this node's engine."""
    from bridge.scoring.run.runner import sweep_stale
    from bridge.scoring.run.sweep import sweep
    from bridge.scoring.sandbox.docker_client import get_client

    client = get_client()
    removed = sweep_stale(client) + sweep_stale_staging()
    for run_id in run_ids:
        removed += len(sweep(client, run_id=run_id).containers)
    return removed


class ProgressBox:
    """A tiny actor on the driver's node: workers post (job, node, message); the driver drains."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str, str]] = []

    def say(self, key: str, node: str, message: str) -> None:
        self._items.append((key, node, message))

    def drain(self) -> list[tuple[str, str, str]]:
        items, self._items = self._items, []
        return items


# ----------------------------------------------------------------------------- driver side


class RayBackend:
    """Runs scoring jobs as Ray tasks on an existing cluster (`--ray-address`, else `auto`)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        no_docker_grace: float = NO_DOCKER_GRACE_SECONDS,
    ) -> None:
        ray = connect(address)
        self._ray = ray
        self.max_retries = max_retries
        self.no_docker_grace = no_docker_grace
        if self.docker_slots() < 1:
            raise ScoringError(
                "no node of the Ray cluster offers the 'docker' resource: start each node that "
                "has a Docker engine with --resources='{\"docker\": 1}'"
            )
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._affinity = NodeAffinitySchedulingStrategy
        self._score = ray.remote(score_on_node)
        self._sweep = ray.remote(sweep_node)
        here = ray.get_runtime_context().get_node_id()
        self._box = (
            ray.remote(ProgressBox)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=True))
            .remote()
        )
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[Any, int]] = {}  # snapshot key -> (object ref, users)
        self._tasks: dict[str, tuple[dict[str, Any], Any]] = {}  # task hash -> (description, ref)
        self._listeners: dict[str, ProgressFn | None] = {}
        self._running: dict[str, str] = {}  # job key -> node label
        self._container_runs: set[str] = set()
        self._submitted_at: dict[str, float] = {}
        #: per finished job: node, driver-side wall seconds (submit to result, queueing included),
        #: worker seconds (unpack to pack) and scoring seconds (the profile itself)
        self.timings: list[dict[str, Any]] = []
        self._outstanding: set[Any] = set()
        self._cancelled = threading.Event()
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll_progress, name="rgbridge-ray-progress", daemon=True)
        self._poller.start()

    # -- cluster facts

    def docker_slots(self) -> int:
        """Docker slots of the alive nodes (jobs the cluster runs at once)."""
        return int(self._ray.cluster_resources().get(DOCKER_RESOURCE, 0) or 0)

    def default_workers(self) -> int:
        """How many repos the driver keeps in flight: twice the docker slots, so a node that
        frees a slot finds the next job already queued."""
        return max(1, 2 * self.docker_slots())

    def activity(self) -> dict[str, int]:
        """Jobs running now, per node label."""
        with self._lock:
            out: dict[str, int] = {}
            for node in self._running.values():
                out[node] = out.get(node, 0) + 1
            return out

    # -- object store, keyed by content hash

    def _acquire(self, key: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._objects:
                ref, users = self._objects[key]
                self._objects[key] = (ref, users + 1)
                return ref
        ref = self._ray.put(make())
        with self._lock:
            if key in self._objects:  # another thread put the same content meanwhile
                ref0, users = self._objects[key]
                self._objects[key] = (ref0, users + 1)
                return ref0
            self._objects[key] = (ref, 1)
            return ref

    def _release(self, key: str) -> None:
        """Drop our reference when the last job using the content is done (Ray frees it then)."""
        with self._lock:
            if key not in self._objects:
                return
            ref, users = self._objects[key]
            if users <= 1:
                del self._objects[key]
            else:
                self._objects[key] = (ref, users - 1)

    def _task_pack(self, task: Task) -> tuple[dict[str, Any], Any]:
        """A task's description and archive reference, put once per content hash and kept for
        the backend's life (a run scores many repos against few tasks)."""
        with self._lock:
            hit = self._tasks.get(task.content_hash)
        if hit is None:
            desc, blob = pack_task(task)
            hit = (desc, self._ray.put(blob))
            with self._lock:
                hit = self._tasks.setdefault(task.content_hash, hit)
        return hit

    # -- jobs

    def run_jobs(self, jobs: Sequence[ScoringJob]) -> dict[str, ProfileResult]:
        if self._cancelled.is_set():
            raise JobCancelled("run cancelled")
        submitted: dict[Any, tuple[ScoringJob, str]] = {}
        held: list[str] = []
        for job in jobs:
            began = time.monotonic()  # per-job overhead counts packing and the object store too
            desc, task_ref = self._task_pack(job.task)
            snap_key = f"snapshot:{job.snapshot_hash}"
            snap_ref = self._acquire(snap_key, functools.partial(pack_tree, job.snapshot))
            held.append(snap_key)
            key = f"{job.run_id}/{job.profile}/{uuid.uuid4().hex[:8]}"
            container_run = f"{job.run_id}-{job.profile}"[:100]
            meta = {
                "key": key,
                "profile": job.profile,
                "snapshot_hash": job.snapshot_hash,
                "container_run": container_run,
                "wheelhouse": str(job.wheelhouse) if job.wheelhouse else None,
                "maven": job.maven,
            }
            opts = dict(PROFILE_RESOURCES[job.profile])
            ref = self._score.options(
                resources={DOCKER_RESOURCE: 1}, max_retries=self.max_retries, retry_exceptions=False, **opts
            ).remote(meta, desc, task_ref, snap_ref, self._box)
            with self._lock:
                self._listeners[key] = job.progress
                self._container_runs.add(container_run)
                self._outstanding.add(ref)
            if job.progress:
                job.progress(f"{job.profile}: queued on the Ray cluster")
            submitted[ref] = (job, key)
            self._submitted_at[key] = began
        try:
            return self._collect(submitted)
        finally:
            with self._lock:
                for ref, (_job, key) in submitted.items():
                    self._outstanding.discard(ref)
                    self._listeners.pop(key, None)
                    self._running.pop(key, None)
                    self._submitted_at.pop(key, None)
            for k in held:
                self._release(k)

    def _collect(self, submitted: dict[Any, tuple[ScoringJob, str]]) -> dict[str, ProfileResult]:
        ray = self._ray
        results: dict[str, ProfileResult] = {}
        pending = dict(submitted)
        no_docker_since: float | None = None
        last_check = 0.0
        while pending:
            if self._cancelled.is_set():
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise JobCancelled("run cancelled")
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            for ref in ready:
                job, key = pending.pop(ref)
                results[job.profile] = self._finish(ref, job, key)
            now = time.monotonic()
            if pending and now - last_check > 2.0:
                last_check = now
                if self.docker_slots() < 1:
                    no_docker_since = no_docker_since or now
                    if now - no_docker_since > self.no_docker_grace:
                        for ref, (job, _key) in list(pending.items()):
                            ray.cancel(ref, force=True)
                            results[job.profile] = self._infra(
                                job, RuntimeError("no alive node of the Ray cluster offers the 'docker' resource")
                            )
                        pending.clear()
                else:
                    no_docker_since = None
        return results

    def _finish(self, ref: Any, job: ScoringJob, key: str) -> ProfileResult:
        ray = self._ray
        try:
            out = ray.get(ref)
        except ray.exceptions.TaskCancelledError as exc:
            if self._cancelled.is_set():
                raise JobCancelled("run cancelled") from exc
            return self._infra(job, exc)
        except ray.exceptions.RayError as exc:
            # Worker or node death after `max_retries` retries, lost inputs, or a setup fault
            # on the worker (bad archive, hash mismatch): not the agent's fault, re-run on resume.
            return self._infra(job, exc)
        job.log_dir.mkdir(parents=True, exist_ok=True)
        if out["logs"]:
            unpack_tree(out["logs"], job.log_dir)
        result = ProfileResult.model_validate(out["result"])
        with self._lock:
            wall = time.monotonic() - self._submitted_at.pop(key, time.monotonic())
            self.timings.append(
                {
                    "profile": job.profile,
                    "node": out["node"],
                    "wall_seconds": wall,
                    "worker_seconds": out["worker_seconds"],
                    "score_seconds": out["score_seconds"],
                }
            )
        if job.progress:
            job.progress(f"{job.profile}: done on node {out['node']}")
        return result

    def _infra(self, job: ScoringJob, exc: BaseException) -> ProfileResult:
        from bridge.scoring.run.runner import infra_result
        from bridge.scoring.run.workdir import LogSink

        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        reason = lines[0][:300] if lines else type(exc).__name__
        wrapped = RuntimeError(f"ray ({self.max_retries} retries): {type(exc).__name__}: {reason}")
        if job.progress:
            job.progress(f"{job.profile}: infra_error ({reason[:80]})")
        result = infra_result(job.profile, wrapped, LogSink(job.log_dir), time.monotonic())
        return result.model_copy(
            update={"logs": {k: f"logs/{job.profile}/{Path(v).name}" for k, v in result.logs.items()}}
        )

    # -- progress

    def _poll_progress(self) -> None:
        ray = self._ray
        while not self._closed.is_set():
            try:
                items = ray.get(self._box.drain.remote(), timeout=10)
            except Exception:  # progress is best effort
                items = []
            for key, node, message in items:
                with self._lock:
                    listener = self._listeners.get(key)
                    if key in self._listeners:
                        self._running[key] = node
                if listener:
                    with contextlib.suppress(Exception):  # a UI callback must not kill the poller
                        listener(f"[{node}] {message}")
            self._closed.wait(POLL_SECONDS)

    # -- interruption and cleanup

    def cancel(self) -> None:
        """Ctrl-C: stop every queued or running job, then sweep their containers on every node."""
        self._cancelled.set()
        with self._lock:
            refs = list(self._outstanding)
        for ref in refs:
            self._ray.cancel(ref, force=True)
        if refs:
            self._ray.wait(refs, num_returns=len(refs), timeout=15)
        self.sweep_nodes()

    def sweep_nodes(self, timeout: float = 60.0) -> int:
        """Sweep this backend's containers on every alive node that has a Docker engine."""
        ray = self._ray
        with self._lock:
            runs = sorted(self._container_runs)
        refs = []
        for node in ray.nodes():
            if node.get("Alive") and node.get("Resources", {}).get(DOCKER_RESOURCE, 0) > 0:
                strategy = self._affinity(node_id=node["NodeID"], soft=False)
                refs.append(self._sweep.options(num_cpus=0, scheduling_strategy=strategy, max_retries=0).remote(runs))
        removed = 0
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout) if refs else ([], [])
        for ref in ready:
            try:
                removed += int(ray.get(ref))
            except ray.exceptions.RayError:
                pass
        return removed

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._poller.join(timeout=5)
        with self._lock:
            orphans = list(self._outstanding)
        for ref in orphans:  # jobs nobody waits for any more (the caller is unwinding)
            self._ray.cancel(ref, force=True)
        try:
            self.sweep_nodes()
        finally:
            self._ray.kill(self._box)
            with self._lock:
                self._objects.clear()
                self._tasks.clear()
