"""rgbridge's pytest plugin: strict grading's record of what pytest collected and ran.

Installed into the tester image's venv and loaded explicitly with `-p rgbridge_pytest_report`,
so it is active whatever the golden suite's ini says (`addopts = -q`, `-p` options, markers,
a `[tool:pytest]` header): strict never reads pytest's terminal output. Stdlib + pytest only.

Environment:
  RGBRIDGE_REPORT        where to write the JSON report (required; the plugin is inert without it)
  RGBRIDGE_SUITE_BUDGET  seconds after which no further item is started (the suite deadline);
                         items left are simply absent from the report and graded `not_run`
  RGBRIDGE_AGENT_PATH    white-box suites only: a directory appended to the END of sys.path, so
                         the suite can `import app...` without agent modules shadowing pytest,
                         the stdlib or installed packages

The report is rewritten atomically after collection and after every item, so a hard kill
still leaves everything finished so far:
  {"version": 1, "collected": [nodeid...], "collect_errors": [{"nodeid", "message"}],
   "tests": {nodeid: {"setup"|"call"|"teardown": {"outcome", "duration", "message", "xfail"}}},
   "exitstatus": int|null, "exit_reason": str|null, "deadline_hit": bool, "finished": bool}
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pytest

MESSAGE_CHARS = 2000

_agent_path = os.environ.get("RGBRIDGE_AGENT_PATH", "")
if _agent_path and _agent_path not in sys.path:
    sys.path.append(_agent_path)  # last: never shadows pytest, the stdlib or site-packages


def _text(longrepr: object) -> str:
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (file, line, reason)
        return str(longrepr[2])[:MESSAGE_CHARS]
    text = str(longrepr)
    return text[-MESSAGE_CHARS:] if len(text) > MESSAGE_CHARS else text


class Recorder:
    def __init__(self, path: str, budget: float | None) -> None:
        self.path = path
        self.deadline = time.monotonic() + budget if budget else None
        self.data: dict[str, Any] = {
            "version": 1,
            "collected": [],
            "collect_errors": [],
            "tests": {},
            "exitstatus": None,
            "exit_reason": None,
            "deadline_hit": False,
            "finished": False,
        }

    def flush(self) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.data, fh)
        os.replace(tmp, self.path)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.data["collect_errors"].append({"nodeid": report.nodeid, "message": _text(report.longrepr)})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.data["collected"] = [item.nodeid for item in session.items]
        self.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.data["deadline_hit"] = True
            item.session.shouldstop = "rgbridge: suite deadline reached"
            return True  # not run: graded not_run
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        phases = self.data["tests"].setdefault(report.nodeid, {})
        phases[report.when] = {
            "outcome": report.outcome,
            "duration": round(float(getattr(report, "duration", 0.0) or 0.0), 3),
            "message": "" if report.passed else _text(report.longrepr),
            "xfail": hasattr(report, "wasxfail"),
        }
        if report.when == "teardown":
            self.flush()

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # Also called for pytest.exit(): a fixture that ends the whole session.
        self.data["exit_reason"] = f"{excinfo.typename}: {getattr(excinfo.value, 'msg', excinfo.value)}"[:MESSAGE_CHARS]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.data["exitstatus"] = int(exitstatus)
        self.data["finished"] = True
        self.flush()


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("RGBRIDGE_REPORT", "")
    if not path or config.pluginmanager.has_plugin("rgbridge-recorder"):
        return
    raw = os.environ.get("RGBRIDGE_SUITE_BUDGET", "")
    try:
        budget = float(raw) if raw else None
    except ValueError:
        budget = None
    config.pluginmanager.register(Recorder(path, budget), "rgbridge-recorder")
