"""Replay benchmark: a long recording (2,000 settled commits over 500 files), replayed to 100
random moments.

    python bench/replay.py [--commits 2000] [--files 500] [--moments 100] [--interval 15] [--keep DIR]

The recording is generated with the real `ShadowStore` and `EventLog` (the recorder's own
write path: blobs via put_blob, file events with sha256/size/mode, one checkpoint commit per
settled batch), without a watched workspace, so it takes a minute rather than hours. Each batch
changes 1–5 files (sometimes creates, deletes or renames one); the simulated activity rate is
one settled batch every `--interval` seconds of working time, which converts the recording's
size on disk into bytes per hour of activity. Moments are `event:N` for random N, so about
half land between checkpoints (checkpoint + file events), and every replay is checked against
the tree hash the events imply. Prints median and worst replay time and the size figures.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.fs.hashing import MODE_EXEC, MODE_FILE, sha256_bytes
from bridge.recording.clock import iso, utcnow
from bridge.recording.events import EventLog
from bridge.recording.manifest import FileEntry, Manifest
from bridge.recording.moments import resolve_moment, state_at
from bridge.recording.reader import open_recording
from bridge.recording.replay import replay
from bridge.recording.store import ShadowStore
from bridge.sessions.models import SessionRecord

WORDS = "def class return import self value key ledger store version items request response error".split()


def source(rnd: random.Random, lines: int) -> bytes:
    return "".join(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 10))) + "\n" for _ in range(lines)).encode()


def generate(rec: Path, *, commits: int, files: int, seed: int = 7) -> dict[str, float]:
    rnd = random.Random(seed)
    ws = rec.parent / "ws-unused"  # the store needs a work tree path; nothing is read from it
    ws.mkdir(exist_ok=True)
    store = ShadowStore(rec / "store", ws)
    log = EventLog(rec / "events.jsonl")
    record = SessionRecord(
        session_id=rec.name,
        task_id="kv-ledger",
        task_hash="sha256:bench",
        task_version="1",
        task_source="native",
        task_port=8090,
        workspace=str(ws),
        created_at=iso(utcnow()),
    )
    record.clock.start()
    current: dict[str, FileEntry] = {}
    content: dict[str, bytes] = {}

    def write(path: str, data: bytes, mode: int, kind: str) -> None:
        sha = sha256_bytes(data)
        store.put_blob(sha, data)
        current[path] = FileEntry(sha, len(data), mode, time.time_ns(), 0)
        content[path] = data
        log.append(kind, path=path, sha256=sha, size=len(data), mode=f"{mode:o}")

    def checkpoint(reason: str) -> None:
        res = store.commit_manifest(Manifest(dict(current)), f"{reason}: {len(current)} files")
        log.append(
            "checkpoint",
            reason=reason,
            commit=res.commit,
            tree_hash=res.tree_hash,
            files=len(current),
            changes=0,
            reconciled=0,
            new_commit=res.created,
            left_out=[],
        )

    t0 = time.monotonic()
    for i in range(files):
        write(
            f"pkg{i % 25}/mod{i}.py",
            source(rnd, rnd.randint(20, 80)),
            MODE_EXEC if i % 50 == 0 else MODE_FILE,
            "file_created",
        )
    checkpoint("start")
    for n in range(commits):
        for _ in range(rnd.randint(1, 5)):
            roll = rnd.random()
            paths = sorted(current)
            if roll < 0.03 and len(current) > files // 2:
                path = rnd.choice(paths)
                del current[path], content[path]
                log.append("file_deleted", path=path)
            elif roll < 0.06:
                src = rnd.choice(paths)
                dest = f"moved/{n}-{src.rsplit('/', 1)[-1]}"
                entry = current.pop(src)
                current[dest] = entry
                content[dest] = content.pop(src)
                log.append(
                    "file_moved", path=src, dest=dest, sha256=entry.sha256, size=entry.size, mode=f"{entry.mode:o}"
                )
            elif roll < 0.10:
                write(f"pkg{rnd.randrange(25)}/new{n}.py", source(rnd, rnd.randint(10, 40)), MODE_FILE, "file_created")
            else:
                path = rnd.choice(paths)
                lines = content[path].splitlines(keepends=True)
                lines[rnd.randrange(len(lines))] = source(rnd, 1)
                if rnd.random() < 0.3:
                    lines.append(source(rnd, 1))
                write(path, b"".join(lines), current[path].mode, "file_modified")
        if n % 40 == 0:
            log.append("mcp_call", tool="get_task", arguments={}, ok=True, error=None)
        checkpoint("auto")
    log.close()
    record.clock.stop()
    (rec / "session.json").write_text(record.model_dump_json(indent=2), encoding="utf-8")
    return {"generate_seconds": time.monotonic() - t0}


def disk_bytes(path: Path) -> tuple[int, int]:
    apparent = allocated = 0
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--moments", type=int, default=100)
    ap.add_argument("--interval", type=float, default=15.0, help="simulated seconds of activity per settled batch")
    ap.add_argument("--keep", type=Path, help="generate into this folder and keep it")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rgbridge-bench-replay-"))
    rec = (args.keep or base) / "bench-recording"
    if rec.exists():
        shutil.rmtree(rec)
    rec.mkdir(parents=True)
    gen = generate(rec, commits=args.commits, files=args.files)
    apparent, allocated = disk_bytes(rec)
    hours = args.commits * args.interval / 3600
    print(f"generated {args.commits} commits over {args.files}+ files in {gen['generate_seconds']:.1f}s")
    print(
        f"recording: {apparent / 1e6:.1f} MB of files ({allocated / 1e6:.1f} MB allocated on disk), "
        f"{sum(1 for _ in (rec / 'store' / 'objects').rglob('*') if _.is_file())} store objects"
    )
    print(
        f"simulated activity: one settled batch of 1-5 file changes every {args.interval:g}s = "
        f"{hours:.2f} h -> {apparent / 1e6 / hours:.1f} MB/hour ({allocated / 1e6 / hours:.1f} MB/hour allocated)"
    )

    t_open = time.monotonic()
    recording = open_recording(rec)
    print(f"open_recording: {time.monotonic() - t_open:.2f}s for {len(recording.events)} events")
    rnd = random.Random(11)
    seqs = [rnd.randint(recording.events[0]["seq"], recording.events[-1]["seq"]) for _ in range(args.moments)]
    times: list[float] = []
    between = 0
    for i, seq in enumerate(seqs):
        out = base / f"out{i}"
        t = time.monotonic()
        res = replay(recording, f"event:{seq}", out)
        times.append(time.monotonic() - t)
        between += not res.exact_commit
        expect = state_at(recording, resolve_moment(recording, f"event:{seq}")).tree_hash()
        if res.tree_hash != expect:
            print(f"MISMATCH at event {seq}")
            return 1
        shutil.rmtree(out)
    cold = base / "cold"
    t = time.monotonic()
    replay(rec, "end", cold)  # includes opening the recording
    cold_s = time.monotonic() - t
    times.sort()
    print(
        f"replay to {args.moments} random moments ({between} between checkpoints): median "
        f"{statistics.median(times) * 1000:.0f} ms, p90 {times[int(0.9 * len(times)) - 1] * 1000:.0f} ms, "
        f"worst {times[-1] * 1000:.0f} ms; cold (open + replay) {cold_s * 1000:.0f} ms"
    )
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if statistics.median(times) < 1.0 else 2


if __name__ == "__main__":
    sys.exit(main())
