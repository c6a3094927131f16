"""Practice mode: an opt-in deploy-only check, recorded as such, that runs no golden test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from bridge.errors import SessionError
from bridge.recording.events import load_events
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server


def test_practice_is_off_by_default(tmp_path: Path, tasks_dir: Path) -> None:
    mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec", scorer=lambda *a, **k: None)
    try:
        sid = mgr.start("kv-ledger", tmp_path / "ws").session_id
        with pytest.raises(SessionError, match="practice checks are off"):
            mgr.practice_check(sid)
        names = anyio.run(_tool_names, build_server(mgr, default_workspace=tmp_path))
        assert "check_deployment" not in names
    finally:
        mgr.close()


async def _tool_names(server) -> list[str]:
    async with Client(server) as client:
        return [t.name for t in (await client.list_tools()).tools]


@pytest.mark.docker
def test_practice_check_deploys_without_tests(docker_client, tmp_path: Path, tasks_dir: Path) -> None:
    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        settings=SessionSettings(practice=True),
    )
    try:
        ws = tmp_path / "ws"
        sid = mgr.start("kv-ledger", ws).session_id
        assert "check_deployment" in anyio.run(_tool_names, build_server(mgr, default_workspace=tmp_path))
        not_yet = mgr.practice_check(sid)
        assert not_yet["deployed"] is False and "entry point" in not_yet["message"]
        for item in (tasks_dir / "kv-ledger" / "solution").iterdir():
            shutil.copy2(item, ws / item.name)
        check = mgr.practice_check(sid)
        assert check["deployed"] is True and check["outcome"] == "scored", check
        rec = Path(mgr.status(sid).recording)
        events, _ = load_events(rec / "events.jsonl")
        practice = [e for e in events if e["type"] == "practice_check"]
        assert [e["deployed"] for e in practice] == [False, True]
        # Nothing about the golden tests was produced: no test log, no JUnit, no per-test result.
        produced = [p.name for p in (rec / "results").rglob("*") if p.is_file()]
        assert "practice.json" in produced
        assert not {"junit.xml", "tests.log", "collect.log", "result.json"} & set(produced)
        golden_names = {p.name for p in (tasks_dir / "kv-ledger" / "tests").rglob("test_*.py")}
        for path in (rec / "results").rglob("*"):
            if path.is_file():
                text = path.read_text(errors="replace")
                assert not any(name in text for name in golden_names)
        stored = [
            json.loads(p.read_text())["deployed"] for p in sorted((rec / "results").glob("practice-*/practice.json"))
        ]
        assert stored == [False, True]
        assert mgr.status(sid).state == "active"  # a practice check is not a submission
    finally:
        mgr.close()
