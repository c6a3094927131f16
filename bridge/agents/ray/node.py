"""The node's side of an agent run on Ray: the body of one Ray task (`attempt_on_node`).

On its node the task builds the run's settings (`settings_for`: that node's CLI, data home and
Docker engine) in a private folder, runs `Attempt.run()` exactly as a local run does (session,
agent, recorder, score), then packs the recording as `rgbridge recordings pack` does and the
attempt folder (capped, bridge/agents/ray/transfer.py), and replies with both and the report
entry (bridge/agents/ray/wire.py `NodeReply`). A reaper (bridge/agents/ray/reaper.py) beside each
execution ends the attempt's processes and removes the private folder when its worker dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bridge.agents.attempt.lifecycle import Attempt, Stopped
from bridge.agents.confine.protected import source_of
from bridge.agents.ray.reaper import settle, start_reaper, stop_reaper
from bridge.agents.ray.transfer import pack_folder, pack_recordings
from bridge.agents.ray.wire import AttemptOrder, NodeReply, PackedRecording, order_from_wire
from bridge.agents.run.options import RunOptions
from bridge.agents.run.settings import RunSettings, settings_for
from bridge.errors import BridgeError
from bridge.scoring.run.ray_backend import node_label
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

POLL_SECONDS = 0.5
#: where a node keeps its attempts' private folders (default: the system's temporary folder)
NODE_DIR_ENV = "RGBRIDGE_RAY_ATTEMPTS_DIR"


def node_catalog(options: RunOptions) -> Catalog:
    """The run's tasks as this node sees them (the task options the agent's server gets)."""
    return Catalog.from_options(*source_of(options.server_args))


def node_base() -> Path:
    """This user's folder of private attempt folders on this node (0700)."""
    base = Path(os.environ.get(NODE_DIR_ENV) or tempfile.gettempdir()) / f"rgbridge-ray-attempts-{os.getuid()}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base


def sweep_stale() -> None:
    """Scoring containers whose owner died on this node, removed (best effort, as the scoring
    jobs do)."""
    with contextlib.suppress(Exception):
        from bridge.scoring.run.runner import sweep_stale as sweep_containers
        from bridge.scoring.sandbox.docker_client import get_client

        sweep_containers(get_client())


def node_settings(options: RunOptions, order: AttemptOrder, root: Path) -> tuple[RunSettings, Task]:
    """The run's settings on this node, in its private folder `root`, with the driver's prompt
    template and configuration; BridgeError when the task or the CLI differ from the driver's."""
    catalog = node_catalog(options)
    task = catalog.get(order.task)
    if task.content_hash != order.task_hash:
        raise BridgeError(
            f"task {task.id} differs on this node (hash {task.content_hash}, the driver's "
            f"{order.task_hash}): use the same task folders everywhere"
        )
    here = options.model_copy(update={"recordings": str(root / "recordings")})
    settings = replace(settings_for(here, catalog, root / "out"), prompt=order.prompt, run_config=order.run_config)
    if settings.agent_version != order.agent_version:
        raise BridgeError(f"{options.agent} {settings.agent_version} here, {order.agent_version} on the driver")
    return settings, task


def attempt_on_node(options: RunOptions, order: object, box: Any) -> dict[str, Any]:
    """Body of one Ray task: one attempt, run here as a local run runs it, and what the driver
    needs of it (a `NodeReply` as plain data: entry, recordings packed, attempt folder packed)."""
    began = time.monotonic()
    node = node_label()
    try:
        wanted = order_from_wire(order)
    except BridgeError as exc:
        return NodeReply(node=node, setup_error=str(exc)).wire()

    def say(state: str) -> None:
        with contextlib.suppress(Exception):  # progress is best effort; the driver may be gone
            box.say.remote(wanted.key, node, state)

    say("starting")
    root = Path(tempfile.mkdtemp(prefix=f"{wanted.run_id[:40]}-", dir=node_base())).resolve()
    reaper = start_reaper(root)
    try:
        sweep_stale()
        try:
            settings, task = node_settings(options, wanted, root)
        except BridgeError as exc:
            return NodeReply(node=node, setup_error=str(exc)).wire()
        attempt = Attempt(settings, task, wanted.number, threading.Event())
        ending, attempt_seconds = run_watched(attempt, say)
        # a detached scoring process may still clean its temporary folder up: packed once it is done
        settle(str(root), exclude=(reaper,) if reaper else ())
        recordings = [PackedRecording.model_validate(r) for r in pack_recordings(attempt.rec_dir, root)]
        folder, left_out = pack_folder(attempt.dir) if attempt.dir.is_dir() else (b"", [])
        reply = NodeReply(
            node=node,
            **ending,
            recordings=recordings,
            folder=folder,
            left_out=left_out,
            node_out=str(root / "out"),
            node_recordings=str(root / "recordings"),
            attempt_seconds=round(attempt_seconds, 3),
            node_seconds=round(time.monotonic() - began, 3),
        )
        return reply.wire()
    finally:
        settle(str(root), exclude=(reaper,) if reaper else (), timeout=10.0)
        shutil.rmtree(root, ignore_errors=True)
        stop_reaper(reaper)


def run_watched(attempt: Attempt, say: Callable[[str], None]) -> tuple[dict[str, Any], float]:
    """`attempt.run()` in a thread of its own, its state said as it changes; how it ended (one
    of NodeReply's endings) and its seconds. Anything but the bridge's errors is re-raised here,
    in the task's thread (Ray reports it)."""
    ending: dict[str, Any] = {}
    crash: list[BaseException] = []

    def body() -> None:
        try:
            ending["entry"] = attempt.run().to_json()  # JSON crosses to the driver
        except Stopped as exc:
            ending["stopped"] = str(exc)
        except BridgeError as exc:
            ending["error"] = str(exc)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the task's thread
            crash.append(exc)

    thread = threading.Thread(target=body, name=f"rgbridge-attempt-{attempt.key}", daemon=True)
    started = time.monotonic()
    thread.start()
    last = ""
    while thread.is_alive():
        thread.join(POLL_SECONDS)
        if attempt.live.state != last:
            last = attempt.live.state
            say(last)
    if crash:
        raise crash[0]
    return ending, time.monotonic() - started
