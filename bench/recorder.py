"""Recorder benchmark: an event storm next to a big node_modules, then sealing a 10k-file tree.

    python bench/recorder.py [--writes 20000] [--files 2000] [--seconds 10] [--seal-files 10000]

The writer runs in a separate process (like an agent or editor would), so the recorder's CPU
figure is this process's CPU time alone. Prints figures; exits non-zero when a file was missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bridge.fs.hashing import tree_hash
from bridge.recording.events import EventLog, load_events
from bridge.recording.manifest import scan
from bridge.recording.store import ShadowStore
from bridge.sessions.recorder import Recorder
from bridge.sessions.settings import RecorderSettings

WRITER = r"""
import os, random, sys, time
root, n_writes, n_files, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rnd = random.Random(1)
paths = [os.path.join(root, f"svc{i % 100}", f"mod{i}.py") for i in range(n_files)]
nm = [os.path.join(root, "node_modules", f"pkg{i % 250}", f"f{i}.js") for i in range(0, 5000, 7)]
t0 = time.monotonic()
batch = 200
for n in range(n_writes):
    if n % 10 == 9:
        p = nm[rnd.randrange(len(nm))]
    else:
        p = paths[rnd.randrange(len(paths))]
    d = os.path.dirname(p)
    if not os.path.isdir(d):
        os.makedirs(d, exist_ok=True)
    with open(p, "wb") as fh:
        fh.write(os.urandom(rnd.randrange(16, 2048)))
    if n % 501 == 0:
        os.chmod(p, 0o755)
    if n % batch == batch - 1:  # pace the storm over `seconds`
        ahead = (n + 1) / n_writes * seconds - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
print(f"{time.monotonic() - t0:.2f}")
"""


def make_files(root: Path, n: int, per_dir: int, prefix: str, ext: str) -> None:
    for i in range(n):
        d = root / f"{prefix}{i // per_dir}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}{ext}").write_bytes(os.urandom(64 + i % 1500))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def storm(base: Path, writes: int, files: int, seconds: float) -> int:
    ws, rec = base / "storm-ws", base / "storm-rec"
    ws.mkdir()
    rec.mkdir()
    make_files(ws / "node_modules", 5000, 20, "pkg", ".js")
    log = EventLog(rec / "events.jsonl")
    store = ShadowStore(rec / "shadow.git", ws)
    r = Recorder(ws, event_log=log, store=store)
    r.start()
    print(f"storm: mode={r.mode} watches={len(r.watched_dirs())} (node_modules has 5000 files in 250 dirs)")
    cpu0, wall0 = time.process_time(), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", WRITER, str(ws), str(writes), str(files), str(seconds)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    s = r.seal(quiet_seconds=1.0)
    cpu = time.process_time() - cpu0
    wall = time.monotonic() - wall0
    disk = scan(ws)
    sealed = {p: (e.sha256, e.mode) for p, e in s.manifest.items()}
    ondisk = {p: (e.sha256, e.mode) for p, e in disk.items()}
    missed = sum(1 for p in set(sealed) | set(ondisk) if sealed.get(p) != ondisk.get(p))
    store_ok = store.tree_hash_of(s.commit) == s.tree_hash == tree_hash(ws)
    watches_after = len(r.watched_dirs())
    r.stop()
    log.close()
    events, bad = load_events(log.path)
    file_events = sum(1 for e in events if e["type"].startswith("file_"))
    print(f"storm: {writes} writes over {files} files (+10% into node_modules) in {out.stdout.strip()} s")
    print(
        f"storm: files on disk {len(disk)}, sealed {len(s.manifest)}, MISSED after seal = {missed}, store tree matches = {store_ok}"
    )
    print(f"storm: events logged {file_events} file events ({len(events)} records, {bad} bad lines), "
          f"synthetic at seal {s.reconciled}, seal stable={s.stable} in {s.seconds:.2f} s")  # fmt: skip
    print(f"storm: recorder CPU {cpu:.2f} s over {wall:.2f} s wall ({100 * cpu / wall:.0f}% of one core)")
    print(
        f"storm: watches after the storm {watches_after}, commits in store {len(store.log())}, peak RSS so far {rss_mb():.0f} MB"
    )
    return missed


def seal_bench(base: Path, n: int) -> None:
    ws, rec = base / "seal-ws", base / "seal-rec"
    ws.mkdir()
    rec.mkdir()
    make_files(ws, n, 50, "pkg", ".py")
    log = EventLog(rec / "events.jsonl")
    store = ShadowStore(rec / "shadow.git", ws)
    r = Recorder(ws, event_log=log, store=store, settings=RecorderSettings(auto_checkpoint=False))
    t = time.monotonic()
    r.start()
    start_s = time.monotonic() - t
    time.sleep(1.0)  # quiet period elapses before the seal, as after an agent's last write
    s = r.seal(quiet_seconds=0.5)
    (ws / "pkg3" / "f150.py").write_text("one edit after the first seal")
    time.sleep(0.5)
    s2 = r.seal(quiet_seconds=0.3)
    r.stop()
    log.close()
    # a cold seal: a new store that has never seen the content (every file read, hashed, stored)
    store2 = ShadowStore(rec / "cold.git", ws)
    log2 = EventLog(rec / "cold.jsonl")
    r2 = Recorder(ws, event_log=log2, store=store2, settings=RecorderSettings(auto_checkpoint=False))
    t = time.monotonic()
    cold = r2.seal(quiet_seconds=0.0)
    cold_s = time.monotonic() - t
    log2.close()
    print(f"seal: {n} files; start (watches + baseline scan + first commit) {start_s:.2f} s")
    print(
        f"seal: warm seal {s.seconds:.2f} s (stable={s.stable}); after one edit {s2.seconds:.2f} s (stable={s2.stable})"
    )
    print(
        f"seal: cold seal (fresh store, all files read) {cold_s:.2f} s, tree equal to warm seal={cold.tree_hash == s2.tree_hash}"
    )
    print(f"peak RSS {rss_mb():.0f} MB")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=20_000)
    ap.add_argument("--files", type=int, default=2_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seal-files", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rgbridge-bench-") as tmp:
        missed = storm(Path(tmp), args.writes, args.files, args.seconds)
        seal_bench(Path(tmp), args.seal_files)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
