"""Golden suites are parsed in scoring threads: concurrent parses must not fail.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state; a thread
switch inside the constructor (here forced by finalisers run by the garbage collector, as a
scoring process's sockets and clients do) made `ast.parse` in another thread fail with
"SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). It ended a
60-repo `evaluate` run (bench/scale.py) in the middle.
"""

from __future__ import annotations

import ast
import contextlib
import threading
import time
from pathlib import Path

from bridge.tasks.suite import agent_imports, parse_python, static_test_ids


class _Finalised:
    """Garbage with a finaliser that yields the GIL: what lets another thread in mid-parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def _suite(tmp: Path) -> Path:
    tests = tmp / "tests"
    tests.mkdir()
    body = "\n".join(
        f"def test_case_{i}(client):\n    r = client.get('/items/{i}')\n    assert r.status_code == 200, {{'i': [{i}]}}\n"
        for i in range(300)
    )
    (tests / "test_api.py").write_text("import requests\n\n" + body)
    return tests


def test_concurrent_parses_of_golden_suites_never_fail(tmp_path: Path) -> None:
    tests = _suite(tmp_path)
    errors: list[BaseException] = []
    expected = len(static_test_ids(tests)["tests/test_api.py"])

    def work() -> None:
        for _ in range(40):
            for _ in range(300):
                _Finalised()
            try:
                ids = static_test_ids(tests)
                assert len(ids["tests/test_api.py"]) == expected
                assert agent_imports(tests) == []
            except BaseException as exc:  # noqa: B036 - any failure in a thread is the test's failure
                errors.append(exc)
                return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert expected == 300
    assert not errors, errors[0]


def test_unparsable_golden_files_are_skipped_not_raised(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_nul.py").write_text("def test_a():\n    pass\x00\n")
    (tests / "test_deep.py").write_text("x = " + "(" * 100_000 + ")" * 100_000 + "\n")
    (tests / "test_ok.py").write_text("def test_b():\n    pass\n")
    assert parse_python("x = (") is None
    assert static_test_ids(tests) == {
        "tests/test_deep.py": [],
        "tests/test_nul.py": [],
        "tests/test_ok.py": ["tests/test_ok.py::test_b"],
    }
    assert agent_imports(tests) == []


def test_parses_outside_the_lock_do_not_fail_a_golden_parse(tmp_path: Path) -> None:
    """Regression: a thread that parses without the bridge's lock (3.11's traceback module parses
    every line it prints for its carets, as a leaked test server's request handler did beside this
    file's first test) made a golden suite's parse fail with the recursion depth mismatch."""
    tests = _suite(tmp_path)
    source = (tests / "test_api.py").read_text()
    stop = threading.Event()
    errors: list[BaseException] = []

    def outsider(depth: int = 0) -> None:  # what traceback.format_exc does for each line it prints
        if depth < 15:  # deeper than the parsing threads, as a request handler's traceback is
            return outsider(depth + 1)
        while not stop.is_set():
            with contextlib.suppress(SystemError):  # the race hits the outsider too: not ours
                ast.parse("answer = client.get(url)[key].json()")
            time.sleep(0)

    def work() -> None:
        for _ in range(8):
            for _ in range(300):
                _Finalised()
            try:
                assert parse_python(source) is not None
            except BaseException as exc:  # noqa: B036 - any failure in a thread is the test's failure
                errors.append(exc)
                return

    partner = threading.Thread(target=outsider, daemon=True)
    partner.start()
    threads = [threading.Thread(target=work) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop.set()
        partner.join(timeout=60)
    assert not errors, errors[0]
