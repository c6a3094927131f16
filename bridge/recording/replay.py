"""Write a recorded moment back out as a folder (`rgbridge replay`): the moment's state
(bridge/recording/moments.py) materialised into a fresh or emptied folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError
from bridge.fs.hashing import MODE_EXEC, MODE_LINK, sha256_bytes
from bridge.fs.relpath import check_layout, rel_parts
from bridge.recording.moments import Moment, State, resolve_moment, state_at
from bridge.recording.reader import Recording, open_recording


@dataclass
class ReplayResult:
    files: int
    tree_hash: str
    commit: str | None  # the base commit (the submission commit for `submission`)
    moment: Moment
    out_dir: str
    base_seq: int | None = None
    applied_events: int = 0
    exact_commit: bool = False
    left_out: list[str] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["moment"] = self.moment.to_dict()
        return data


def _prepare_out(out_dir: Path, force: bool, rec_dir: Path) -> Path:
    out = Path(out_dir).expanduser()
    out_abs = Path(os.path.abspath(out))
    rec_abs = Path(os.path.abspath(rec_dir)).resolve()
    if out_abs.exists() and not out_abs.is_dir():
        raise RecordingError(f"--out {out} exists and is not a directory")
    resolved = out_abs.resolve()
    if resolved == rec_abs or resolved.is_relative_to(rec_abs) or rec_abs.is_relative_to(resolved):
        raise RecordingError(f"--out {out} overlaps the recording {rec_dir}")
    if out_abs.is_dir() and any(out_abs.iterdir()):
        if not force:
            raise RecordingError(f"--out {out} is not empty (use --force to replace its contents)")
        if resolved in (Path("/"), Path.home().resolve()) or len(resolved.parts) < 3:
            raise RecordingError(f"refusing to clear {resolved}")
        for child in resolved.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out_abs.mkdir(parents=True, exist_ok=True)
    return out_abs.resolve()


def _safe_rel(path: str) -> list[str]:
    return rel_parts(path, what="unsafe path in recording:", error=RecordingError)


@contextmanager
def materialised(rec: Recording, state: State, prefix: str) -> Iterator[Path]:
    """A state written out to `<fresh temporary folder>/repo` (what rescore and curve score);
    the folder, with anything written beside the repo, is removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        materialise(rec, state, repo)
        yield repo


def materialise(rec: Recording, state: State, out: Path) -> int:
    """Write a state into an empty directory, byte for byte, with exec bits and symlinks.

    Every blob is read from the store and its SHA-256 checked against the recorded hash.
    Symlinks are created last and never followed.
    """
    out_real = os.path.realpath(out)
    check_layout(state.files, what="path in recording", error=RecordingError)
    try:
        return _materialise(rec, state, out_real)
    except OSError as exc:  # a name this file system refuses, a folder that vanished: an error, no traceback
        where = f" ({os.fsdecode(exc.filename)!r})" if exc.filename else ""
        raise RecordingError(f"cannot write the workspace into {out}: {exc.strerror or exc}{where}") from None


def _materialise(rec: Recording, state: State, out_real: str) -> int:
    links: list[tuple[list[str], bytes]] = []
    count = 0
    made: set[str] = set()
    for path in sorted(state.files):
        fs = state.files[path]
        parts = _safe_rel(path)
        data = rec.store.read_blob(fs.oid)
        if sha256_bytes(data) != fs.sha256:
            raise RecordingError(f"content of {path} in the store does not match its recorded sha256")
        if fs.mode == MODE_LINK:
            links.append((parts, data))
            continue
        parent = os.path.join(out_real, *parts[:-1])
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        target = os.path.join(parent, parts[-1])
        perm = 0o755 if fs.mode == MODE_EXEC else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, perm)
        finally:
            os.close(fd)
        count += 1
    for parts, data in links:
        parent = os.path.join(out_real, *parts[:-1])
        os.makedirs(parent, exist_ok=True)
        real_parent = os.path.realpath(parent)
        if real_parent != out_real and not real_parent.startswith(out_real + os.sep):
            raise RecordingError(f"unsafe symlink parent in recording: {'/'.join(parts)!r}")
        os.symlink(os.fsdecode(data), os.path.join(parent, parts[-1]))
        count += 1
    return count


def replay(rec_dir: Path | str | Recording, at: str, out_dir: Path | str, *, force: bool = False) -> ReplayResult:
    """Rebuild the workspace as it was at `at` into `out_dir` (refused when not empty unless `force`)."""
    rec = rec_dir if isinstance(rec_dir, Recording) else open_recording(rec_dir)
    moment = resolve_moment(rec, at)
    state = state_at(rec, moment)
    out = _prepare_out(Path(out_dir), force, rec.dir)
    files = materialise(rec, state, out)
    th = state.tree_hash()
    if moment.commit is not None and rec.meta.submission and rec.meta.submission.commit == moment.commit:
        if th != rec.meta.submission.tree_hash:
            raise RecordingError(
                f"submission commit {moment.commit[:12]} rebuilds to tree hash {th[:12]}…, but session.json "
                f"records {rec.meta.submission.tree_hash[:12]}…: the recording is inconsistent"
            )
    return ReplayResult(
        files=files,
        tree_hash=th,
        commit=state.base_commit,
        moment=moment,
        out_dir=str(out),
        base_seq=state.base_seq,
        applied_events=state.applied,
        exact_commit=state.exact_commit,
        left_out=state.left_out,
        note=moment.note or state.note,
    )
