"""Text from recordings (notes, file names, client names) is untrusted: make it safe for a terminal."""

from __future__ import annotations

import re
from typing import Any

# C0 controls (tab and newline kept), DEL, C1 controls (incl. the 8-bit CSI 0x9b), and the
# bidirectional overrides/isolates that reorder what a reader sees.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A file name that is not UTF-8 arrives as a str with lone surrogates U+DC80-U+DCFF (PEP 383):
# shown as the byte it stands for, `\xe9`, since no terminal or page can encode the surrogate.
_RAW_BYTE = re.compile("[\udc80-\udcff]")


def show_raw_bytes(text: str) -> str:
    """`text` with every undecodable byte of a file name shown as `\\xNN` (encodable everywhere)."""
    return _RAW_BYTE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


def sanitize_terminal(text: str) -> str:
    """`text` with every control character shown as a visible escape (`\\x1b`, `\\u202e`)."""
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        show_raw_bytes(text),
    )


def sanitize_data(value: Any) -> Any:
    """Every string (keys too) inside plain JSON-like data, sanitized for a terminal."""
    if isinstance(value, str):
        return sanitize_terminal(value)
    if isinstance(value, dict):
        return {sanitize_data(k): sanitize_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize_data(v) for v in value]
    return value
