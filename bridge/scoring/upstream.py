"""The upstream RepoGenesis Docker-harness rules that the compat profile reproduces.

Everything here follows docs/upstream.md §2.4-2.6 to the letter, quirks included, because
the compat numbers must equal upstream's on the same repo:

* section extraction uses the *first* index of each marker;
* the pytest summary parser scans every line and the last matching line wins per count (W9),
  `error` also matches "errors", skipped is always 0;
* the Surefire parser sums every `Tests run:` line, per-class and aggregate alike (W11);
* when the TEST section is empty the whole log is parsed.

Both languages' compat runners share the container's run here too (`run_compat_container`:
the live stream digests, the wait, the kept output) and its grading (`grade_compat_run`).

The strict profile must not use these parsers (it grades JUnit XML, see `grading.py`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bridge.scoring.result import DSRResult, PassAt1, ProfileResult, TestCaseResult, TestOutcome
from bridge.scoring.sandbox.protocol import Sandbox, WaitOutcome

# Markers printed by the entrypoint (ours reproduces them: assets/compat_entrypoint.sh).
DSR_START = ">>>>> DSR_START"
DSR_END = ">>>>> DSR_END"
DSR_RESULT_PREFIX = "DSR_RESULT="
DSR_MESSAGE_PREFIX = "DSR_MESSAGE="
TEST_START = ">>>>> TEST_START"
TEST_END = ">>>>> TEST_END"
TEST_EXIT_CODE_PREFIX = "TEST_EXIT_CODE="

NO_DSR_MARKERS_MESSAGE = "No DSR markers found in container output"
DSR_TRUE_VALUES = frozenset({"true", "1", "yes"})

# Entrypoint behaviour, as data (the shell script is the executable form; tests cross-check).
START_SCRIPT_CANDIDATES: tuple[str, ...] = ("./start.sh", "./scripts/start.sh", "./bin/start.sh")
START_SCRIPT_FIND = "find . -maxdepth 3 -name start.sh -type f"  # first line of output wins
#: (file that must exist, command) in order; first existing file wins.
PYTHON_FALLBACKS: tuple[tuple[str, str], ...] = (
    ("app.py", "python app.py"),
    ("main.py", "python main.py"),
    ("run.py", "python run.py"),
    ("manage.py", "python manage.py runserver 0.0.0.0:$SERVICE_PORT"),
    ("server.py", "python server.py"),
)
#: Then, for each module whose `python -c "import <m>"` succeeds: uvicorn <m>:app.
PYTHON_UVICORN_MODULES: tuple[str, ...] = ("main", "app", "server", "api")
JAVA_FALLBACK = ("pom.xml", "mvn spring-boot:run -q")
HEALTH_PATHS: tuple[str, ...] = ("/", "/health", "/api/health", "/api/v1/health", "/actuator/health")

DSR_MSG_STARTED = "Service started successfully"
DSR_MSG_NO_ENTRY = "No service entry point found"
DSR_MSG_FAILED = "Service failed to start within {timeout}s"

# Per-language constants of upstream constants.py.
STARTUP_TIMEOUTS = {"python": 15, "java": 20}
TEST_TIMEOUTS = {"python": 300, "java": 600}
CONTAINER_TIMEOUT = 900
HARNESS_VERSION = "1.0.0"

# Upstream exit codes added by docker_utils / the orchestrator.
EXIT_TIMEOUT = -1
EXIT_CONTAINER_ERROR = -2
EXIT_BUILD_FAILED = -3
EXIT_UNEXPECTED = -99

_PASSED_RE = re.compile(r"(\d+)\s+passed")
_FAILED_RE = re.compile(r"(\d+)\s+failed")
_ERROR_RE = re.compile(r"(\d+)\s+error")
SUREFIRE_RE = re.compile(r"Tests run:\s*(\d+),\s*Failures:\s*(\d+),\s*Errors:\s*(\d+),\s*Skipped:\s*(\d+)")


def combine_container_log(stdout: str, stderr: str) -> str:
    """Upstream's log: container stdout, a newline, then container stderr (§2.4)."""
    return f"{stdout}\n{stderr}"


