"""Issue 8, opening 5: a folder flipped between a directory and a symlink to an outside folder
while start_task runs must never get a session started on (or anything written to) the outside."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client

from bridge.errors import PathError, SessionError
from bridge.fs.anchor import open_workspace, still_at
from bridge.recording.store import ShadowStore
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server
from tests.helpers import CountingScorer, flipper


def test_flipping_folder_never_starts_outside(tmp_path: Path, tasks_dir: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "flip").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("outside data\n")
    manager = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(recorder=RecorderSettings(settle_seconds=0.05)),
    )
    server = build_server(manager, default_workspace=root, environ={})
    stop = threading.Event()
    started: list[dict] = []
    errors: list[str] = []

    async def go() -> None:
        async with Client(server, mode="legacy") as c:
            for i in range(40):
                res = await c.call_tool("start_task", {"task_id": "kv-ledger", "workspace": f"flip/w{i}"})
                if res.is_error:
                    errors.append(res.content[0].text)
                else:
                    started.append(res.structured_content)
                    await c.call_tool("quit_task", {"session_id": res.structured_content["session_id"]})

    thread = flipper(root, "flip", outside, stop)
    try:
        anyio.run(go)
    finally:
        stop.set()
        thread.join(5)
        manager.close()
    real_root = root.resolve()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"], "the bridge wrote into the outside folder"
    for st in started:
        assert Path(st["workspace"]).is_relative_to(real_root), st["workspace"]
        assert not Path(st["workspace"]).is_relative_to(outside.resolve())
        store = ShadowStore(Path(st["recording"]) / "store", Path(st["workspace"]))
        assert "secret.txt" not in store.manifest_of(store.head()), "outside files were recorded"
    assert not any("internal error" in e for e in errors), errors
    assert started or errors  # the loop ran
    print(f"started {len(started)}, refused {len(errors)}: {sorted({e[:60] for e in errors})}")


def test_anchor_refuses_symlinked_components(tmp_path: Path) -> None:
    (tmp_path / "real" / "ws").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(PathError, match="symlink"):
        open_workspace(tmp_path / "link" / "ws")
    with pytest.raises(PathError, match="symlink"):
        open_workspace(tmp_path / "link" / "new", create=True)
    assert not (tmp_path / "real" / "new").exists()
    fd = open_workspace(tmp_path / "real" / "ws")
    try:
        assert still_at(fd, tmp_path / "real" / "ws")
        os.rename(tmp_path / "real" / "ws", tmp_path / "real" / "moved")
        (tmp_path / "real" / "ws").mkdir()
        assert not still_at(fd, tmp_path / "real" / "ws")  # same path, another directory
    finally:
        os.close(fd)


def test_manager_start_rechecks_within_root(tmp_path: Path, tasks_dir: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    manager = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec", scorer=CountingScorer())
    try:
        with pytest.raises(PathError, match="outside"):
            manager.start("kv-ledger", root / "escape", within=root)
        assert list(outside.iterdir()) == []
    finally:
        manager.close()


def test_submit_refuses_a_workspace_path_redirected_after_start(tmp_path: Path, tasks_dir: Path) -> None:
    """After the start, the agent swaps a folder on its workspace's path for a symlink into the
    task folder, so that the path `.../flip/solution` now names the oracle solution. The submit
    must not snapshot (and score) that; once the folder is back, submitting again works."""
    root = tmp_path / "root"
    manager = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2, recorder=RecorderSettings(settle_seconds=0.05)),
    )
    try:
        st = manager.start("kv-ledger", root / "flip" / "solution", within=root)
        (Path(st.workspace) / "mine.txt").write_text("my own work\n")
        os.rename(root / "flip", root / "flip-real")
        (root / "flip").symlink_to(tasks_dir / "kv-ledger")
        with pytest.raises(SessionError, match="no longer leads to this session's folder"):
            manager.submit(st.session_id)
        status = manager.status(st.session_id)
        assert status.state == "active" and status.submission is None and "submit refused" in status.failure
        (root / "flip").unlink()
        os.rename(root / "flip-real", root / "flip")
        receipt = manager.submit(st.session_id)
        assert manager.result(st.session_id, wait_seconds=20).state == "done"
    finally:
        manager.close()
    store = ShadowStore(Path(st.recording) / "store", Path(st.workspace))
    files = set(store.manifest_of(receipt.commit))
    assert "mine.txt" in files and "app.py" not in files  # the agent's folder, not the solution
