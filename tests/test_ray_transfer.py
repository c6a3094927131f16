"""What an attempt run on a Ray node sends back (bridge/agents/ray/transfer.py), without a cluster:
recordings round-trip sealed and are refused when their archive or content was altered on the
way; an attempt folder keeps the agent's stream under the cap, and an agent's link out of its
workspace is dropped on the driver instead of being written there."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from bridge.agents.ray.driver import rebase
from bridge.agents.ray.transfer import pack_folder, pack_recordings, receive_recording, unpack_folder
from bridge.errors import BridgeError
from bridge.fs import walk as fs_walk
from bridge.recording.verify import verify_recording

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


@pytest.fixture()
def node_recs(tmp_path: Path) -> Path:
    recs = tmp_path / "node" / "recordings" / "run" / "kv-ledger" / "a1"
    shutil.copytree(SAMPLE, recs / SAMPLE.name)
    return recs


def test_recording_round_trip_is_verified(node_recs: Path, tmp_path: Path) -> None:
    (packed,) = pack_recordings(node_recs, tmp_path / "node")
    assert packed["sid"] == SAMPLE.name and packed["seal"]
    driver = tmp_path / "driver" / "a1"
    receive_recording(driver, packed)
    assert verify_recording(driver / SAMPLE.name).ok
    assert (driver / SAMPLE.name / "events.jsonl").read_bytes() == (SAMPLE / "events.jsonl").read_bytes()


def test_damaged_or_altered_recordings_are_refused(node_recs: Path, tmp_path: Path) -> None:
    (packed,) = pack_recordings(node_recs, tmp_path / "node")
    flipped = bytearray(packed["archive"])
    flipped[len(flipped) // 2] ^= 0xFF
    with pytest.raises(BridgeError, match="archive hash differs"):
        receive_recording(tmp_path / "d1", {**packed, "archive": bytes(flipped)})
    with pytest.raises(BridgeError, match="refused"):
        receive_recording(tmp_path / "d2", {**packed, "sid": "../escape"})
    # altered on the node after its seal: the archive's own hash matches, the seal does not
    events = node_recs / SAMPLE.name / "events.jsonl"
    events.write_text(events.read_text().replace("adding", "removing"))
    (altered,) = pack_recordings(node_recs, tmp_path / "node")
    with pytest.raises(BridgeError, match="failed verification on arrival"):
        receive_recording(tmp_path / "d3", altered)
    assert not (tmp_path / "d3" / SAMPLE.name).exists()  # nothing altered is left in the run folder


def test_attempt_folder_cap_links_and_special_files(tmp_path: Path) -> None:
    folder = tmp_path / "a1"
    for sub in ("agent", "workspace/pkg", "home", "tmp"):
        (folder / sub).mkdir(parents=True)
    (folder / "agent" / "stream.jsonl").write_bytes(b"x" * 300)
    (folder / "state.json").write_text("{}")
    (folder / "workspace" / "pkg" / "app.py").write_bytes(b"y" * 300)
    (folder / "tmp" / "big.bin").write_bytes(b"z" * 600)
    os.symlink("/etc/passwd", folder / "workspace" / "passwd")  # the agent's link out of its workspace
    os.symlink("pkg/app.py", folder / "workspace" / "inside")
    os.mkfifo(folder / "workspace" / "pipe")
    data, left_out = pack_folder(folder, cap=700)
    assert sorted(left_out) == ["tmp/big.bin", "workspace/pipe"]  # the agent's stream first, tmp last
    dest = tmp_path / "driver" / "a1"
    skipped = unpack_folder(data, dest)
    assert skipped == ["workspace/passwd"]
    assert not (dest / "workspace" / "passwd").exists() and not (dest / "workspace" / "passwd").is_symlink()
    assert (dest / "workspace" / "inside").read_bytes() == b"y" * 300
    assert (dest / "agent" / "stream.jsonl").stat().st_size == 300 and (dest / "state.json").is_file()


def test_unpack_drops_escaping_members(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("../outside.txt", "/abs.txt", "ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    skipped = unpack_folder(buf.getvalue(), tmp_path / "dest")
    assert skipped == ["../outside.txt", "/abs.txt"]  # the one path validator refuses both
    assert not (tmp_path / "outside.txt").exists() and (tmp_path / "dest" / "ok.txt").is_file()
    assert not (tmp_path / "dest" / "abs.txt").exists() and not Path("/abs.txt").exists()


def test_rebase_moves_only_node_paths() -> None:
    entry = {
        "run": {"recording": "/tmp/n/recordings/r/t/a1/s", "trajectory": "/tmp/n/out/attempts/t/a1/agent/t.json"},
        "errors": ["/tmp/n/outside", "/tmp/n/out"],
        "score": 1.0,
    }
    moved = rebase(entry, {"/tmp/n/out": "/runs/x", "/tmp/n/recordings": "/runs/x/recordings"})
    assert moved["run"] == {
        "recording": "/runs/x/recordings/r/t/a1/s",
        "trajectory": "/runs/x/attempts/t/a1/agent/t.json",
    }
    assert moved["errors"] == ["/tmp/n/outside", "/runs/x"] and moved["score"] == 1.0


def test_files_vanishing_while_packing_are_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scoring job's clean-up removing its temporary folder from TMPDIR while the folder is
    packed (seen with the Codex CLI on a node) must not fail the attempt."""
    folder = tmp_path / "a1"
    (folder / "tmp" / "rgbridge-scoring-x").mkdir(parents=True)
    (folder / "tmp" / "rgbridge-scoring-x" / "log.txt").write_text("scoring")
    (folder / "agent").mkdir()
    (folder / "agent" / "stream.jsonl").write_text("{}\n")
    for module, name in ((os, "walk"), (fs_walk, "walk_files_at")):  # whichever lists the folder
        real = getattr(module, name)

        def walk_then_clean(*args, _real=real, **kwargs):
            yield from _real(*args, **kwargs)
            shutil.rmtree(folder / "tmp" / "rgbridge-scoring-x")  # listed, then gone before it is read

        monkeypatch.setattr(module, name, walk_then_clean)
    data, left_out = pack_folder(folder)
    assert any(rel.startswith("tmp/rgbridge-scoring-x") for rel in left_out), left_out
    unpack_folder(data, tmp_path / "driver")
    assert (tmp_path / "driver" / "agent" / "stream.jsonl").read_text() == "{}\n"


def test_a_folder_swapped_for_a_link_while_packing_is_not_read_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent process outliving its attempt (`--sandbox none`) swaps a listed folder for a link
    to outside before its files are read: pack_folder reads through the safe walker
    (bridge/fs/tarball.py), never through the link (issue 33 left this open)."""
    folder = tmp_path / "a1"
    (folder / "workspace" / "sub").mkdir(parents=True)
    (folder / "workspace" / "sub" / "notes.txt").write_text("my notes, longer than the secret")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "notes.txt").write_text("SECRET of the user")

    def swap() -> None:
        shutil.rmtree(folder / "workspace" / "sub")
        os.symlink(tmp_path / "outside", folder / "workspace" / "sub")

    for module, name in ((os, "walk"), (fs_walk, "walk_files_at")):  # whichever lists the folder
        real = getattr(module, name)

        def listed_then_swapped(*args, _real=real, **kwargs):
            yield from _real(*args, **kwargs)
            swap()

        monkeypatch.setattr(module, name, listed_then_swapped)
    data, left_out = pack_folder(folder)
    assert b"SECRET" not in data
    assert left_out == ["workspace/sub/notes.txt"]