def extract_section(log: str, start: str, end: str) -> str:
    """Text between the first `start` and the first `end` marker, stripped.

    Empty when either marker is missing or the first `end` is not after the first `start`.
    """
    i = log.find(start)
    j = log.find(end)
    if i == -1 or j == -1 or j <= i:
        return ""
    return log[i + len(start) : j].strip()


def parse_dsr(log: str) -> DSRResult:
    """DSR from the DSR section; later DSR_RESULT= / DSR_MESSAGE= lines override earlier ones."""
    section = extract_section(log, DSR_START, DSR_END)
    if not section:
        return DSRResult(success=False, message=NO_DSR_MARKERS_MESSAGE)
    success = False
    message = "Unknown"
    for raw in section.splitlines():
        line = raw.strip()
        if line.startswith(DSR_RESULT_PREFIX):
            success = line[len(DSR_RESULT_PREFIX) :].strip().lower() in DSR_TRUE_VALUES
        elif line.startswith(DSR_MESSAGE_PREFIX):
            message = line[len(DSR_MESSAGE_PREFIX) :].strip()
    return DSRResult(success=success, message=message)


def parse_pytest_summary(text: str) -> PassAt1:
    """Upstream's pytest line parser (W9 quirks kept on purpose)."""
    if not text or text.strip() == "TIMEOUT":
        return PassAt1.from_counts(0, 0, 0)
    passed = failed = errors = 0
    for raw in text.splitlines():
        line = raw.strip()
        if m := _PASSED_RE.search(line):
            passed = int(m.group(1))
        if m := _FAILED_RE.search(line):
            failed = int(m.group(1))
        if m := _ERROR_RE.search(line):
            errors = int(m.group(1))
    return PassAt1.from_counts(passed, failed, errors, skipped=0)


def parse_surefire_summary(text: str) -> PassAt1:
    """Upstream's Maven parser: sums every `Tests run:` line (W11), skipped in the total."""
    if not text or text.strip() == "TIMEOUT":
        return PassAt1.from_counts(0, 0, 0)
    run = fail = err = skip = 0
    for line in text.splitlines():
        if m := SUREFIRE_RE.search(line):
            run += int(m.group(1))
            fail += int(m.group(2))
            err += int(m.group(3))
            skip += int(m.group(4))
    passed = max(run - fail - err - skip, 0)
    return PassAt1.from_counts(passed, fail, err, skipped=skip, total=run)


def parse_test_exit_code(log: str) -> int | None:
    """The TEST_EXIT_CODE= value of the TEST section (always 0 upstream, W5); None if absent."""
    value: int | None = None
    for raw in extract_section(log, TEST_START, TEST_END).splitlines():
        line = raw.strip()
        if line.startswith(TEST_EXIT_CODE_PREFIX):
            try:
                value = int(line[len(TEST_EXIT_CODE_PREFIX) :].strip())
            except ValueError:
                continue
    return value


def parse_test_section(log: str, lang: str) -> PassAt1:
    """Pass@1 from the TEST section, falling back to the whole log when it is empty."""
    section = extract_section(log, TEST_START, TEST_END) or log
    if lang == "python":
        return parse_pytest_summary(section)
    if lang == "java":
        return parse_surefire_summary(section)
    return PassAt1.from_counts(0, 0, 0)


def grade_upstream_log(log: str, lang: str) -> tuple[DSRResult, PassAt1]:
    """Grade a combined container log exactly as upstream's grading.py does."""
    return parse_dsr(log), parse_test_section(log, lang)


MARKERS = (DSR_START, DSR_END, DSR_RESULT_PREFIX, DSR_MESSAGE_PREFIX, TEST_START, TEST_END, TEST_EXIT_CODE_PREFIX)
_COUNT_RES = (_PASSED_RE, _FAILED_RE, _ERROR_RE)


