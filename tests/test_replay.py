"""Replay and rescore of the committed sample recording (recordings/samples/kv-ledger-sample)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import zlib
from pathlib import Path

import pytest

from bridge.errors import RecordingError
from bridge.fs.hashing import tree_hash
from bridge.recording.event_model import Checkpoint, FileDeleted, FileEvent, FileMoved, Note, Submit
from bridge.recording.moments import resolve_moment
from bridge.recording.reader import open_recording
from bridge.recording.replay import replay
from bridge.recording.rescore import rescore
from bridge.recording.results import list_results
from bridge.recording.store import ShadowStore

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy: tests never write into the committed sample."""
    dest = tmp_path_factory.mktemp("sample") / SAMPLE.name
    shutil.copytree(SAMPLE, dest)
    return dest


def _copy(src: Path, tmp_path: Path) -> Path:
    dest = tmp_path / src.name
    shutil.copytree(src, dest)
    return dest


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode) & 0o111)
    return out


def test_sample_is_small_and_versioned() -> None:
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 1_000_000
    meta = json.loads((SAMPLE / "session.json").read_text())
    assert meta["format_version"] == 1 and meta["task_id"] == "kv-ledger" and meta["state"] == "scored"


def test_submission_replay_equals_submission_commit(sample: Path, tmp_path: Path) -> None:
    meta = json.loads((sample / "session.json").read_text())
    res = replay(sample, "submission", tmp_path / "out")
    assert res.tree_hash == meta["submission"]["tree_hash"]
    assert res.commit == meta["submission"]["commit"] and res.exact_commit
    assert tree_hash(tmp_path / "out") == meta["submission"]["tree_hash"]
    # byte for byte and mode for mode what git itself checks out of the submission commit
    git_out = tmp_path / "git"
    ShadowStore(sample / "store", tmp_path / "unused-ws").checkout_to(meta["submission"]["commit"], git_out)
    assert _snapshot(tmp_path / "out") == _snapshot(git_out)
    assert os.access(tmp_path / "out" / "start.sh", os.X_OK)
    assert not os.access(tmp_path / "out" / "app.py", os.X_OK)
    solution = Path(__file__).resolve().parent.parent / "tasks" / "kv-ledger" / "solution" / "app.py"
    assert (tmp_path / "out" / "app.py").read_bytes() == solution.read_bytes()


def test_every_checkpoint_replays_to_its_tree_hash(sample: Path, tmp_path: Path) -> None:
    rec = open_recording(sample)
    checkpoints = rec.of_type(Checkpoint)
    assert len(checkpoints) >= 4
    for ck in checkpoints:
        res = replay(rec, f"event:{ck.seq}", tmp_path / f"ck{ck.seq}")
        assert res.tree_hash == ck.tree_hash, ck


def test_moments_between_checkpoints_apply_file_events(sample: Path, tmp_path: Path) -> None:
    rec = open_recording(sample)
    created = next(e for e in rec.of_type(FileEvent) if e.type == "file_created" and e.path == "app.py")
    first = replay(rec, f"event:{created.seq}", tmp_path / "a")
    assert first.applied_events >= 1 and not first.exact_commit
    text = (tmp_path / "a" / "app.py").read_text()
    assert "/history" not in text.split("class RequestHandler")[0]  # the partial app
    assert not (tmp_path / "a" / "start.sh").exists()

    start_sh = next(e for e in rec.of_type(FileEvent) if e.type == "file_created" and e.path == "start.sh")
    replay(rec, f"event:{start_sh.seq}", tmp_path / "b")
    assert os.access(tmp_path / "b" / "start.sh", os.X_OK)

    moved = rec.of_type(FileMoved)[0]
    replay(rec, f"event:{moved.seq}", tmp_path / "c")
    assert (tmp_path / "c" / moved.dest).exists() and not (tmp_path / "c" / moved.path).exists()
    before = replay(rec, f"event:{moved.seq - 1}", tmp_path / "d")
    assert (tmp_path / "d" / moved.path).exists() and before.tree_hash != first.tree_hash

    deleted = rec.of_type(FileDeleted)[0]
    replay(rec, f"event:{deleted.seq}", tmp_path / "e")
    assert not (tmp_path / "e" / deleted.path).exists()


