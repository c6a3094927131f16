"""Shadow git store: content-addressed snapshots of a workspace, kept OUTSIDE the workspace.

Safety (anchors §5.4): git never sees the workspace's own repository, config, hooks,
attributes, filters or ignore files. We never run `git add`: blobs are written by us (loose
objects: zlib of `blob <size>\\0<data>`) from the exact bytes the recorder hashed, and the index
is built from OUR manifest with `update-index --index-info`, so no clean/smudge filter, hook,
fsmonitor or `.gitignore` in the agent-controlled tree can take effect. Every git call also runs
with an isolated environment (no system/global config, HOME inside the store, hooks disabled).

Refs: checkpoints advance `refs/heads/main`; `tag()` writes any ref (for example
`refs/rgbridge/submission`). Each commit message ends with trailers
`Rgbridge-Tree-Hash: <hashing.tree_hash of the committed tree>` and one
`Rgbridge-Left-Out: <path>` per file dropped for exceeding `max_file_bytes`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bridge.errors import RecordingError
from bridge.fs.hashing import MODE_EXEC, MODE_LINK, sha256_bytes, tree_hash_from_entries
from bridge.fs.ignore import EXCLUDED_DIR_SUFFIXES, EXCLUDED_DIRS
from bridge.fs.relpath import check_layout, rel_parts
from bridge.recording.format import HEAD_REF
from bridge.recording.gitsafe import HARDENING_ARGS, check_store_layout, isolated_git_env
from bridge.recording.manifest import FileEntry, Manifest, Oversized, read_entry

IDENTITY = ("rgbridge", "rgbridge@localhost")
_TEMP_PATTERNS = (
    "*.sw[a-px]",
    "*~",
    "4913",
    "*___jb_tmp___",
    "*___jb_old___",
    ".#*",
    "*.tmp.[0-9]*",
    "*.crswap",
    ".~lock.*#",
)


class StoreMismatch(RecordingError):
    """A file's content on disk no longer matches the manifest being committed."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(f"files changed while committing: {', '.join(paths[:5])}")
        self.paths = paths


@dataclass(frozen=True, slots=True)
class CommitResult:
    commit: str
    tree: str
    tree_hash: str
    created: bool  # False when the tree equalled the parent's and the parent was returned
    left_out: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LogEntry:
    commit: str
    time: int  # committer time, unix seconds
    message: str


@dataclass(frozen=True, slots=True)
class TreeEntry:
    mode: int
    oid: str
    path: str


