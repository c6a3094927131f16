"""Where a run's attempts run, without a cluster: one backend per name and the runner asks for
none by name (bridge/agents/run/backend.py); the Ray messages are typed and a node's malformed
reply is an infra_error row with the reason, not a KeyError (bridge/agents/ray/wire.py); the
plan of a run from the command line and the resume merge (bridge/agents/run/plan.py)."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.adapters.registry import adapter as find_adapter
from bridge.agents.ray.driver import RayAttempts, RemoteAttempt
from bridge.agents.ray.wire import AttemptOrder, NodeProgress, NodeReply, WireError, order_from_wire, reply_from_wire
from bridge.agents.run.local import LocalAttempts
from bridge.agents.run.options import RUN_FILE, RunOptions
from bridge.agents.run.plan import RunRequest, plan_run
from bridge.agents.run.prompt import bridge_template
from bridge.agents.run.runner import backend_for
from bridge.agents.run.settings import RunSettings
from bridge.errors import BridgeError
from bridge.scoring.run.backend import BACKENDS
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent


def _options(**update: Any) -> RunOptions:
    base = {"agent": "command", "tasks": ["kv-ledger"], "run_id": "r", "recordings": "/nowhere/recordings"}
    return RunOptions.model_validate({**base, **update})


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.from_options()


def _settings(catalog: Catalog, out: Path) -> RunSettings:
    return RunSettings(
        adapter=find_adapter("command"),
        binary="/bin/true",
        agent_version="1.0",
        catalog=catalog,
        output_dir=out,
        recordings=out / "recordings",
        run_id="r",
        time_limit=10.0,
        profile="both",
    )


# ----------------------------------------------------------------------------- the protocol


def test_one_backend_per_name() -> None:
    for name in BACKENDS:
        backend = backend_for(_options(backend=name))
        assert backend.name == name
    assert isinstance(backend_for(_options()), LocalAttempts)
    assert isinstance(backend_for(_options(backend="ray")), RayAttempts)


def test_the_runner_asks_for_no_backend_by_name() -> None:
    """No comparison with the backend's name in the runner: the backend says what it does."""
    tree = ast.parse((REPO_ROOT / "bridge" / "agents" / "run" / "runner.py").read_text())
    named = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(side, ast.Constant) and side.value in BACKENDS for side in (node.left, *node.comparators))
    ]
    assert not named, f"runner.py compares with a backend's name at lines {named}"


def test_a_ray_run_joins_no_cluster_before_prepare() -> None:
    """Building the Ray backend touches no cluster (the refusals of `check` come first)."""
    backend = RayAttempts(_options(backend="ray", ray_address="127.0.0.1:9"))
    backend.check()  # the keys are the nodes': nothing checked here
    assert backend.settings is None


# ----------------------------------------------------------------------------- the wire


def _reply(**update: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "node": "10.0.0.1/abcdef",
        "entry": {"repo_name": "kv-ledger"},
        "recordings": [{"sid": "s1", "archive": b"x", "sha256": "0" * 64, "seal": None}],
        "folder": b"",
        "left_out": [],
        "node_out": "/tmp/n/out",
        "node_recordings": "/tmp/n/recordings",
        "attempt_seconds": 1.5,
        "node_seconds": 2.0,
    }
    return {**base, **update}


def test_a_node_reply_round_trips() -> None:
    reply = reply_from_wire(_reply())
    assert reply.ending == "entry" and reply.recordings[0].archive == b"x"
    assert reply_from_wire(reply.wire()) == reply
    assert reply_from_wire(NodeReply(node="n", setup_error="no CLI").wire()).ending == "setup_error"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("not a reply", "malformed"),
        ({"entry": {}}, "node"),
        (_reply(entry=None), "exactly one of"),
        (_reply(stopped="cut"), "exactly one of"),
        (_reply(node_out=""), "node's folders"),
        (_reply(recordings=[{"sid": "s1", "archive": "not bytes", "sha256": "0"}]), "recordings.0.archive"),
        (_reply(attempt_seconds="1"), "attempt_seconds"),
        (_reply(surprise=1), "surprise"),
    ],
)
def test_a_malformed_node_reply_is_refused_with_its_reason(data: Any, reason: str) -> None:
    with pytest.raises(WireError, match="the node's reply is malformed") as err:
        reply_from_wire(data)
    assert reason in str(err.value)


