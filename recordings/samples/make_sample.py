"""Regenerate the committed sample recording `recordings/samples/kv-ledger-sample/`.

A real session of the stdlib `kv-ledger` task through `SessionManager` with the Docker scoring
engine: a partial app first (history and counters missing), start.sh, a scratch file moved and
deleted, a pause, a note, the full app, a submission (scored under both profiles), then a
4-point strict curve, and the seal. Run from the project root:

    python recordings/samples/make_sample.py

It takes about a minute (scoring is the slow part) and replaces the sample folder.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bridge.recording.curve import compute_curve
from bridge.recording.integrity import seal_recording, verify_recording
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ClientInfo
from bridge.tasks.catalog import Catalog

NAME = "kv-ledger-sample"
QUIET = 7.0  # > the recorder's auto-checkpoint interval, so each step gets its own commit


def partial_app(full: str) -> str:
    """The solution without its history and counter routes (a plausible half-way state)."""
    start = full.index('@app.get("/api/v1/keys/{key}/history")')
    end = full.index("class RequestHandler")
    return full[:start] + full[end:]


def main() -> int:
    solution = ROOT / "tasks" / "kv-ledger" / "solution"
    full = (solution / "app.py").read_text(encoding="utf-8")
    tmp = Path(tempfile.mkdtemp(prefix="rgbridge-sample-"))
    catalog = Catalog.from_options()
    mgr = SessionManager(catalog, recordings_dir=tmp / "rec")
    ws = tmp / "ws"
    st = mgr.start("kv-ledger", ws, client=ClientInfo(name="sample-script", version="1"))
    sid = st.session_id
    mgr.log_call(sid, "start_task", {"task_id": "kv-ledger", "workspace": str(ws)}, ok=True)
    mgr.log_call(sid, "get_task", {"task_id": "kv-ledger"}, ok=True)
    time.sleep(1.0)

    # step 1: a partial service
    (ws / "app.py").write_text(partial_app(full), encoding="utf-8")
    (ws / "requirements.txt").write_text("", encoding="utf-8")
    time.sleep(QUIET)

    # step 2: start script (executable) and a scratch file that is renamed, then removed
    shutil.copyfile(solution / "start.sh", ws / "start.sh")
    os.chmod(ws / "start.sh", 0o755)
    (ws / "scratch.txt").write_text("todo: history, counters\n", encoding="utf-8")
    mgr.log_call(sid, "get_result", {}, ok=True)
    time.sleep(QUIET)
    os.rename(ws / "scratch.txt", ws / "TODO.md")
    time.sleep(QUIET)

    # a pause, a note (with markup, to exercise escaping), a failed call
    mgr.pause(sid)
    time.sleep(3.0)
    mgr.resume(sid)
    mgr.note(sid, 'adding <history> & counters — "done" soon')
    mgr.log_call(sid, "submit_task", {"session_id": "nope"}, ok=False, error="unknown session 'nope'")

    # step 3: the full service; the scratch file goes away
    (ws / "app.py").write_text(full, encoding="utf-8")
    (ws / "TODO.md").unlink()
    time.sleep(QUIET)

    mgr.log_call(sid, "submit_task", {}, ok=True)
    mgr.submit(sid)
    res = mgr.result(sid, wait_seconds=600)
    print("scored:", res.state, res.summary)
    mgr.log_call(sid, "get_result", {"wait_seconds": 600}, ok=True)
    mgr.close()
    if res.state != "done":
        print("scoring failed:", res.message)
        return 1

    rec = tmp / "rec" / sid
    (rec / "owner.pid").unlink(missing_ok=True)
    seal_recording(rec)
    curve = compute_curve(rec, points=4, workers=2, profile="strict", catalog=catalog)
    print("curve:", [(p["index"], p["outcome"], p["pass_at_1"]) for p in curve["points"]])
    report = verify_recording(rec)
    print("verify:", report.ok, report.problems, report.warnings)
    dest = ROOT / "recordings" / "samples" / NAME
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(rec, dest)
    shutil.rmtree(tmp, ignore_errors=True)
    print("sample:", dest)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
