"""Append-only `events.jsonl`: one JSON object per line.

Every record carries:
- `seq`: 1, 2, 3, ... continuing across re-opens of the same file;
- `t`: wall time, ISO-8601 UTC with microseconds (`2025-01-02T03:04:05.123456Z`);
- `mono`: `time.monotonic()` seconds since this EventLog object was opened. It restarts at 0
  on every open, which is marked by a `log_opened` record (with `pid`); use `t` across opens;
- `type`: the event type; then the caller's fields;
- `work`: the session's working seconds when written, when the log was given its clock.

Every record is checked against the typed event model (bridge/recording/event_model.py) before
it is written: a record that does not fit its type is a bug, raised, never written.

Lines are written whole with one write + flush; `fsync` happens every `fsync_every` records
(0 = never automatically) and on `sync()`. A crash mid-write leaves at most one partial last
line: readers skip it (and count it), and a re-open terminates it before appending.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge.recording.event_model import parse_event

RESERVED_KEYS = frozenset({"seq", "t", "mono", "type", "work"})


def utc_now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class ReadStats:
    events: int = 0
    bad_lines: int = 0


def encode_record(rec: dict[str, Any]) -> bytes:
    """One record as a UTF-8 JSON line.

    File names are bytes on POSIX; Python carries a name that is not UTF-8 as a str with lone
    surrogates (U+DC80-U+DCFF, PEP 383). Those are written as JSON escapes (`\\udce9`), so the
    line stays valid UTF-8 and `json.loads` + `os.fsencode` give back the exact bytes."""
    line = json.dumps(rec, ensure_ascii=False, separators=(",", ":"), default=str)
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(rec, ensure_ascii=True, separators=(",", ":"), default=str).encode("ascii")


def read_events(path: str | os.PathLike[str], *, stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Yield the records of an events file, skipping (and counting in `stats`) unparsable lines."""
    st = stats if stats is not None else ReadStats()
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                # surrogateescape: logs written before names were escaped hold raw non-UTF-8 bytes
                rec = json.loads(line.decode("utf-8", "surrogateescape"))
            except ValueError:
                st.bad_lines += 1
                continue
            if not isinstance(rec, dict):
                st.bad_lines += 1
                continue
            st.events += 1
            yield rec


def load_events(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """All records and the number of bad lines."""
    stats = ReadStats()
    return list(read_events(path, stats=stats)), stats.bad_lines


class EventLog:
    """Thread-safe append-only JSON Lines writer. Generic: `append(type, **fields)`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync_every: int = 0,
        mark_open: bool = True,
        work: Callable[[], float] | None = None,
    ) -> None:
        self.path = Path(path)
        #: the session's working clock (seconds), stamped on every record as `work`
        self.work = work
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fsync_every = fsync_every
        self._since_sync = 0
        self._mono0 = time.monotonic()
        self._seq = 0
        self.bad_lines = 0
        if self.path.exists():
            stats = ReadStats()
            for rec in read_events(self.path, stats=stats):
                seq = rec.get("seq")
                if isinstance(seq, int) and seq > self._seq:
                    self._seq = seq
            self.bad_lines = stats.bad_lines
        self._fh = open(self.path, "ab")
        self._terminate_partial_line()
        if mark_open:
            self.append("log_opened", pid=os.getpid())

    def _terminate_partial_line(self) -> None:
        size = self._fh.tell()
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                self._fh.write(b"\n")
                self._fh.flush()

    @property
    def seq(self) -> int:
        """The seq of the last record written (0 when none)."""
        return self._seq

    def mono(self) -> float:
        return time.monotonic() - self._mono0

    def append(self, type: str, **fields: Any) -> dict[str, Any]:  # "type": the record key
        clash = RESERVED_KEYS & fields.keys()
        if clash:
            raise ValueError(f"reserved event keys: {sorted(clash)}")
        with self._lock:
            if self._fh.closed:
                raise ValueError("event log is closed")
            rec: dict[str, Any] = {
                "seq": self._seq + 1,
                "t": utc_now_iso(),
                "mono": round(time.monotonic() - self._mono0, 6),
                "type": type,
            }
            if self.work is not None:
                rec["work"] = round(float(self.work()), 3)
            rec.update(fields)
            parse_event(rec)  # EventShapeError: nothing written, seq not used
            self._seq += 1
            self._fh.write(encode_record(rec) + b"\n")
            self._fh.flush()
            self._since_sync += 1
            if self._fsync_every and self._since_sync >= self._fsync_every:
                os.fsync(self._fh.fileno())
                self._since_sync = 0
        return rec

    def sync(self) -> None:
        """Flush and fsync now (e.g. at checkpoints and submit)."""
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._since_sync = 0

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