def test_time_specs(sample: Path) -> None:
    rec = open_recording(sample)
    sub = resolve_moment(rec, "submission")
    assert sub.commit == rec.meta.submission.commit
    assert isinstance(rec.by_seq(sub.seq), Submit)
    note = rec.of_type(Note)[0]
    at_note = resolve_moment(rec, note.t)
    assert at_note.seq == note.seq
    plus = resolve_moment(rec, f"+{at_note.wall_seconds}")
    assert plus.seq == note.seq
    assert resolve_moment(rec, "+0").seq <= resolve_moment(rec, "start").seq
    late = resolve_moment(rec, "+100000")
    assert late.seq == rec.events[-1].seq and late.note
    # working seconds exclude the pause: less than wall seconds at the submission
    assert sub.working_seconds < sub.wall_seconds - 2.5
    for bad in ("event:99999", "event:x", "yesterday", "+-3", "1999-01-01T00:00:00Z"):
        with pytest.raises(RecordingError):
            resolve_moment(rec, bad)


def test_out_dir_rules(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(RecordingError, match="not empty"):
        replay(sample, "submission", out)
    res = replay(sample, "submission", out, force=True)
    assert not (out / "keep.txt").exists() and res.files == 4
    with pytest.raises(RecordingError, match="overlaps"):
        replay(sample, "submission", sample / "results" / "x")


def test_format_versions(sample: Path, tmp_path: Path) -> None:
    rec = _copy(sample, tmp_path)
    data = json.loads((rec / "session.json").read_text())
    data["format_version"] = 2
    (rec / "session.json").write_text(json.dumps(data))
    with pytest.raises(RecordingError, match="newer than this reader"):
        replay(rec, "submission", tmp_path / "o1")
    data["format_version"] = 0
    (rec / "session.json").write_text(json.dumps(data))
    with pytest.raises(RecordingError, match="invalid format_version"):
        open_recording(rec)
    data["format_version"] = 1
    data["some_future_field"] = {"ignored": True}  # unknown fields of a v1 file are tolerated
    (rec / "session.json").write_text(json.dumps(data))
    assert replay(rec, "submission", tmp_path / "o2").files == 4


def test_corrupt_blob_is_detected(sample: Path, tmp_path: Path) -> None:
    rec = _copy(sample, tmp_path)
    blobmap = dict(line.split() for line in (rec / "store/rgbridge/blobmap").read_text().splitlines())
    events = open_recording(rec).of_type(FileEvent)
    sha = next(e.sha256 for e in events if e.type == "file_created" and e.path == "start.sh")
    assert sha is not None
    oid = blobmap[sha]
    obj = rec / "store" / "objects" / oid[:2] / oid[2:]
    os.chmod(obj, 0o644)
    obj.write_bytes(zlib.compress(b"blob 5\0evil\n"))
    with pytest.raises(RecordingError, match="corrupt"):
        replay(rec, "submission", tmp_path / "out")


def _summary(data: dict) -> dict:
    out = {}
    for name, p in data["profiles"].items():
        ac = p.get("api_coverage") or {}
        out[name] = (
            p["outcome"],
            p["dsr"]["success"],
            p["pass_at_1"]["passed"],
            p["pass_at_1"]["total"],
            p["pass_at_1"]["score"],
            ac.get("implemented_apis"),
            ac.get("total_apis"),
        )
    return out


@pytest.mark.docker
def test_rescore_reproduces_stored_score(docker_client, sample: Path, tmp_path: Path) -> None:
    from bridge.recording.verify import verify_recording
    from bridge.tasks.catalog import Catalog

    rec = _copy(sample, tmp_path)
    catalog = Catalog.from_options()
    meta = json.loads((rec / "session.json").read_text())
    assert catalog.get("kv-ledger").content_hash == meta["task_hash"], (
        "the kv-ledger task changed since the sample was made: regenerate it with recordings/samples/make_sample.py"
    )
    stored = json.loads((rec / meta["job"]["result_dir"] / "result.json").read_text())
    path = rescore(rec, profile="both", catalog=catalog, use_cache=False)
    from bridge.scoring.result import GRADER_VERSION

    assert path.parent.name.startswith("rescore-") and path.parent.name.endswith(f"-{GRADER_VERSION}-both")
    new = json.loads(path.read_text())
    assert _summary(new) == _summary(stored)
    assert new["snapshot_hash"] == meta["submission"]["tree_hash"]
    label = json.loads((path.parent / "label.json").read_text())
    assert label["profile"] == "both" and label["grader_version"] == new["grader_version"]
    assert (path.parent / "logs" / "strict").is_dir()
    index = json.loads((rec / "results" / "index.json").read_text())
    kinds = sorted(r["kind"] for r in index["results"])
    assert kinds == ["rescore", "submission"]
    assert [r["name"] for r in list_results(rec)][-1] == path.parent.name
    assert verify_recording(rec).ok  # re-sealed after adding the result
