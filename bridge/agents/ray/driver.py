"""Agent runs on a Ray cluster: `rgbridge run --backend ray` (README "Agent runs on Ray"), the
driver's side.

One attempt = one Ray task needing one unit of the custom `agent` resource (a node started with
`--resources='{"agent": N, "docker": M}'` runs N attempts at once); its body is
bridge/agents/ray/node.py. The driver sends a typed order and validates the node's reply
(bridge/agents/ray/wire.py: a malformed one is an infra_error row), checks each archive's hash,
unpacks and verifies the recording against its seal, unpacks the attempt folder into the run
folder and puts the run folder's paths in place of the node's in the entry. Only the driver
writes the run folder (the runner's RunWriter records what `RemoteAttempt.run` returns), so the
report is a local run's.

Node loss: the driver runs the task again (up to MAX_RETRIES times) from scratch once the lost
node is declared dead; every execution has a folder of its own and nothing of a lost one reaches
the run folder, so no attempt is scored twice. After the retries the attempt is an `infra_error`
row with Ray's reason (`--resume` runs it again).

Before any attempt every node offering `agent` is checked (engine, the CLI and its version, the
sandbox, keys present, by name only): a failing node is named and the run refused, and so is a
CLI version that differs between nodes or from the driver's (a row records one version).
Ray is imported lazily, like the scoring backend (bridge/scoring/run/ray_backend.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

from bridge.agents.attempt.lifecycle import Attempt, Stopped
from bridge.agents.ray.checks import (
    AGENT_RESOURCE,
    CHECK_SECONDS,
    START_FIX,
    facts_checks,
    failed,
    first_line,
    gather_facts,
)
from bridge.agents.ray.node import POLL_SECONDS, attempt_on_node
from bridge.agents.ray.transfer import receive_recording, unpack_folder
from bridge.agents.ray.wire import AttemptOrder, NodeProgress, NodeReply, reply_from_wire
from bridge.agents.run.backend import OnAuth
from bridge.agents.run.options import RunOptions
from bridge.agents.run.settings import RunSettings
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.scoring.run.backend import BackendName
from bridge.scoring.run.ray_backend import ProgressBox, connect
from bridge.scoring.run.report_row import ReportRow
from bridge.tasks.model import Task

MAX_RETRIES = 2
#: how long attempts may wait while no alive node offers the agent resource
NO_AGENT_GRACE_SECONDS = 60.0
#: phases of a driver-side attempt whose agent had ended (a local first part): finished there
_FINISHABLE = ("agent_done", "submitted")


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
    """The driver's side of a `--backend ray` run (bridge/agents/run/backend.py `AgentBackend`):
    the cluster joined and checked, the attempts in flight, their progress by node."""

    name: ClassVar[BackendName] = "ray"

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self._ray: Any = None
        self.settings: RunSettings | None = None
        self._lock = threading.Lock()
        self._watched: dict[str, RemoteAttempt] = {}
        self._poller: threading.Thread | None = None

    def check(self) -> None:
        """Nothing of this machine: the keys and CLIs that matter are the nodes', checked by
        `prepare` once the driver's CLI version is known."""

    def prepare(self, settings: RunSettings, *, spent: float, on_auth: OnAuth) -> RunSettings:
        """The cluster joined and every node offering `agent` checked; the settings unchanged
        (each node's attempt starts a model gateway of its own)."""
        options = self.options
        ray = self._ray = connect(options.ray_address)
        self.settings = settings
        if self.agent_slots() < 1:
            raise BridgeError(f"no node of the Ray cluster offers the '{AGENT_RESOURCE}' resource: {START_FIX}")
        facts = gather_facts(ray, [options.agent], options.agent_bin, options.agent_cmd, options.sandbox, CHECK_SECONDS)
        checks = facts_checks(
            facts,
            [options.agent],
            required=True,
            driver_version=settings.agent_version,
            keys_required=not options.model_base_url,  # as check_key: an endpoint of the user's may need none
        )
        bad = failed(checks)
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
        return settings

    def agent_slots(self) -> int:
        return int(self._ray.cluster_resources().get(AGENT_RESOURCE, 0) or 0)

    def workers(self) -> int:
        """Attempts the driver keeps in flight: the cluster's agent slots (or --workers if more)."""
        return max(self.options.workers, self.agent_slots())

    def attempt(self, settings: RunSettings, task: Task, number: int, stop: threading.Event) -> Attempt:
        return RemoteAttempt(self, settings, task, number, stop)

    def close(self) -> None:
        """Nothing to stop: a cancelled attempt's worker is killed by `_wait`, the poller ends
        with the last attempt watched."""

    # -- one attempt

    def order(self, attempt: RemoteAttempt) -> AttemptOrder:
        assert self.settings is not None, "prepare() first"
        return AttemptOrder(
            key=attempt.key,
            task=attempt.task.id,
            number=attempt.number,
            run_id=self.options.run_id,
            task_hash=attempt.task.content_hash,
            agent_version=self.settings.agent_version,
            prompt=self.settings.prompt,
            run_config=self.settings.run_config,
        )

    def run(self, attempt: RemoteAttempt) -> ReportRow:
        ray = self._ray
        order = self.order(attempt).wire()
        submitted = time.monotonic()
        lost: list[str] = []
        while True:
            attempt.live.state, attempt.live.node = ("queued", "") if not lost else ("retrying", attempt.live.node)
            # Retried here, not by Ray: a retry Ray schedules at once may land on the dying node
            # before it is declared dead and spend every retry there.
            ref = self._remote.options(resources={AGENT_RESOURCE: 1}, num_cpus=0, max_retries=0).remote(
                self.options, order, self._box
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

    def _wait(self, ref: Any, attempt: RemoteAttempt) -> object:
        ray = self._ray
        no_agent_since: float | None = None
        last_check = time.monotonic()
        while True:
            ready, _ = ray.wait([ref], num_returns=1, timeout=POLL_SECONDS)
            if ready:
                return ray.get(ref)  # untrusted until `reply_from_wire`
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
        s, task = attempt.settings, attempt.task
        agent = {"name": s.adapter.name, "version": s.agent_version, "model": self.options.model}
        row = {"repo_name": task.id, "lang": task.lang, "outcome": "infra_error", "infra_reason": "ray", "error": error}
        return ReportRow.model_validate({**row, "agent": agent, "attempt": attempt.number})

    def _arrive(self, attempt: RemoteAttempt, data: object, submitted: float, lost: list[str]) -> ReportRow:
        """The node's reply taken in: validated, its recordings and folder into the run folder,
        its row with the run folder's paths (an infra_error row when any of it is refused)."""
        try:
            out = reply_from_wire(data)
        except BridgeError as exc:
            node = data.get("node") if isinstance(data, dict) else None
            return self._infra(attempt, exc, str(node) if isinstance(node, str) else "?")
        attempt.live.node = out.node
        if out.setup_error is not None:
            return self._infra(attempt, BridgeError(out.setup_error), out.node)
        try:
            for rec in out.recordings:
                receive_recording(attempt.rec_dir, rec.model_dump())
        except BridgeError as exc:
            return self._infra(attempt, exc, out.node)
        skipped: list[str] = []
        if out.folder:
            if attempt.dir.exists():  # never expected: set aside rather than mixed
                attempt.dir.rename(
                    attempt.dir.with_name(f"{attempt.dir.name}.interrupted-{time.strftime('%Y%m%dT%H%M%S')}")
                )
            skipped = unpack_folder(out.folder, attempt.dir)
        # Where it ran and what it cost: `driver_seconds` (submitted to unpacked here) minus
        # `attempt_seconds` (Attempt.run on the node) is the Ray backend's own overhead.
        facts = {
            "node": out.node,
            "driver_seconds": round(time.monotonic() - submitted, 3),
            "node_seconds": out.node_seconds,
            "attempt_seconds": out.attempt_seconds,
            "left_out": out.left_out,
            "refused_members": skipped,
            "lost_executions": lost,  # executions lost with their worker or node before this one
        }
        if attempt.dir.is_dir():
            write_json_atomic(attempt.dir / "ray.json", facts)
        attempt.live.ended = time.monotonic()
        return self._row(attempt, out)

    def _row(self, attempt: RemoteAttempt, out: NodeReply) -> ReportRow:
        """The attempt's row from the node's ending (Stopped and BridgeError as a local run's)."""
        if out.stopped is not None:
            attempt.live.state = "stopped"
            raise Stopped(out.stopped)
        if out.error is not None:
            attempt.live.state = "failed"
            raise BridgeError(out.error)
        attempt.live.state = "done"
        assert self.settings is not None and out.entry is not None  # validated: one ending
        moves = {out.node_out: str(self.settings.output_dir), out.node_recordings: str(self.settings.recordings)}
        try:  # the node's JSON, its paths now the driver's
            return ReportRow.model_validate(rebase(out.entry, moves))
        except ValueError as exc:
            return self._infra(attempt, BridgeError(f"the node's row is no report row: {first_line(exc)}"), out.node)

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
                for item in items if isinstance(items, list) else []:
                    said = NodeProgress.from_item(item)  # a line that is none is dropped
                    attempt = self._watched.get(said.key) if said is not None else None
                    if said is None or attempt is None:
                        continue
                    attempt.live.node, attempt.live.state = said.node, said.state
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