class LogDigest:
    """A grading-equivalent digest of a Python container log, of bounded size.

    Upstream grades the whole log; a hostile service can print gigabytes, more than we keep.
    The pytest parser only reads marker lines and, between markers, the *last* line matching
    each count regex (last-wins), so per run of non-marker lines we keep exactly those lines
    (in order) plus one placeholder when anything was dropped, which keeps empty sections
    empty and non-empty sections non-empty. `grade_upstream_log(digest)` then equals
    `grade_upstream_log(full log)` for Python. (Java's parser sums every line; not digested.)
    """

    PLACEHOLDER = "[rgbridge: lines dropped]"

    def __init__(self) -> None:
        self._out: list[str] = []
        self._run: dict[int, tuple[int, str]] = {}  # regex index -> (line number, line)
        self._dropped = False
        self._partial = ""
        self._n = 0

    def feed(self, chunk: bytes | str) -> None:
        text = chunk.decode("utf-8", errors="replace") if isinstance(chunk, bytes) else chunk
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if len(self._partial) > 1_000_000:  # one endless line: keep its matching head only
            self._line(self._partial[:1_000_000])
            self._partial = ""
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        self._n += 1
        if any(marker in line for marker in MARKERS):
            self._flush()
            self._out.append(line)
            return
        matched = False
        for index, regex in enumerate(_COUNT_RES):
            if regex.search(line.strip()):
                self._run[index] = (self._n, line)
                matched = True
        if not matched and line.strip():
            self._dropped = True  # blank lines do not matter: sections are stripped

    def _flush(self) -> None:
        kept = sorted(set(self._run.values()))
        if self._dropped:
            # Dropped lines (and superseded matches) leave a placeholder, so a section that had
            # text still has some: an empty TEST section makes upstream parse the whole log.
            self._out.append(self.PLACEHOLDER)
        self._out.extend(line for _, line in kept)
        self._run.clear()
        self._dropped = False

    def text(self) -> str:
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        self._flush()
        return "\n".join(self._out)


# pytest -v progress lines (`tests/test_a.py::test_x PASSED   [ 10%]`), the failure sections of
# `--tb=short` (`____ test_x ____` then the traceback with its `E` lines) and the short summary
# (`FAILED tests/test_a.py::test_x - assert 404 ...`, cut to the terminal's width).
_VERBOSE_RE = re.compile(r"^(\S+\.py::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_SUMMARY_RE = re.compile(r"^(FAILED|ERROR) (\S+\.py::\S+?)(?: - (.*))?$")
_SECTION_RE = re.compile(r"^_{3,} (?:ERROR at \w+ of )?(\S+) _{3,}$")
_VERBOSE_OUTCOME: dict[str, TestOutcome] = {
    "PASSED": "passed",
    "XPASS": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "skipped",
}


def _failure_sections(lines: list[str]) -> dict[str, str]:
    """`--tb=short` failure sections by their title (`test_x`, `TestC.test_x`, `test_x[1]`)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        m = _SECTION_RE.match(line)
        if m:
            current = sections.setdefault(m.group(1), [])
        elif line.startswith("====="):
            current = None
        elif current is not None and len(current) < 200:
            current.append(line)
    return {title: "\n".join(body) for title, body in sections.items()}


def tests_from_log(log: str) -> list[TestCaseResult]:
    """compat's per-test view, read from the pytest log for display only (the score stays the
    summary-line count above): each item's outcome from `-v`, each failure's message from its
    `--tb=short` section, else from the short test summary. The log is the agent's container
    output: forgeable, like compat's score."""
    lines = [line.rstrip() for line in log.splitlines()]
    sections = _failure_sections(lines)
    found: dict[str, TestCaseResult] = {}
    for line in lines:
        m = _VERBOSE_RE.match(line)
        if m:
            outcome = _VERBOSE_OUTCOME[m.group(2)]
            if m.group(1) not in found or outcome != "passed":
                found[m.group(1)] = TestCaseResult(nodeid=m.group(1), outcome=outcome)
            continue
        m = _SUMMARY_RE.match(line)
        if m:
            outcome = "failed" if m.group(1) == "FAILED" else "error"
            found[m.group(2)] = TestCaseResult(nodeid=m.group(2), outcome=outcome, message=(m.group(3) or "")[:2000])
    for nodeid, test in found.items():
        title = ".".join(nodeid.split("::")[1:])
        if test.outcome in ("failed", "error") and title in sections:
            found[nodeid] = test.model_copy(update={"message": sections[title][:2000]})
    return list(found.values())


