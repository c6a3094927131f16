"""Deterministic packing, hostile archives, sealing and tamper detection."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from bridge.errors import RecordingError
from bridge.recording.integrity import seal_recording
from bridge.recording.packing import pack_recording, unpack_recording
from bridge.recording.verify import verify_recording

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


@pytest.fixture()
def rec(tmp_path: Path) -> Path:
    dest = tmp_path / "recs" / SAMPLE.name
    shutil.copytree(SAMPLE, dest)
    return dest


def test_committed_sample_verifies() -> None:
    report = verify_recording(SAMPLE)
    assert report.ok, report.problems
    assert report.sealed and report.checked["checkpoints"] >= 4 and report.checked["results"] >= 1


def test_pack_is_deterministic_and_round_trips(rec: Path, tmp_path: Path) -> None:
    a = pack_recording(rec, tmp_path / "a.tar.gz")
    os.utime(rec / "events.jsonl", (1, 1))  # mtimes, owners and modes never reach the archive
    os.chmod(rec / "session.json", 0o600)
    (rec / "owner.pid").write_text("123")  # process-local: left out
    b = pack_recording(rec, tmp_path / "b.tar.gz")
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        names = tar.getnames()
        assert names == sorted(names, key=lambda n: n.encode()) and all(n.split("/")[0] == rec.name for n in names)
        assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.mode in (0o644, 0o755) for m in tar.getmembers())
        assert f"{rec.name}/owner.pid" not in names
    res = unpack_recording(a, tmp_path / "un")
    assert res.recording == (tmp_path / "un").resolve() or res.recording == tmp_path / "un"
    assert (tmp_path / "un" / "session.json").read_bytes() == (rec / "session.json").read_bytes()
    report = verify_recording(tmp_path / "un")
    assert report.ok, report.problems  # the seal survives packing
    # pack(unpack(pack(x))) == pack(x) (same top folder name)
    again = tmp_path / "again" / rec.name
    shutil.copytree(tmp_path / "un", again)
    assert pack_recording(again, tmp_path / "c.tar.gz").read_bytes() == a.read_bytes()


def test_pack_refuses_links(rec: Path, tmp_path: Path) -> None:
    os.symlink("/etc/passwd", rec / "results" / "link")
    with pytest.raises(RecordingError, match="symlink"):
        pack_recording(rec, tmp_path / "x.tar.gz")


def test_unpack_needs_empty_dir(rec: Path, tmp_path: Path) -> None:
    a = pack_recording(rec, tmp_path / "a.tar.gz")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(RecordingError, match="new or empty"):
        unpack_recording(a, tmp_path / "full")


# ----------------------------------------------------------------------------- hostile archives


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str, data: bytes = b"{}") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


BASE = [_file("r/session.json"), _file("r/events.jsonl", b"")]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([_file("/tmp/rgbridge-evil-abs")], "absolute path"),
        ([_file("r/../rgbridge-evil-dotdot")], "'..'"),
        ([_file("r/results/../../rgbridge-evil-dotdot2")], "'..'"),
        ([_special("r/results/link", tarfile.SYMTYPE, "../../../../etc/passwd")], "symlink refused"),
        ([_special("r/results/inner", tarfile.SYMTYPE, "logs")], "symlink refused"),
        ([_special("r/results/hard", tarfile.LNKTYPE, "r/session.json")], "hardlink refused"),
        ([_special("r/dev", tarfile.CHRTYPE)], "device file refused"),
        ([_special("r/blk", tarfile.BLKTYPE)], "device file refused"),
        ([_special("r/fifo", tarfile.FIFOTYPE)], "fifo refused"),
        ([_file("other/file")], "outside the top folder"),
        ([_file("r/session.json")], "duplicate"),
        ([_file("r/./x")], "empty or '.'"),
        ([_file("r/a\\..\\..\\x")], "invalid name"),
    ],
)
def test_hostile_members_are_refused(tmp_path: Path, extra: list, message: str) -> None:
    arc = _archive(tmp_path / "evil.tar.gz", BASE + extra)
    out = tmp_path / "out"
    with pytest.raises(RecordingError, match=message):
        unpack_recording(arc, out)
    assert not out.exists() or not any(out.iterdir())
    assert not (tmp_path / "rgbridge-evil-dotdot").exists() and not Path("/tmp/rgbridge-evil-abs").exists()


def test_caps(tmp_path: Path) -> None:
    many = _archive(tmp_path / "many.tar.gz", BASE + [_file(f"r/f{i}") for i in range(20)])
    with pytest.raises(RecordingError, match="more than 10 members"):
        unpack_recording(many, tmp_path / "o1", max_members=10)
    big = _archive(tmp_path / "big.tar.gz", BASE + [_file("r/big", b"\0" * 100_000)])
    with pytest.raises(RecordingError, match="file cap"):
        unpack_recording(big, tmp_path / "o2", max_file_bytes=50_000)
    with pytest.raises(RecordingError, match="exceed"):
        unpack_recording(big, tmp_path / "o3", max_total_bytes=60_000)
    ok = unpack_recording(big, tmp_path / "o4")
    assert ok.files == 3 and (tmp_path / "o4" / "big").stat().st_size == 100_000


def test_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b\x08\x00garbage" * 10)
    with pytest.raises(RecordingError):
        unpack_recording(junk, tmp_path / "o")
    no_session = _archive(tmp_path / "ns.tar.gz", [_file("r/events.jsonl", b"")])
    with pytest.raises(RecordingError, match="not a recording"):
        unpack_recording(no_session, tmp_path / "o2")


# ----------------------------------------------------------------------------- tampering


def _problems(rec: Path) -> list[str]:
    report = verify_recording(rec)
    assert not report.ok
    return report.problems


def test_tampered_event_line(rec: Path) -> None:
    lines = (rec / "events.jsonl").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"type":"note"' in ln)
    lines[i] = lines[i].replace("adding", "removing")
    (rec / "events.jsonl").write_text("\n".join(lines) + "\n")
    problems = _problems(rec)
    assert any(p.startswith("events.jsonl: altered after sealing") for p in problems), problems


def test_appended_event_line(rec: Path) -> None:
    with open(rec / "events.jsonl", "a") as fh:
        fh.write('{"seq":999,"t":"2099-01-01T00:00:00.000000Z","mono":0,"type":"note","text":"late"}\n')
    problems = _problems(rec)
    assert any("appended after sealing" in p for p in problems)
    assert any("seq 999 follows" in p for p in problems)


def test_tampered_store_ref(rec: Path) -> None:
    head = (rec / "store/refs/heads/main").read_text().strip()
    first_ck = next(json.loads(ln) for ln in (rec / "events.jsonl").read_text().splitlines() if '"checkpoint"' in ln)
    (rec / "store/refs/rgbridge/submission").write_text(first_ck["commit"] + "\n")
    assert first_ck["commit"] != head
    problems = _problems(rec)
    assert any(p.startswith("store/refs/rgbridge/submission: ref changed after sealing") for p in problems), problems
    assert any("points at" in p for p in problems)  # the content check names it too


def test_tampered_result_file(rec: Path) -> None:
    result = next((rec / "results").glob("submission-*/result.json"))
    data = json.loads(result.read_text())
    data["profiles"]["strict"]["pass_at_1"]["passed"] = 0
    result.write_text(json.dumps(data, indent=2))
    problems = _problems(rec)
    rel = result.relative_to(rec).as_posix()
    assert f"{rel}: changed after sealing" in problems


def test_added_and_removed_files(rec: Path) -> None:
    (rec / "results" / "extra.txt").write_text("x")
    log = next((rec / "results").glob("submission-*/logs/strict/tests.log"))
    log.unlink()
    problems = _problems(rec)
    assert "results/extra.txt: added after sealing" in problems
    assert f"{log.relative_to(rec).as_posix()}: removed after sealing" in problems


def test_content_checks_without_seal(rec: Path) -> None:
    """An unsealed (or re-sealed) recording still has to be self-consistent."""
    (rec / "integrity.json").unlink()
    assert any("not sealed" in p for p in _problems(rec))
    # a re-sealed recording with a forged snapshot hash in its result is still caught
    result = next((rec / "results").glob("submission-*/result.json"))
    data = json.loads(result.read_text())
    data["snapshot_hash"] = "0" * 64
    result.write_text(json.dumps(data))
    seal_recording(rec)
    problems = _problems(rec)
    assert any("snapshot_hash" in p and "result.json" in p for p in problems), problems


def test_forged_event_content_is_caught_after_reseal(rec: Path) -> None:
    lines = (rec / "events.jsonl").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"file_modified"' in ln)
    ev = json.loads(lines[i])
    ev["sha256"] = "ab" * 32
    lines[i] = json.dumps(ev, separators=(",", ":"))
    (rec / "events.jsonl").write_text("\n".join(lines) + "\n")
    seal_recording(rec)  # even a fresh seal cannot make inconsistent content pass
    problems = _problems(rec)
    assert any("is missing" in p and "app.py" in p for p in problems), problems


def test_deleted_store_object(rec: Path) -> None:
    sub = json.loads((rec / "session.json").read_text())["submission"]["commit"]
    obj = rec / "store" / "objects" / sub[:2] / sub[2:]
    obj.unlink()
    problems = _problems(rec)
    assert any("store/objects" in p for p in problems)
    assert any("missing" in p for p in problems)


def test_cli_verify_and_pack(rec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli import main

    assert main(["recordings", "verify", str(rec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert main(["recordings", "pack", str(rec), "-o", str(tmp_path / "r.tar.gz")]) == 0
    capsys.readouterr()
    assert main(["recordings", "unpack", str(tmp_path / "r.tar.gz"), "-o", str(tmp_path / "u"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verify"]["ok"] is True
    (rec / "results" / "index.json").write_text("{}")
    assert main(["recordings", "verify", str(rec)]) == 1
    assert "results/index.json: changed after sealing" in capsys.readouterr().out


def test_polls_after_the_seal_are_only_a_warning(rec: Path) -> None:
    """A client polling get_result after scoring appends mcp_call records to a sealed log."""
    last = json.loads((rec / "events.jsonl").read_text().splitlines()[-1])
    with open(rec / "events.jsonl", "a") as fh:
        fh.write(
            json.dumps(
                {
                    "seq": last["seq"] + 1,
                    "t": "2099-01-01T00:00:00.000000Z",
                    "mono": 0,
                    "type": "mcp_call",
                    "tool": "get_result",
                    "arguments": {},
                    "ok": True,
                    "error": None,
                },
                separators=(",", ":"),
            )
            + "\n"
        )
    report = verify_recording(rec)
    assert report.ok, report.problems
    assert any("appended after sealing" in w and "mcp_call" in w for w in report.warnings)


def test_live_quit_session_seals_and_verifies(tmp_path: Path) -> None:
    """A real (quit) session sealed at the point where session.py's hook goes verifies, and
    its replayed end state equals the workspace."""
    from bridge.fs.hashing import tree_hash
    from bridge.recording.integrity import try_seal
    from bridge.recording.replay import replay
    from bridge.sessions.manager import SessionManager
    from bridge.sessions.settings import RecorderSettings, SessionSettings
    from bridge.tasks.catalog import Catalog

    mgr = SessionManager(
        Catalog.from_options(),
        recordings_dir=tmp_path / "recs",
        settings=SessionSettings(recorder=RecorderSettings(settle_seconds=0.05)),
    )
    try:
        st = mgr.start("kv-ledger", tmp_path / "ws")
        (tmp_path / "ws" / "app.py").write_text("print('hi')\n")
        (tmp_path / "ws" / "run.sh").write_text("#!/bin/sh\n")
        os.chmod(tmp_path / "ws" / "run.sh", 0o755)
        mgr.note(st.session_id, "bye")
        mgr.quit(st.session_id, "test")
        rec = Path(st.recording)
        assert try_seal(rec) is None
        mgr.log_call(st.session_id, "get_result", {}, ok=True)
    finally:
        mgr.close()
    report = verify_recording(rec)
    assert report.ok, report.problems
    res = replay(rec, "end", tmp_path / "out")
    assert res.tree_hash == tree_hash(tmp_path / "ws") and os.access(tmp_path / "out" / "run.sh", os.X_OK)
