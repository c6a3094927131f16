"""A test run's temp folder is its own: another run scoring beside it on the same machine (its
folders in the shared /tmp) is not taken for a golden-file leak of this run (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO_ROOT, RUN_TMP_ENV, TASKS_DIR

PROBE = """
import os
import shutil
from pathlib import Path

from tests.golden_leaks import golden_leaks  # noqa: F401  (the fixture)


def test_another_run_scores_beside_this_one(golden_leaks):
    # another process's scoring folder, holding a golden test, appears in the shared temp folder
    other = Path(os.environ["SHARED_TMP"]) / "rgbridge-score-of-another-run"
    other.mkdir()
    shutil.copy(os.environ["GOLDEN"], other / "test_copy.py")
"""


def test_this_run_has_its_own_temp_folder() -> None:
    import tempfile

    assert os.environ.get(RUN_TMP_ENV)
    assert Path(tempfile.gettempdir()) == Path(os.environ[RUN_TMP_ENV])
    assert os.environ["TMPDIR"] == os.environ[RUN_TMP_ENV]


def test_another_runs_scoring_in_the_shared_temp_folder_is_not_this_runs_leak(tmp_path: Path) -> None:
    shared = tmp_path / "shared-tmp"
    shared.mkdir(mode=0o1777)
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "test_probe.py").write_text(textwrap.dedent(PROBE))
    golden = next(p for p in sorted((TASKS_DIR / "kv-ledger" / "tests").glob("test_*.py")) if p.stat().st_size)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGBRIDGE_TEST_TMP")}
    env.update(TMPDIR=str(shared), SHARED_TMP=str(shared), GOLDEN=str(golden), PYTHONPATH=str(REPO_ROOT))
    env.pop("PYTEST_XDIST_WORKER", None)
    out = _inner_pytest(probe_dir, env, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout
    # the inner run's own temp folder went with its passing run; the other run's folder stays
    assert (shared / "rgbridge-score-of-another-run" / "test_copy.py").exists()
    assert [p.name for p in shared.iterdir()] == ["rgbridge-score-of-another-run"]


#: Two tests on two pytest-xdist workers at once (`scripts/test.sh --fast` runs one per core): one
#: leaves a golden copy in its system temp folder while the other's golden-copy check runs.
WORKERS_PROBE = """
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.golden_leaks import golden_leaks  # noqa: F401  (the fixture)

SYNC = Path(os.environ["SYNC_DIR"])


def _wait_for(name):
    deadline = time.monotonic() + 60
    while not (SYNC / name).exists():
        assert time.monotonic() < deadline, f"the other worker never wrote {name}"
        time.sleep(0.05)


def _note_tmp(name):
    (SYNC / f"{name}.tmp").write_text(tempfile.gettempdir() + "\\n" + os.environ["TMPDIR"])


@pytest.fixture()
def checked():
    yield
    (SYNC / "checked").write_text("")  # torn down after golden_leaks (set up before it)


def test_leaves_a_golden_copy_in_its_temp_folder():
    _note_tmp("leaker")
    _wait_for("checking")  # the other test's check is set up: what appears now is in its window
    folder = Path(tempfile.gettempdir()) / "rgbridge-score-of-this-worker"
    folder.mkdir()
    shutil.copy(os.environ["GOLDEN"], folder / "test_copy.py")
    (SYNC / "written").write_text("")
    _wait_for("checked")


def test_checks_while_the_other_worker_leaks(checked, golden_leaks):
    _note_tmp("checker")
    (SYNC / "checking").write_text("")
    _wait_for("written")
"""


def test_each_xdist_worker_has_a_temp_folder_of_its_own(tmp_path: Path) -> None:
    shared = tmp_path / "shared-tmp"
    shared.mkdir(mode=0o1777)
    sync = tmp_path / "sync"
    sync.mkdir()
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "test_probe.py").write_text(textwrap.dedent(WORKERS_PROBE))
    golden = next(p for p in sorted((TASKS_DIR / "kv-ledger" / "tests").glob("test_*.py")) if p.stat().st_size)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RGBRIDGE_TEST_TMP", "PYTEST_XDIST"))}
    env.update(TMPDIR=str(shared), SYNC_DIR=str(sync), GOLDEN=str(golden), PYTHONPATH=str(REPO_ROOT))
    out = _inner_pytest(probe_dir, env, "-n", "2", "--dist", "load", timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 passed" in out.stdout
    # each test waited for the other (or timed out): they ran at once, on the two workers
    leaker, checker = ((sync / f"{n}.tmp").read_text().splitlines() for n in ("leaker", "checker"))
    # each worker's temp folder is the TMPDIR its processes get, a folder of its own in the run's
    assert leaker[0] == leaker[1] and checker[0] == checker[1]
    assert leaker[0] != checker[0]
    assert Path(leaker[0]).parent == Path(checker[0]).parent
    assert Path(leaker[0]).parent.parent == shared
    # the run's folder, the workers' inside it, went with the passing run
    assert list(shared.iterdir()) == []


def _inner_pytest(
    probe_dir: Path, env: dict[str, str], *extra: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """The probe run as a pytest run of its own, with this suite's conftest (its temp folder rules)."""
    argv = [sys.executable, "-m", "pytest", "-q", *extra, "-p", "tests.conftest", "-p", "no:cacheprovider"]
    argv += ["--rootdir", str(probe_dir), str(probe_dir / "test_probe.py")]
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