class ShadowStore:
    def __init__(self, git_dir: Path, work_tree: Path, *, max_file_bytes: int = 5_000_000) -> None:
        self.git_dir = Path(git_dir).resolve()
        self.work_tree = Path(work_tree).resolve()
        if self.git_dir == self.work_tree or self.git_dir.is_relative_to(self.work_tree):
            raise RecordingError(f"shadow store must live outside the workspace: {self.git_dir}")
        self.max_file_bytes = max_file_bytes
        self._lock = threading.RLock()
        self._meta = self.git_dir / "rgbridge"
        self._excludes = self._meta / "excludes"
        self._blobmap_path = self._meta / "blobmap"
        self._by_sha256: dict[str, str] = {}
        self._sha256_by_oid: dict[str, str] = {}
        self._n = 0
        self._init()

    # ---- setup and plumbing -------------------------------------------------------------

    def _init(self) -> None:
        if not (self.git_dir / "objects").is_dir():
            self.git_dir.mkdir(parents=True, exist_ok=True)
            # `--template=` (empty): none of git's template files (sample hooks, description,
            # info/exclude) are copied into the store; it holds only what the bridge writes.
            self._git(
                "init", "--quiet", "--bare", "--template=", "--object-format=sha1", str(self.git_dir), bare_init=True
            )
        check_store_layout(self.git_dir)
        self._meta.mkdir(exist_ok=True)
        if not self._excludes.exists():
            lines = [f"{d}/" for d in sorted(EXCLUDED_DIRS)] + [f"*{s}/" for s in EXCLUDED_DIR_SUFFIXES]
            self._excludes.write_text("\n".join([*lines, *_TEMP_PATTERNS]) + "\n")
        if self._blobmap_path.exists():
            for line in self._blobmap_path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2:
                    self._by_sha256[parts[0]] = parts[1]
                    self._sha256_by_oid[parts[1]] = parts[0]

    def _env(self, index_file: Path | None = None) -> dict[str, str]:
        return isolated_git_env(
            self.git_dir,
            GIT_WORK_TREE=str(self.work_tree),
            GIT_INDEX_FILE=str(index_file or (self._meta / "index.unused")),
        )

    def _argv(self, *args: str) -> list[str]:
        return [
            "git",
            *HARDENING_ARGS,
            "-c", "core.autocrlf=false",
            "-c", "core.symlinks=true",
            "-c", f"core.excludesFile={self._excludes}",
            "-c", "gc.auto=0",
            *args,
        ]  # fmt: skip

    def _git(
        self,
        *args: str,
        input: bytes | None = None,
        index_file: Path | None = None,
        extra_env: dict[str, str] | None = None,
        bare_init: bool = False,
        check: bool = True,
    ) -> bytes:
        env = self._env(index_file)
        if bare_init:  # `git init` must not inherit a GIT_WORK_TREE
            env.pop("GIT_WORK_TREE")
            env.pop("GIT_DIR")
        if extra_env:
            env.update(extra_env)
        proc = subprocess.run(
            self._argv(*args), input=input, env=env, cwd=self.git_dir, capture_output=True, check=False
        )
        if check and proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip().splitlines()
            raise RecordingError(f"git {args[0]} failed: {msg[-1] if msg else proc.returncode}")
        return proc.stdout

    # ---- blobs ----------------------------------------------------------------------------

    def put_blob(self, sha256: str, data: bytes) -> str:
        """Store content (already hashed as `sha256`) as a git blob; returns its object id."""
        with self._lock:
            oid = self._by_sha256.get(sha256)
            if oid is not None:
                return oid
        header = b"blob %d\x00" % len(data)
        oid = hashlib.sha1(header + data, usedforsecurity=False).hexdigest()
        obj = self.git_dir / "objects" / oid[:2] / oid[2:]
        if not obj.exists():
            obj.parent.mkdir(exist_ok=True)
            tmp = obj.parent / f".tmp-{os.getpid()}-{threading.get_ident()}-{oid[2:8]}"
            with open(tmp, "wb") as fh:
                fh.write(zlib.compress(header + data, 1))
            os.chmod(tmp, 0o444)
            os.replace(tmp, obj)
        with self._lock:
            if sha256 not in self._by_sha256:
                self._by_sha256[sha256] = oid
                self._sha256_by_oid[oid] = sha256
                with open(self._blobmap_path, "a") as fh:
                    fh.write(f"{sha256} {oid}\n")
        return oid

    def has_content(self, sha256: str) -> bool:
        with self._lock:
            return sha256 in self._by_sha256

    def _blob_for(self, path: str, entry: FileEntry) -> str | None:
        with self._lock:
            oid = self._by_sha256.get(entry.sha256)
        if oid is not None:
            return oid
        got = read_entry(path, root=self.work_tree, max_file_bytes=self.max_file_bytes)
        if isinstance(got, Oversized) or got is None or got[0].sha256 != entry.sha256:
            return None
        return self.put_blob(entry.sha256, got[1])

    # ---- commits and refs -----------------------------------------------------------------

    def resolve(self, ref: str) -> str | None:
        out = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).strip()
        return out.decode() if out else None

    def head(self) -> str | None:
        return self.resolve(HEAD_REF)

    def commit_manifest(
        self,
        manifest: Manifest,
        message: str,
        *,
        parent: str | None = None,
        ts: float | None = None,
        ref: str | None = HEAD_REF,
    ) -> CommitResult:
        """Commit exactly the manifest's content. `parent=None` means the current head of `ref`.

        Raises StoreMismatch when a file whose content the store has never seen differs on disk
        from the manifest (the caller re-scans and retries).
        """
        with self._lock:
            left_out: list[str] = []
            missing: list[str] = []
            records: list[bytes] = []
            triples: list[tuple[str, int, str]] = []
            for path in sorted(manifest.files):
                e = manifest.files[path]
                if not e.is_symlink and e.size > self.max_file_bytes:
                    left_out.append(path)
                    continue
                oid = self._blob_for(path, e)
                if oid is None:
                    missing.append(path)
                    continue
                records.append(f"{e.mode:o} {oid}\t".encode() + path.encode("utf-8", "surrogateescape") + b"\0")
                triples.append((path, e.mode, e.sha256))
            if missing:
                raise StoreMismatch(missing)
            left_out.extend(sorted(manifest.oversized))
            self._n += 1
            index = self._meta / f"index.{os.getpid()}.{self._n}"
            try:
                index.unlink(missing_ok=True)
                self._git("update-index", "-z", "--index-info", input=b"".join(records), index_file=index)
                tree = self._git("write-tree", index_file=index).decode().strip()
            finally:
                index.unlink(missing_ok=True)
            th = tree_hash_from_entries(triples)
            if parent is None and ref is not None:
                parent = self.resolve(ref)
            if parent is not None:
                parent_tree = self._git("rev-parse", f"{parent}^{{tree}}").decode().strip()
                if parent_tree == tree:
                    return CommitResult(parent, tree, th, False, left_out)
            when = int(ts if ts is not None else time.time())
            date = f"@{when} +0000"
            body = message.rstrip("\n") + "\n\n" + f"Rgbridge-Tree-Hash: {th}\n"
            body += "".join(f"Rgbridge-Left-Out: {p}\n" for p in left_out)
            args = ["commit-tree", tree] + (["-p", parent] if parent else [])
            commit = (
                self._git(
                    *args,
                    input=body.encode("utf-8", "surrogateescape"),
                    extra_env={
                        "GIT_AUTHOR_NAME": IDENTITY[0],
                        "GIT_AUTHOR_EMAIL": IDENTITY[1],
                        "GIT_COMMITTER_NAME": IDENTITY[0],
                        "GIT_COMMITTER_EMAIL": IDENTITY[1],
                        "GIT_AUTHOR_DATE": date,
                        "GIT_COMMITTER_DATE": date,
                    },
                )
                .decode()
                .strip()
            )
            if ref is not None:
                self._git("update-ref", ref, commit)
            return CommitResult(commit, tree, th, True, left_out)

    def commit(self, manifest: Manifest, message: str, *, parent: str | None = None, ts: float | None = None) -> str:
        """Commit a settled manifest on `refs/heads/main`; returns the commit id (the parent's when
        the tree is unchanged)."""
        return self.commit_manifest(manifest, message, parent=parent, ts=ts).commit

    def tag(self, commit: str, name: str) -> str:
        """Point a ref at a commit: a full `refs/...` name is used as is, else `refs/tags/<name>`."""
        ref = name if name.startswith("refs/") else f"refs/tags/{name}"
        self._git("update-ref", ref, commit)
        return ref

    def log(self, ref: str = HEAD_REF) -> list[LogEntry]:
        """Commits reachable from `ref`, oldest first."""
        if self.resolve(ref) is None:
            return []
        out = self._git("log", "--reverse", "--format=%H%x1f%ct%x1f%B%x1e", ref).decode("utf-8", "surrogateescape")
        entries = []
        for chunk in out.split("\x1e"):
            chunk = chunk.strip("\n")
            if not chunk:
                continue
            oid, ct, msg = chunk.split("\x1f", 2)
            entries.append(LogEntry(oid, int(ct), msg.rstrip("\n")))
        return entries

    def left_out(self, commit: str) -> list[str]:
        msg = self._git("cat-file", "commit", commit).decode("utf-8", "surrogateescape")
        return [ln.split(": ", 1)[1] for ln in msg.splitlines() if ln.startswith("Rgbridge-Left-Out: ")]

    # ---- reading trees --------------------------------------------------------------------

    def ls_tree(self, commit: str) -> list[TreeEntry]:
        out = self._git("ls-tree", "-r", "-z", "--full-tree", commit)
        entries = []
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            mode, typ, oid = meta.decode().split()
            if typ != "blob":  # submodule links never occur in our trees
                continue
            entries.append(TreeEntry(int(mode, 8), oid, path.decode("utf-8", "surrogateescape")))
        return entries

    def _cat_blobs(self, oids: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        oid_list = list(oids)
        if not oid_list:
            return
        proc = subprocess.Popen(
            self._argv("cat-file", "--batch"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._env(),
            cwd=self.git_dir,
        )
        assert proc.stdin is not None and proc.stdout is not None

        def feed() -> None:
            try:
                for oid in oid_list:
                    proc.stdin.write(oid.encode() + b"\n")  # type: ignore[union-attr]
            finally:
                proc.stdin.close()  # type: ignore[union-attr]

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            for _ in oid_list:
                header = proc.stdout.readline().split()
                if len(header) != 3:
                    raise RecordingError(f"shadow store object missing: {header[:1]}")
                size = int(header[2])
                data = proc.stdout.read(size)
                proc.stdout.read(1)
                yield header[0].decode(), data
        finally:
            writer.join()
            proc.stdout.close()
            proc.wait()

    def read_blob(self, oid: str) -> bytes:
        for _, data in self._cat_blobs([oid]):
            return data
        raise RecordingError(f"shadow store object missing: {oid}")

    def tree_hash_of(self, commit: str) -> str:
        """`hashing.tree_hash` of the commit's tree (equals the sealed manifest's tree hash)."""
        entries = self.ls_tree(commit)
        with self._lock:
            known = dict(self._sha256_by_oid)
        unknown = {e.oid for e in entries if e.oid not in known}
        for oid, data in self._cat_blobs(sorted(unknown)):
            known[oid] = sha256_bytes(data)
        return tree_hash_from_entries((e.path, e.mode, known[e.oid]) for e in entries)

    def manifest_of(self, commit: str) -> Manifest:
        """The recorded manifest of a commit (hashes from the blobs; stat fields unknown = 0).

        Used to re-attach to a session: a fresh scan compared with it re-hashes every file and
        yields exactly the changes made while nothing was recording.
        """
        entries = self.ls_tree(commit)
        files: dict[str, FileEntry] = {}
        blobs = dict(self._cat_blobs(sorted({e.oid for e in entries})))
        for e in entries:
            data = blobs[e.oid]
            files[e.path] = FileEntry(
                sha256=sha256_bytes(data),
                size=len(data),
                mode=e.mode,
                mtime_ns=0,
                ino=0,
                is_symlink=e.mode == MODE_LINK,
            )
        return Manifest(files, {})

    def checkout_to(self, commit: str, out_dir: Path) -> int:
        """Materialise a commit's tree into an empty (or new) directory, byte for byte with exec
        modes and symlinks. Symlinks are created last and never followed. Returns files written."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if any(out.iterdir()):
            raise RecordingError(f"checkout target is not empty: {out}")
        out_real = os.path.realpath(out)
        entries = self.ls_tree(commit)
        for e in entries:  # one validator for names from a store (bridge/fs/relpath.py)
            rel_parts(e.path, what="unsafe path in snapshot:", error=RecordingError)
        check_layout([e.path for e in entries], what="path in snapshot", error=RecordingError)
        by_oid: dict[str, list[TreeEntry]] = {}
        for e in entries:
            by_oid.setdefault(e.oid, []).append(e)
        links: list[tuple[TreeEntry, bytes]] = []
        count = 0
        for oid, data in self._cat_blobs(list(by_oid)):
            for e in by_oid[oid]:
                if e.mode == MODE_LINK:
                    links.append((e, data))
                    continue
                target = os.path.join(out_real, *e.path.split("/"))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                perm = 0o755 if e.mode == MODE_EXEC else 0o644
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm)
                try:
                    view = memoryview(data)
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                    os.fchmod(fd, perm)
                finally:
                    os.close(fd)
                count += 1
        for e, data in links:
            target = os.path.join(out_real, *e.path.split("/"))
            parent = os.path.dirname(target)
            os.makedirs(parent, exist_ok=True)
            real_parent = os.path.realpath(parent)
            if real_parent != out_real and not real_parent.startswith(out_real + os.sep):
                raise RecordingError(f"unsafe symlink parent in snapshot: {e.path!r}")
            os.symlink(os.fsdecode(data), target)
            count += 1
        return count
