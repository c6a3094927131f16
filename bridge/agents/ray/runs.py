"""Agent runs on a Ray cluster: `rgbridge run --backend ray` (README "Agent runs on Ray").

One attempt = one Ray task needing one unit of the custom `agent` resource (a node started with
`--resources='{"agent": N, "docker": M}'` runs N attempts at once). On its node the task builds
the run's settings (`settings_for`: that node's CLI, data home and Docker engine) in a private
folder, runs `Attempt.run()` exactly as a local run does (session, agent, recorder, score), then
packs the recording as `rgbridge recordings pack` does and the attempt folder (capped), and
returns both with the report entry. The driver checks the archive's hash, unpacks and verifies
the recording against its seal, unpacks the attempt folder into the run folder and puts the run
folder's paths in place of the node's in the entry. Only the driver writes the run folder (the
runner's RunWriter records what `RemoteAttempt.run` returns), so the report is a local run's.

Node loss: the driver runs the task again (up to MAX_RETRIES times) from scratch once the lost
node is declared dead; every execution has a folder of its own and nothing of a lost one reaches
the run folder, so no attempt is scored twice. After the retries the attempt is an `infra_error` row with Ray's reason (`--resume` runs
it again). A reaper (bridge/agents/ray/reaper.py) beside each execution ends the attempt's processes
when its Ray worker dies: the agent has a process group of its own and would outlive it.

Before any attempt every node offering `agent` is checked (engine, the CLI and its version, the
sandbox, keys present, by name only): a failing node is named and the run refused, and so is a
CLI version that differs between nodes or from the driver's (a row records one version).
Ray is imported lazily, like the scoring backend (bridge/scoring/run/ray_backend.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bridge.agents.attempt.lifecycle import Attempt, Stopped
from bridge.agents.confine.protected import source_of
from bridge.agents.ray.checks import (
    AGENT_RESOURCE,
    CHECK_SECONDS,
    START_FIX,
    facts_checks,
    failed,
    first_line,
    gather_facts,
)
from bridge.agents.ray.reaper import settle, start_reaper, stop_reaper
from bridge.agents.ray.transfer import pack_folder, pack_recordings, receive_recording, unpack_folder
from bridge.agents.run.options import RunOptions
from bridge.agents.run.settings import RunSettings, settings_for
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.scoring.run.ray_backend import ProgressBox, connect, node_label
from bridge.scoring.run.report_row import ReportRow
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

MAX_RETRIES = 2
#: how long attempts may wait while no alive node offers the agent resource
NO_AGENT_GRACE_SECONDS = 60.0
POLL_SECONDS = 0.5
#: where a node keeps its attempts' private folders (default: the system's temporary folder)
NODE_DIR_ENV = "RGBRIDGE_RAY_ATTEMPTS_DIR"
#: phases of a driver-side attempt whose agent had ended (a local first part): finished there
_FINISHABLE = ("agent_done", "submitted")


# ----------------------------------------------------------------------------- worker side


def node_catalog(options: RunOptions) -> Catalog:
    """The run's tasks as this node sees them (the task options the agent's server gets)."""
    return Catalog.from_options(*source_of(options.server_args))


def _node_base() -> Path:
    base = Path(os.environ.get(NODE_DIR_ENV) or tempfile.gettempdir()) / f"rgbridge-ray-attempts-{os.getuid()}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base


def _sweep_stale() -> None:
    with contextlib.suppress(Exception):  # best effort, as the scoring jobs do
        from bridge.scoring.run.runner import sweep_stale
        from bridge.scoring.sandbox.docker_client import get_client

        sweep_stale(get_client())


def attempt_on_node(options: RunOptions, meta: dict[str, Any], box: Any) -> dict[str, Any]:
    """Body of one Ray task: one attempt, run here as a local run runs it, and what the driver
    needs of it (entry, recordings packed, attempt folder packed)."""
    began = time.monotonic()
    node = node_label()
    key = str(meta["key"])

    def say(state: str) -> None:
        with contextlib.suppress(Exception):  # progress is best effort; the driver may be gone
            box.say.remote(key, node, state)

    say("starting")
    root = Path(tempfile.mkdtemp(prefix=f"{str(meta['run_id'])[:40]}-", dir=_node_base())).resolve()
    reaper = start_reaper(root)
    try:
        _sweep_stale()
        try:
            catalog = node_catalog(options)
            task = catalog.get(str(meta["task"]))
            if task.content_hash != meta["task_hash"]:
                raise BridgeError(
                    f"task {task.id} differs on this node (hash {task.content_hash}, the driver's "
                    f"{meta['task_hash']}): use the same task folders everywhere"
                )
            here = options.model_copy(update={"recordings": str(root / "recordings")})
            # the driver's prompt template and run configuration: the rows must carry the run's own
            settings = replace(
                settings_for(here, catalog, root / "out"), prompt=meta["prompt"], run_config=meta["run_config"]
            )
            if settings.agent_version != meta["agent_version"]:
                raise BridgeError(
                    f"{options.agent} {settings.agent_version} here, {meta['agent_version']} on the driver"
                )
        except BridgeError as exc:
            return {"node": node, "setup_error": str(exc)}
        attempt = Attempt(settings, task, int(meta["number"]), threading.Event())
        out: dict[str, Any] = {"node": node}
        crash: list[BaseException] = []

        def body() -> None:
            try:
                out["entry"] = attempt.run().to_json()  # JSON crosses to the driver
            except Stopped as exc:
                out["stopped"] = str(exc)
            except BridgeError as exc:
                out["error"] = str(exc)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the task's thread
                crash.append(exc)

        thread = threading.Thread(target=body, name=f"rgbridge-attempt-{key}", daemon=True)
        run_started = time.monotonic()
        thread.start()
        last = ""
        while thread.is_alive():
            thread.join(POLL_SECONDS)
            if attempt.live.state != last:
                last = attempt.live.state
                say(last)
        if crash:
            raise crash[0]
        attempt_seconds = time.monotonic() - run_started
        # a detached scoring process may still clean its temporary folder up: packed once it is done
        settle(str(root), exclude=(reaper,) if reaper else ())
        recordings = pack_recordings(attempt.rec_dir, root)
        folder, left_out = pack_folder(attempt.dir) if attempt.dir.is_dir() else (b"", [])
        return {
            **out,
            "recordings": recordings,
            "folder": folder,
            "left_out": left_out,
            "node_out": str(root / "out"),
            "node_recordings": str(root / "recordings"),
            "attempt_seconds": round(attempt_seconds, 3),
            "node_seconds": round(time.monotonic() - began, 3),
        }
    finally:
        settle(str(root), exclude=(reaper,) if reaper else (), timeout=10.0)
        shutil.rmtree(root, ignore_errors=True)
        stop_reaper(reaper)


# ----------------------------------------------------------------------------- driver side


class RemoteAttempt(Attempt):
    """An attempt of a `--backend ray` run: the driver's view (paths in the run folder, the
    live row), run on a node by `RayAttempts.run`."""

    def __init__(
        self, cluster: RayAttempts, settings: RunSettings, task: Task, number: int, stop: threading.Event
    ) -> None:
        super().__init__(settings, task, number, stop)
        self.cluster = cluster

    def run(self) -> ReportRow:
        state = self.state()
        if state.session_id and state.phase in _FINISHABLE:
            # A local first part left this attempt with its agent ended: its session and
            # workspace are here, so it is finished here, as a local --resume would.
            self.live.node = "driver"
            return super().run()
        if self.dir.exists() or self.rec_dir.exists():
            self._clear_unfinished()  # a local first part cut it short: kept aside, redone on a node
        return self.cluster.run(self)


class RayAttempts:
    """The driver's side of a `--backend ray` run: the cluster joined and checked, the attempts
    in flight, their progress by node."""

    def __init__(self, options: RunOptions, settings: RunSettings) -> None:
        ray = connect(options.ray_address)
        self._ray = ray
        self.options = options
        self.settings = settings
        if self.agent_slots() < 1:
            raise BridgeError(f"no node of the Ray cluster offers the '{AGENT_RESOURCE}' resource: {START_FIX}")
        facts = gather_facts(ray, [options.agent], options.agent_bin, options.agent_cmd, options.sandbox, CHECK_SECONDS)
        self.checks = facts_checks(
            facts,
            [options.agent],
            required=True,
            driver_version=settings.agent_version,
            keys_required=not options.model_base_url,  # as check_key: an endpoint of the user's may need none
        )
        bad = failed(self.checks)
        if bad:
            raise BridgeError(
                "Ray pre-flight refused the run: "
                + "; ".join(f"{c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "") for c in bad)
            )
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        self._box = (
            ray.remote(ProgressBox)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=True))
            .remote()
        )
        self._remote = ray.remote(attempt_on_node)
        self._lock = threading.Lock()
        self._watched: dict[str, RemoteAttempt] = {}
        self._poller: threading.Thread | None = None

    def agent_slots(self) -> int:
        return int(self._ray.cluster_resources().get(AGENT_RESOURCE, 0) or 0)

    def workers(self) -> int:
        """Attempts the driver keeps in flight: the cluster's agent slots (or --workers if more)."""
        return max(self.options.workers, self.agent_slots())

    def attempt(self, settings: RunSettings, task: Task, number: int, stop: threading.Event) -> Attempt:
        return RemoteAttempt(self, settings, task, number, stop)

    # -- one attempt

    def run(self, attempt: RemoteAttempt) -> ReportRow:
        ray = self._ray
        meta = {
            "key": attempt.key,
            "task": attempt.task.id,
            "number": attempt.number,
            "run_id": self.options.run_id,
            "task_hash": attempt.task.content_hash,
            "agent_version": self.settings.agent_version,
            "prompt": self.settings.prompt,
            "run_config": self.settings.run_config,
        }
        submitted = time.monotonic()
        lost: list[str] = []
        while True:
            attempt.live.state, attempt.live.node = ("queued", "") if not lost else ("retrying", attempt.live.node)
            # Retried here, not by Ray: a retry Ray schedules at once may land on the dying node
            # before it is declared dead and spend every retry there.
            ref = self._remote.options(resources={AGENT_RESOURCE: 1}, num_cpus=0, max_retries=0).remote(
                self.options, meta, self._box
            )
            self._watch(attempt)
            try:
                out = self._wait(ref, attempt)
                break
            except ray.exceptions.RayTaskError as exc:  # the task itself failed: a retry would too
                return self._infra(attempt, exc, tries=len(lost))
            except ray.exceptions.RayError as exc:  # the worker or its node died: from scratch elsewhere
                lost.append(f"{attempt.live.node or '?'}: {type(exc).__name__}: {first_line(exc)}")
                if len(lost) > MAX_RETRIES:
                    return self._infra(attempt, exc, tries=MAX_RETRIES)
                self._await_declared_dead(attempt.live.node)
            except _NoAgentNode as exc:
                return self._infra(attempt, exc, tries=len(lost))
            finally:
                self._unwatch(attempt)
        return self._arrive(attempt, out, submitted, lost)

    def _await_declared_dead(self, node: str, timeout: float = 90.0) -> None:
        """Until the cluster marks the node of a lost execution dead (a worker that died on a
        live node: until the timeout), so the next execution is not offered to it."""
        prefix = node.rsplit("/", 1)[-1]
        deadline = time.monotonic() + timeout
        while prefix and time.monotonic() < deadline:
            if not [n for n in self._ray.nodes() if n.get("Alive") and str(n["NodeID"]).startswith(prefix)]:
                return
            time.sleep(1.0)

    def _wait(self, ref: Any, attempt: RemoteAttempt) -> dict[str, Any]:
        ray = self._ray
        no_agent_since: float | None = None
        last_check = time.monotonic()
        while True:
            ready, _ = ray.wait([ref], num_returns=1, timeout=POLL_SECONDS)
            if ready:
                out: dict[str, Any] = ray.get(ref)
                return out
            if attempt.stop.is_set():
                # Ctrl-C: the worker is killed; the reaper beside it ends the agent's processes
                ray.cancel(ref, force=True)
                attempt.live.state = "stopped"
                raise Stopped(f"{attempt.key}: stopped")
            now = time.monotonic()
            if now - last_check > 5.0:
                last_check = now
                if self.agent_slots() < 1:
                    no_agent_since = no_agent_since or now
                    if now - no_agent_since > NO_AGENT_GRACE_SECONDS:
                        ray.cancel(ref, force=True)
                        raise _NoAgentNode(f"no alive node of the Ray cluster offers the '{AGENT_RESOURCE}' resource")
                else:
                    no_agent_since = None

    def _infra(self, attempt: RemoteAttempt, exc: BaseException, node: str = "", tries: int = 0) -> ReportRow:
        """The attempt could not be run on the cluster: an infra_error row (not the agent's)."""
        attempt.live.state = "infra_error"
        error = f"node {node}: {exc}" if node else f"ray ({tries} retries): {type(exc).__name__}: {first_line(exc)}"
        s, task = self.settings, attempt.task
        agent = {"name": s.adapter.name, "version": s.agent_version, "model": self.options.model}
        row = {"repo_name": task.id, "lang": task.lang, "outcome": "infra_error", "infra_reason": "ray", "error": error}
        return ReportRow.model_validate({**row, "agent": agent, "attempt": attempt.number})

    def _arrive(self, attempt: RemoteAttempt, out: dict[str, Any], submitted: float, lost: list[str]) -> ReportRow:
        node = str(out.get("node", "?"))
        attempt.live.node = node
        if "setup_error" in out:
            return self._infra(attempt, BridgeError(out["setup_error"]), node)
        try:
            for rec in out["recordings"]:
                receive_recording(attempt.rec_dir, rec)
        except BridgeError as exc:
            return self._infra(attempt, exc, node)
        skipped: list[str] = []
        if out["folder"]:
            if attempt.dir.exists():  # never expected: set aside rather than mixed
                attempt.dir.rename(
                    attempt.dir.with_name(f"{attempt.dir.name}.interrupted-{time.strftime('%Y%m%dT%H%M%S')}")
                )
            skipped = unpack_folder(out["folder"], attempt.dir)
        seconds = round(time.monotonic() - submitted, 3)
        # Where it ran and what it cost: `driver_seconds` (submitted to unpacked here) minus
        # `attempt_seconds` (Attempt.run on the node) is the Ray backend's own overhead.
        facts = {
            "node": node,
            "driver_seconds": seconds,
            "node_seconds": out.get("node_seconds"),
            "attempt_seconds": out.get("attempt_seconds"),
            "left_out": out["left_out"],
            "refused_members": skipped,
            "lost_executions": lost,  # executions lost with their worker or node before this one
        }
        if attempt.dir.is_dir():
            write_json_atomic(attempt.dir / "ray.json", facts)
        attempt.live.ended = time.monotonic()
        if "stopped" in out:
            attempt.live.state = "stopped"
            raise Stopped(str(out["stopped"]))
        if "error" in out:
            attempt.live.state = "failed"
            raise BridgeError(str(out["error"]))
        attempt.live.state = "done"
        moves = {
            out["node_out"]: str(self.settings.output_dir),
            out["node_recordings"]: str(self.settings.recordings),
        }
        try:  # the node's JSON, its paths now the driver's
            return ReportRow.model_validate(rebase(out["entry"], moves))
        except ValueError as exc:
            return self._infra(attempt, BridgeError(f"the node's row is no report row: {first_line(exc)}"), node)

    # -- progress by node

    def _watch(self, attempt: RemoteAttempt) -> None:
        with self._lock:
            self._watched[attempt.key] = attempt
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll, name="rgbridge-ray-attempts", daemon=True)
                self._poller.start()

    def _unwatch(self, attempt: RemoteAttempt) -> None:
        with self._lock:
            self._watched.pop(attempt.key, None)

    def _poll(self) -> None:
        """Node states into the live rows while attempts are in flight (then the thread ends)."""
        while True:
            if not self._ray.is_initialized():  # a call now would start a Ray instance of its own
                with self._lock:
                    self._poller = None
                return
            try:
                items = self._ray.get(self._box.drain.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - progress is best effort
                items = []
            with self._lock:
                for key, node, state in items:
                    attempt = self._watched.get(key)
                    if attempt is None:
                        continue
                    attempt.live.node, attempt.live.state = node, state
                    if attempt.live.started is None:
                        attempt.live.started = time.monotonic()
                if not self._watched:
                    self._poller = None
                    return
            time.sleep(POLL_SECONDS)


class _NoAgentNode(BridgeError):
    pass


def rebase(value: Any, moves: dict[str, str]) -> Any:
    """`value` with every string under a node folder moved under the run folder's equivalent."""
    if isinstance(value, dict):
        return {k: rebase(v, moves) for k, v in value.items()}
    if isinstance(value, list):
        return [rebase(v, moves) for v in value]
    if isinstance(value, str):
        for old, new in moves.items():
            if value == old or value.startswith(old + "/"):
                return new + value[len(old) :]
    return value
