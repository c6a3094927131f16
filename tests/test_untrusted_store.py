"""A crafted recording store must never make git run commands (issue 8, opening 1).

The archive's `store/config` turns the store into a partial clone whose "remote" is an `ext::`
URL, and a promisor pack stands in for a referenced object that was removed. A git that honours
the store's config lazily fetches the missing object by running the command. The bridge must
refuse the store with a clear error and the command must never run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.recording.packing import pack_recording

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"


def _rgbridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge.cli", *args], capture_output=True, text=True, timeout=120)


def _evil_archive(tmp_path: Path, marker: Path) -> Path:
    rec = tmp_path / "src" / SAMPLE.name
    shutil.copytree(SAMPLE, rec)
    store = rec / "store"
    loose = sorted(p for p in (store / "objects").glob("??/*") if p.parent.name not in ("pack", "info"))
    assert loose, "sample store has loose objects"
    # A dummy pack holding one unrelated object, marked as a promisor pack.
    other = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        input=b"dummy\n",
        capture_output=True,
        env={"GIT_DIR": str(tmp_path / "scratch.git"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    if other.returncode != 0:
        subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "scratch.git")], check=True)
        other = subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            input=b"dummy\n",
            capture_output=True,
            env={"GIT_DIR": str(tmp_path / "scratch.git"), "PATH": "/usr/bin:/bin"},
            check=True,
        )
    pack_dir = store / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    base = subprocess.run(
        ["git", "pack-objects", str(pack_dir / "pack")],
        input=other.stdout,
        capture_output=True,
        env={"GIT_DIR": str(tmp_path / "scratch.git"), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    name = base.stdout.decode().strip()
    (pack_dir / f"pack-{name}.promisor").write_text("")
    # Every referenced object is gone from the store: reading any of them goes to the "remote".
    for p in loose:
        p.unlink()
    cmd = f"ext::sh -c touch% {marker}"
    with (store / "config").open("a") as f:
        f.write(
            "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tpartialclone = origin\n"
            f'[remote "origin"]\n\turl = {cmd}\n\tpromisor = true\n[protocol]\n\tallow = always\n'
        )
    return pack_recording(rec, tmp_path / "evil.tar.gz")


@pytest.mark.parametrize("command", ["unpack", "verify", "replay"])
def test_crafted_store_runs_no_command(tmp_path: Path, command: str) -> None:
    marker = tmp_path / "pwned"
    arc = _evil_archive(tmp_path, marker)
    out = tmp_path / "un"
    res = _rgbridge("recordings", "unpack", "-o", str(out), str(arc))
    outputs = [res]
    if command == "unpack":
        assert res.returncode != 0
    elif out.exists() and (out / "session.json").exists():
        if command == "verify":
            outputs.append(_rgbridge("recordings", "verify", str(out)))
        else:
            outputs.append(_rgbridge("replay", "--at", "end", "--out", str(tmp_path / "ws"), str(out)))
        assert outputs[-1].returncode != 0
    assert not marker.exists(), "git ran the store's ext:: command"
    text = " ".join(o.stdout + o.stderr for o in outputs)
    assert "refused" in text and "Traceback" not in text
