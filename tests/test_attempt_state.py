"""The attempt's state file (bridge/agents/attempt/state.py): round trip, older files, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.agents.attempt.state import AttemptState

# a state.json as the dict-based attempt wrote it after its agent ended (before the typed model)
OLD_AGENT_DONE = {
    "phase": "agent_done",
    "started_at": 1764970000.25,
    "session_id": "s-0123",
    "server_seconds": 1.5,
    "server_end_seconds": 0.2,
    "server_lost": None,
    "ended": "time_limit",
    "exit_code": None,
    "agent_seconds": 30.0,
    "agent_ended_at": 1764970032.0,
    "sandbox": {"kind": "bwrap", "version": "0.9.0", "confined": True, "limits": {"memory": "2g"}},
}


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = AttemptState().updated(phase="starting", started_at=1.0)
    state = state.updated(phase="running", session_id="s-1", server_seconds=0.5)
    state.updated(phase="agent_error", agent_error={"class": "auth", "message": "no key", "retries": 0}).save(path)
    loaded = AttemptState.load(path)
    assert loaded.phase == "agent_error"
    assert (loaded.started_at, loaded.session_id, loaded.server_seconds) == (1.0, "s-1", 0.5)
    assert loaded.agent_error == {"class": "auth", "message": "no key", "retries": 0}
    # only what the phases wrote is on disk, as before the model
    assert set(json.loads(path.read_text())) == {"phase", "started_at", "session_id", "server_seconds", "agent_error"}


def test_an_old_file_loads_and_saves_the_same_json(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(OLD_AGENT_DONE))
    state = AttemptState.load(path)
    assert state.phase == "agent_done" and state.ended == "time_limit" and state.sandbox == OLD_AGENT_DONE["sandbox"]
    state.save(path)
    assert json.loads(path.read_text()) == OLD_AGENT_DONE  # explicit nulls kept, nothing added


def test_unknown_keys_of_an_old_file_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({**OLD_AGENT_DONE, "retired_field": [1, 2]}))
    state = AttemptState.load(path)
    assert state.session_id == "s-0123"
    state.updated(phase="submitted", submitted_by="time_limit").save(path)
    data = json.loads(path.read_text())
    assert "retired_field" not in data and data["phase"] == "submitted" and data["submitted_by"] == "time_limit"


@pytest.mark.parametrize(
    "text",
    [
        None,  # no file
        "",
        "{not json",
        "[1, 2]",
        '"running"',
        '{"phase": "flying", "session_id": "s-1"}',  # a phase no bridge writes
        '{"phase": "running", "agent_seconds": "a while"}',
        '{"phase": "running", "sandbox": "bwrap"}',
    ],
)
def test_a_missing_or_malformed_file_is_an_empty_state(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "state.json"
    if text is not None:
        path.write_text(text)
    state = AttemptState.load(path)
    assert state == AttemptState()
    assert state.phase is None and state.session_id is None


def test_every_phase_the_attempt_writes_is_a_phase() -> None:
    for phase in ("starting", "running", "stopped", "agent_done", "submitted", "scored", "abandoned", "agent_error"):
        assert AttemptState().updated(phase=phase).phase == phase


def test_an_unknown_field_or_a_wrong_value_is_refused_on_write() -> None:
    with pytest.raises(KeyError, match="sesion_id"):
        AttemptState().updated(sesion_id="s-1")
    with pytest.raises(ValueError):
        AttemptState().updated(phase="done")


def test_save_is_atomic_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    AttemptState().updated(phase="starting", started_at=2.0).save(path)
    AttemptState.load(path).updated(phase="running").save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    assert json.loads(path.read_text()) == {"phase": "running", "started_at": 2.0}