# --- the compat container, both languages: run it, digest its streams, grade it -----------------


def follow_digests(
    box: Sandbox, digest_factory: Callable[[], LogDigest] = LogDigest
) -> list[tuple[threading.Thread, LogDigest]]:
    """Attach to stdout and stderr (one stream each) and digest them live for grading.

    The live streams, not the kept log: an engine's log file can rotate under a flood and lose
    the markers (bridge/scoring/sandbox/docker_sandbox.py `attach`).
    """
    out = []
    for is_stdout in (True, False):
        digest = digest_factory()
        stream = box.attach(stdout=is_stdout)

        def pump(digest: LogDigest = digest, stream: Iterable[bytes] = stream) -> None:
            for chunk in stream:
                digest.feed(chunk)

        thread = threading.Thread(target=pump, daemon=True, name="rgbridge-compat-log")
        thread.start()
        out.append((thread, digest))
    return out


@dataclass
class CompatContainer:
    """What upstream's one container left: how it ended, its kept output and the grading digests."""

    outcome: WaitOutcome
    stdout: str
    stderr: str
    digests: tuple[LogDigest, LogDigest]

    @property
    def kept_log(self) -> str:
        return combine_container_log(self.stdout, self.stderr)

    @property
    def graded_log(self) -> str:
        """The digests of the complete streams (the kept log file is capped)."""
        return combine_container_log(self.digests[0].text(), self.digests[1].text())


def run_compat_container(
    box: Sandbox, timeout: float, digest_factory: Callable[[], LogDigest] = LogDigest
) -> CompatContainer:
    """Start upstream's container, wait for it (at most `timeout` seconds) and read its output."""
    digests = follow_digests(box, digest_factory)  # attached before start: no output is missed
    box.start()
    outcome = box.wait(timeout)
    for thread, _ in digests:
        thread.join(timeout=30)
    stdout = box.logs(stdout=True, stderr=False)
    stderr = box.logs(stdout=False, stderr=True)
    return CompatContainer(outcome, stdout, stderr, (digests[0][1], digests[1][1]))


def grade_compat_run(
    finish: Callable[..., ProfileResult], container: CompatContainer, lang: str, *, python_tests: bool = False
) -> ProfileResult:
    """Grade the container as upstream does; `python_tests` adds per-test lines for display,
    from the kept log (the grading digest keeps count lines only)."""
    outcome = container.outcome
    if outcome.timed_out:
        # Upstream replaces the log and scores the repo from that text: zero tests, no DSR.
        dsr, p1 = grade_upstream_log(f"Container timed out after {CONTAINER_TIMEOUT}s", lang)
        return finish(outcome="timeout", dsr=dsr, pass_at_1=p1, exit_code=EXIT_TIMEOUT, oom_killed=outcome.oom_killed)
    dsr, p1 = grade_upstream_log(container.graded_log, lang)
    return finish(
        outcome="scored" if dsr.success else "deploy_failed",
        dsr=dsr,
        pass_at_1=p1,
        tests=tests_from_log(container.kept_log) if python_tests else None,
        exit_code=outcome.exit_code,
        oom_killed=outcome.oom_killed,
    )