def test_the_order_crosses_with_the_runs_own_prompt() -> None:
    order = AttemptOrder(
        key="kv-ledger.a1",
        task="kv-ledger",
        number=1,
        run_id="r",
        task_hash="h",
        agent_version="1.0",
        prompt=bridge_template(),
        run_config={"hash": "c"},
    )
    assert order_from_wire(order.wire()) == order
    with pytest.raises(WireError, match="number"):
        order_from_wire({**order.wire(), "number": 0})


def test_progress_lines_that_are_none_are_dropped() -> None:
    assert NodeProgress.from_item(("k", "n", "agent")) == NodeProgress(key="k", node="n", state="agent")
    for bad in (None, ("k", "n"), ("k", "n", 3), {"key": "k"}, ("k", "n", "s", "extra")):
        assert NodeProgress.from_item(bad) is None


def test_a_malformed_reply_is_an_infra_error_row(catalog: Catalog, tmp_path: Path) -> None:
    """What once was a KeyError in the driver's thread (a reply without its recordings) is a row
    that says what was wrong, and nothing of the reply reaches the run folder."""
    cluster = RayAttempts(_options(backend="ray"))
    settings = _settings(catalog, tmp_path / "out")
    cluster.settings = settings
    attempt = RemoteAttempt(cluster, settings, catalog.get("kv-ledger"), 1, threading.Event())
    for data in ({"node": "10.0.0.1/abcdef", "entry": {"repo_name": "kv-ledger"}}, ["garbage"]):
        row = cluster._arrive(attempt, data, time.monotonic(), [])
        assert row.outcome == "infra_error" and row.infra_reason == "ray"
        assert row.error is not None and "the node's reply is malformed" in row.error
    assert not attempt.dir.exists() and not attempt.rec_dir.exists()


# ----------------------------------------------------------------------------- the plan


def test_a_new_plan_from_the_command_line(catalog: Catalog, tmp_path: Path) -> None:
    options, out = plan_run(
        RunRequest(agent="command", tasks=["kv-ledger", "kv-ledger"], run_id="p1", output_dir=tmp_path / "o"), catalog
    )
    assert out == tmp_path / "o" and options.tasks == ["kv-ledger"] and options.backend == "local"
    assert options.recordings == str(tmp_path / "o" / "recordings")
    with pytest.raises(BridgeError, match="--agent is required"):
        plan_run(RunRequest(tasks=["kv-ledger"]), catalog)
    with pytest.raises(BridgeError, match="unknown task 'nope'"):
        plan_run(RunRequest(agent="command", tasks=["nope"], run_id="p2"), catalog)


def test_a_resume_keeps_the_runs_options_but_the_backend_given_now(catalog: Catalog, tmp_path: Path) -> None:
    with pytest.raises(BridgeError, match="needs --output-dir"):
        plan_run(RunRequest(resume=True), catalog)
    with pytest.raises(BridgeError, match="holds no run"):
        plan_run(RunRequest(resume=True, output_dir=tmp_path), catalog)
    kept = _options(backend="ray", ray_address="h:1", attempts=3, allow_errors=True)
    (tmp_path / RUN_FILE).write_text(kept.model_dump_json())
    same, out = plan_run(RunRequest(resume=True, output_dir=tmp_path, attempts=1, agent="other"), catalog)
    assert out == tmp_path and same == kept  # what was given now but the backend is not the run's
    moved, _ = plan_run(RunRequest(resume=True, output_dir=tmp_path, backend="local"), catalog)
    assert moved.backend == "local" and moved.ray_address == "h:1" and moved.allow_errors
