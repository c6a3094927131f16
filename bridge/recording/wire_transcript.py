"""The wire transcript read back (`agent/wire.jsonl` of an attempt folder or a recording,
docs/recording-format.md; written by the model gateway, bridge/agents/gateway/transcript.py): the
one reader every caller uses. The file is untrusted like every file of a recording: it is opened
without following a link at its name and only as a regular file (a FIFO or a device would block or
never end), read line by line within a size and a record count, and every line that is no JSON
object is skipped and counted.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

#: the transcript's name in an attempt's `agent/` folder, and its path in a recording
NAME = "wire.jsonl"
PATH = Path("agent") / NAME
#: one record holds two bodies cut at 1M characters each (transcript.MAX_BODY_CHARS), up to 6
#: bytes a character once JSON-escaped: a longer line is no record the gateway wrote
MAX_LINE_BYTES = 32 * 1024 * 1024
_CHUNK = 1024 * 1024


@dataclass
class WireStats:
    """What a read saw: whether the file was read at all (a regular file, not a link), records
    kept, lines skipped (no JSON object, or longer than a record can be), and whether it stopped
    before the file's end (its size cap or its record count)."""

    opened: bool = False
    records: int = 0
    bad_lines: int = 0
    cut: bool = False


def _open(path: Path) -> IO[bytes] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder, a FIFO or a device
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _skip_line(fh: IO[bytes], left: int) -> int:
    """Read past the rest of an overlong line (at most `left` bytes); the bytes read."""
    read = 0
    while read < left:
        chunk = fh.readline(min(_CHUNK, left - read))
        if not chunk:
            break
        read += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return read


def wire_records(
    path: Path, *, max_records: int, max_bytes: int, stats: WireStats | None = None
) -> Iterator[dict[str, Any]]:
    """The transcript's records in file order: at most `max_records`, from at most its first
    `max_bytes` (a line that does not end within them is not read). Nothing when the file is
    missing, a link or no regular file."""
    st = stats if stats is not None else WireStats()
    fh = _open(path)
    if fh is None:
        return
    st.opened = True
    with fh:
        left = max_bytes
        while True:
            if st.records >= max_records or left <= 0:
                st.cut = bool(fh.read(1))
                return
            room = min(left, MAX_LINE_BYTES)
            raw = fh.readline(room + 1)
            if not raw:
                return
            if len(raw) > room:  # no newline within what may be read
                if room == left:  # the size cap: the rest of the file is not read
                    st.cut = True
                    return
                left -= len(raw) + _skip_line(fh, left - len(raw))
                st.bad_lines += 1
                continue
            left -= len(raw)
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                record = None
            if not isinstance(record, dict):
                st.bad_lines += 1
                continue
            st.records += 1
            yield record


def refused(record: object) -> str | None:
    """The gateway's reason when a record is a call it refused itself (never forwarded), else None."""
    call = record.get("call") if isinstance(record, dict) else None
    reason = call.get("refused") if isinstance(call, dict) else None
    return reason if isinstance(reason, str) and reason else None
