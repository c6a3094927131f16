"""Opening 8 (names): a file name that is not UTF-8 survives record → verify → pack → unpack →
verify → replay byte for byte; long or conflicting names in `recordings unpack` / `replay` give a
clear error (RecordingError, exit code 2 on the CLI), never a traceback."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from bridge.errors import RecordingError
from bridge.recording.events import read_events
from bridge.recording.packing import pack_recording, unpack_recording
from bridge.recording.replay import replay
from bridge.recording.verify import verify_recording
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from tests.helpers import NullScorer

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"
RAW_FILE = b"caf\xe9.txt"  # Latin-1 bytes: not UTF-8
RAW_DIR = b"d\xff"


def test_non_utf8_names_round_trip_through_every_recording_verb(tmp_path: Path, tasks_dir: Path) -> None:
    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=NullScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.3),
    )
    try:
        status = mgr.start("word-duel", tmp_path / "ws")
        ws = os.fsencode(tmp_path / "ws")
        with open(os.path.join(ws, RAW_FILE), "wb") as fh:
            fh.write(b"hello\n")
        os.mkdir(os.path.join(ws, RAW_DIR))
        with open(os.path.join(ws, RAW_DIR, b"x.py"), "wb") as fh:
            fh.write(b"X = 1\n")
        time.sleep(0.6)
        receipt = mgr.submit(status.session_id)
        mgr.wait_jobs(60)
    finally:
        mgr.close()
    rec = Path(status.recording)
    raw_log = (rec / "events.jsonl").read_bytes()
    raw_log.decode("utf-8")  # the log stays valid UTF-8: the bytes are JSON escapes
    paths = {e.get("path") for e in read_events(rec / "events.jsonl")}
    assert os.fsdecode(RAW_FILE) in paths and os.fsdecode(RAW_DIR + b"/x.py") in paths
    report = verify_recording(rec)
    assert report.ok, report.problems
    archive = pack_recording(rec, tmp_path / "r.tar.gz")
    unpacked = unpack_recording(archive, tmp_path / "un").recording
    report = verify_recording(unpacked)
    assert report.ok, report.problems
    for source in (rec, unpacked):
        out = tmp_path / f"out-{source.name}"
        res = replay(source, "submission", out)
        assert res.tree_hash == receipt.tree_hash
        assert (Path(os.fsdecode(os.path.join(os.fsencode(out), RAW_FILE)))).read_bytes() == b"hello\n"
        assert set(os.listdir(os.fsencode(out))) == {b"README.md", RAW_FILE, RAW_DIR}
    # The CLI's JSON output keeps the bytes as escapes instead of crashing or emitting bad UTF-8.
    proc = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "timeline", str(rec), "--json"],
        capture_output=True,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert os.fsdecode(RAW_FILE) in json.dumps(json.loads(proc.stdout.decode("utf-8")), ensure_ascii=False)


# ----------------------------------------------------------------------------- unpack


def _archive(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name in ["r/session.json", "r/events.jsonl", *names]:
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 2
                tar.addfile(info, io.BytesIO(b"{}"))
    return path


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["r/" + "n" * 300], "longer than 255 bytes"),
        (["r/" + "/".join(["d" * 200] * 20) + "/f"], r"longer than \d+ bytes"),
        (["r/a", "r/a/b"], "both a file and a folder"),
        (["r/a/b", "r/a"], "both a file and a folder"),
        (["r/x/", "r/x/y", "r/x/y/z"], "both a file and a folder"),
    ],
)
def test_unpack_refuses_long_and_conflicting_names_with_a_clear_error(
    tmp_path: Path, names: list[str], message: str
) -> None:
    archive = _archive(tmp_path / "a.tar.gz", names)
    with pytest.raises(RecordingError, match=message):
        unpack_recording(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written
    proc = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "recordings", "unpack", str(archive), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and re.search(message, proc.stderr)


def test_unpack_into_an_existing_destination_is_a_clear_error(tmp_path: Path) -> None:
    archive = pack_recording(SAMPLE, tmp_path / "s.tar.gz")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for dest in ("busy", "file"):
        proc = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "recordings", "unpack", str(archive), "-o", str(tmp_path / dest)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "new or empty" in proc.stderr


# ----------------------------------------------------------------------------- replay


def _with_event(tmp_path: Path, path: str) -> tuple[Path, int]:
    """The sample recording plus one crafted file event (content of an existing blob) at `path`."""
    rec = tmp_path / "rec"
    shutil.copytree(SAMPLE, rec)
    events = list(read_events(rec / "events.jsonl"))
    model = next(e for e in events if e.get("type") == "file_created" and e.get("path") == "app.py")
    seq = events[-1]["seq"] + 1
    crafted = {**model, "seq": seq, "path": path}
    with open(rec / "events.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(crafted) + "\n")
    return rec, seq


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("app.py/inner.py", "both a file and a folder"),  # app.py is a file at that moment
        ("n" * 300, "longer than 255 bytes"),
        ("/".join(["d" * 200] * 20), r"longer than \d+ bytes"),
        ("../escape.py", "'..' in path refused"),  # every event path goes through the one validator
    ],
)
def test_replay_refuses_long_and_conflicting_names_with_a_clear_error(tmp_path: Path, path: str, message: str) -> None:
    rec, seq = _with_event(tmp_path, path)
    with pytest.raises(RecordingError, match=message):
        replay(rec, f"event:{seq}", tmp_path / "out")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge.cli",
            "replay",
            str(rec),
            "--at",
            f"event:{seq}",
            "--out",
            str(tmp_path / "out2"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and re.search(message, proc.stderr)


def test_replay_into_an_existing_destination_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for dest, message in (("busy", "not empty"), ("file", "not a directory")):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bridge.cli",
                "replay",
                str(SAMPLE),
                "--at",
                "submission",
                "--out",
                str(tmp_path / dest),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and re.search(message, proc.stderr)
