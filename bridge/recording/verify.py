"""Verify a recording (`rgbridge recordings verify`): recompute its seal when there is one
(bridge/recording/sealcheck.py) and cross-check its content (bridge/recording/content_checks.py).

The content checks also work on an unsealed recording. A report lists problems (the recording
was altered or is inconsistent) apart from warnings (e.g. get_result polls appended after the seal).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError, RecordingError
from bridge.recording.content_checks import check_content
from bridge.recording.integrity import INTEGRITY_NAME
from bridge.recording.reader import load_meta
from bridge.recording.sealcheck import compare_seal


@dataclass
class VerifyReport:
    ok: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sealed: bool = False
    checked: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify_recording(rec_dir: Path | str) -> VerifyReport:
    """Recompute the seal (when there is one) and cross-check the recording's content."""
    rec_dir = Path(rec_dir)
    problems: list[str] = []
    warnings: list[str] = []
    checked: dict[str, int] = {}
    try:
        meta = load_meta(rec_dir)
    except BridgeError as exc:
        return VerifyReport(False, [str(exc)])
    seal_path = rec_dir / INTEGRITY_NAME
    sealed = seal_path.is_file()
    if sealed:
        try:
            data = json.loads(seal_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as exc:
            problems.append(f"{INTEGRITY_NAME}: unreadable ({exc})")
        else:
            try:
                compare_seal(rec_dir, data, problems, warnings)
            except (OSError, RecordingError) as exc:
                problems.append(f"seal check failed: {exc}")
    elif meta.state in ("active", "paused"):
        warnings.append("not sealed yet (the session is still open)")
    else:
        problems.append(f"{INTEGRITY_NAME}: missing (recording not sealed; `rgbridge recordings seal` seals it)")
    try:
        check_content(rec_dir, problems, warnings, checked)
    except (OSError, RecordingError) as exc:
        problems.append(f"content check failed: {exc}")
    return VerifyReport(not problems, problems, warnings, sealed, checked)
