"""The one tar helper (bridge/fs/tarball.py): every limit and attack, each of which a naive
`tarfile.extractall` lets through; packing through the safe walker; and a recording packed by
the code before the helper (tests/fixtures/packed/, made by the old `pack_recording`) still
unpacks and verifies."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from bridge.fs.tarball import ArchiveError, Limits, read_single_file, unpack
from bridge.fs.tarpack import Stamp, add_entries, list_tree
from bridge.recording.packing import pack_recording, unpack_recording
from bridge.recording.verify import verify_recording

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "packed"
SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


def _tar(members: list[tarfile.TarInfo | tuple[str, bytes]], *, gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            if isinstance(m, tuple):
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
            else:
                tar.addfile(m)
    return buf.getvalue()


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


@pytest.fixture()
def box(tmp_path: Path) -> Path:
    """A folder to unpack into, one level below tmp_path (whose other children are 'outside')."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("outside")
    return tmp_path / "box" / "dest"


def _nothing_outside(tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box", "outside"] or not (tmp_path / "box").exists()
    assert (tmp_path / "outside" / "secret").read_text() == "outside"
    assert [p.name for p in (tmp_path / "outside").iterdir()] == ["secret"]


ATTACKS = [
    pytest.param([("../evil", b"x")], "'..'", id="dotdot"),
    pytest.param([("a/../../evil", b"x")], "'..'", id="dotdot-deep"),
    pytest.param([("/tmp/rgbridge-tarball-abs", b"x")], "absolute path", id="absolute"),
    pytest.param(
        [_special("esc", tarfile.SYMTYPE, "../../outside"), ("esc/pwn", b"x")],
        "leads outside",
        id="symlink-out-then-file",
    ),
    pytest.param([_special("abs", tarfile.SYMTYPE, "/etc")], "leads outside", id="symlink-absolute"),
    pytest.param(
        [_special("b", tarfile.SYMTYPE, "."), _special("a", tarfile.SYMTYPE, "b/.."), ("x", b"x")],
        "leads outside",
        id="symlink-chain-out",
    ),
    pytest.param([_special("hard", tarfile.LNKTYPE, "../../outside/secret")], "hardlink refused", id="hardlink-out"),
    pytest.param([_special("dev", tarfile.CHRTYPE)], "device file refused", id="char-device"),
    pytest.param([_special("blk", tarfile.BLKTYPE)], "device file refused", id="block-device"),
    pytest.param([_special("fifo", tarfile.FIFOTYPE)], "fifo refused", id="fifo"),
    pytest.param([("same", b"1"), ("same", b"2")], "duplicate", id="duplicate"),
    pytest.param([("f", b"1"), ("f/g", b"2")], "both a file and a folder", id="file-and-folder"),
]


@pytest.mark.parametrize(("members", "message"), ATTACKS)
def test_attacks_refuse_the_whole_archive(tmp_path: Path, box: Path, members: list, message: str) -> None:
    data = _tar(members)
    with pytest.raises(ArchiveError, match=message):
        unpack(io.BytesIO(data), box, links=True)
    assert not box.exists()  # nothing half-written
    _nothing_outside(tmp_path)
    assert not Path("/tmp/rgbridge-tarball-abs").exists()


@pytest.mark.parametrize(("members", "message"), ATTACKS)
def test_attacks_are_left_out_and_named_when_lenient(tmp_path: Path, box: Path, members: list, message: str) -> None:
    data = _tar([*members, ("ok.txt", b"fine")])
    done = unpack(io.BytesIO(data), box, links=True, strict=False)
    assert done.refused, message
    assert (box / "ok.txt").read_bytes() == b"fine"
    _nothing_outside(tmp_path)
    root = os.path.realpath(box)
    for path in box.rglob("*"):  # whatever was kept leads inside
        real = os.path.realpath(path)
        assert real == root or real.startswith(root + os.sep), path


def test_a_file_is_never_written_through_a_link_even_one_inside(box: Path) -> None:
    data = _tar([("sub/keep", b"k"), _special("in", tarfile.SYMTYPE, "sub"), ("in/over", b"x")])
    with pytest.raises(ArchiveError, match="'in': is both a file and a folder"):
        unpack(io.BytesIO(data), box, links=True)
    done = unpack(io.BytesIO(data), box, links=True, strict=False)
    assert done.refused == ["in/over"] and not (box / "sub" / "over").exists()
    assert os.readlink(box / "in") == "sub"


def test_links_are_refused_unless_asked_for(box: Path) -> None:
    with pytest.raises(ArchiveError, match="symlink refused"):
        unpack(io.BytesIO(_tar([_special("l", tarfile.SYMTYPE, "x")])), box)


def test_limits(box: Path, tmp_path: Path) -> None:
    many = _tar([(f"f{i}", b"x") for i in range(11)])
    with pytest.raises(ArchiveError, match="more than 10 members"):
        unpack(io.BytesIO(many), box, limits=Limits(max_members=10))
    big = _tar([("a", b"\1" * 3000), ("b", b"\2" * 3000)])
    with pytest.raises(ArchiveError, match="2000-byte file cap"):
        unpack(io.BytesIO(big), box, limits=Limits(max_file_bytes=2000))
    with pytest.raises(ArchiveError, match="exceed the 5000-byte cap"):
        unpack(io.BytesIO(big), box, limits=Limits(max_total_bytes=5000))
    assert not box.exists()
    # limits hold in a lenient unpack too: the whole archive is refused, not cut
    with pytest.raises(ArchiveError, match="more than 10 members"):
        unpack(io.BytesIO(many), box, limits=Limits(max_members=10), strict=False)
    assert unpack(io.BytesIO(big), tmp_path / "ok").files == 2


def test_a_compression_bomb_is_refused_by_its_ratio(box: Path, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(_tar([("zeros", b"\0" * (4 << 20)), ("after", b"x")], gz=True))
    assert bomb.stat().st_size < 10_000  # 4 MiB of zeros packs to a few KiB
    with pytest.raises(ArchiveError, match="expands more than 100 times"):
        unpack(bomb, box, limits=Limits(max_ratio=100, ratio_floor=1 << 20))
    assert not box.exists()
    # the same archive under the default floor (64 MiB expanded) is fine: small trees of text
    # compress far better than any ratio a real tree of that size reaches
    assert unpack(bomb, tmp_path / "ok").files == 2


def test_a_member_longer_than_declared_or_damaged_is_an_error(box: Path) -> None:
    data = bytearray(_tar([("a", b"x" * 2000)]))
    del data[1024:]  # cut mid-file
    with pytest.raises(ArchiveError):
        unpack(io.BytesIO(bytes(data)), box)
    with pytest.raises(ArchiveError, match="not a readable archive|damaged"):
        unpack(io.BytesIO(b"\x1f\x8b\x08\x00garbage" * 10), box)
    assert not box.exists()


def test_destination_must_be_new_or_empty_unless_replacing(tmp_path: Path) -> None:
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "old").write_text("old")
    (dest / "keep").write_text("keep")
    data = _tar([("old", b"new")])
    with pytest.raises(ArchiveError, match="new or empty"):
        unpack(io.BytesIO(data), dest)
    os.symlink(tmp_path / "outside-target", dest / "lnk")
    unpack(io.BytesIO(_tar([("old", b"new"), ("lnk", b"file")])), dest, fresh=False)
    assert (dest / "old").read_text() == "new" and (dest / "keep").read_text() == "keep"
    assert not (dest / "lnk").is_symlink() and not (tmp_path / "outside-target").exists()


def test_read_single_file(tmp_path: Path) -> None:
    assert read_single_file(io.BytesIO(_tar([("f", b"hello")])), max_bytes=10, what="/f") == b"hello"
    for members, message in [
        ([("f", b"hello"), ("g", b"x")], "expected one file"),
        ([_special("f", tarfile.SYMTYPE, "/etc/passwd")], "symlink"),
        ([("../f", b"x")], "unsafe member name"),
        ([("d/f", b"x")], "unsafe member name"),
        ([("f", b"x" * 11)], "limit 10"),
    ]:
        with pytest.raises(ArchiveError, match=message):
            read_single_file(io.BytesIO(_tar(members)), max_bytes=10, what="/f")


# ----------------------------------------------------------------------------- packing


def test_pack_reads_through_the_walker_and_stamps_as_asked(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("a")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    os.symlink("/etc", src / "etc")
    os.mkfifo(src / "pipe")
    entries = list_tree(src, ignore=False)
    assert [(e.rel, e.kind) for e in entries] == [
        (".git", "dir"),
        (".git/HEAD", "file"),
        ("etc", "link"),
        ("pipe", "special"),
        ("pkg", "dir"),
        ("pkg/a.py", "file"),
        ("run.sh", "file"),
    ]
    assert ".git" not in {e.rel for e in list_tree(src)}  # the recorder's ignore rules, by default

    def packed() -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            assert add_entries(tar, src, list_tree(src, ignore=False), prefix="top", stamp=Stamp(uid=7)) == []
        return buf.getvalue()

    first = packed()
    os.utime(src / "pkg" / "a.py", (1, 1))
    assert packed() == first  # mtime stamped: the same tree packs to the same bytes
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "top/pipe" not in members and members["top/etc"].linkname == "/etc"
    assert members["top/run.sh"].mode == 0o755 and {m.uid for m in members.values()} == {7}


def test_the_callers_root_may_be_a_link_nothing_below_it_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real" / "d").mkdir(parents=True)
    (tmp_path / "real" / "d" / "f").write_text("f")
    os.symlink(tmp_path / "real" / "d", tmp_path / "real" / "dlink")
    os.symlink(tmp_path / "real", tmp_path / "named")  # e.g. a task folder kept elsewhere
    entries = list_tree(tmp_path / "named", ignore=False)
    assert [(e.rel, e.kind) for e in entries] == [("d", "dir"), ("d/f", "file"), ("dlink", "link")]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        assert add_entries(tar, tmp_path / "named", entries) == []


def test_a_folder_swapped_for_a_link_after_listing_is_not_read_through(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("mine")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_text("SECRET")
    entries = list_tree(src)
    shutil.rmtree(src / "sub")
    os.symlink(tmp_path / "outside", src / "sub")  # the agent's swap, between listing and reading
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        assert add_entries(tar, src, entries) == ["sub/f"]
    assert b"SECRET" not in buf.getvalue()


# ----------------------------------------------------------------------------- formats on disk


def test_a_recording_packed_before_the_helper_still_unpacks(tmp_path: Path) -> None:
    old = FIXTURES / "kv-ledger-sample.tar.gz"  # written by the old pack_recording (PAX, gzip, mtime 0)
    res = unpack_recording(old, tmp_path / "un")
    assert res.files > 0 and verify_recording(res.recording).ok
    # and the helper packs the same recording to the very same bytes
    again = pack_recording(SAMPLE, tmp_path / "again.tar.gz")
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(old.read_bytes()).hexdigest()
