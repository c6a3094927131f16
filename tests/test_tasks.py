"""Task model, manifest validation, content hash, RepoGenesis dataset import, `tasks` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.errors import TaskError
from bridge.tasks.catalog import Catalog
from bridge.tasks.dataset import VERIFIED_SPECS, load_dataset, load_dataset_task
from bridge.tasks.model import load_task

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"

SHIPPED = ("kv-ledger", "library-api", "link-shortener", "word-duel")

GOOD_TOML = """\
id = "demo"
title = "Demo"
lang = "python"
framework = "flask"
port = 5055
difficulty = "easy"
version = "1.0.0"

[timeouts]
startup = 10

[test_env]
SERVICE_BASE_URL = "http://localhost:5055"
"""


def make_task(root: Path, toml: str = GOOD_TOML) -> Path:
    task = root / "demo"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    (task / "README.md").write_text("# Demo\n\n| GET | /api/v1/things |\n")
    (task / "tests" / "test_demo.py").write_text("def test_one():\n    assert True\n")
    return task


def rgbridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge.cli", *args], capture_output=True, text=True, timeout=60)


def test_shipped_tasks_load(tasks_dir: Path) -> None:
    catalog = Catalog.from_options(tasks_dir)
    assert catalog.errors == []
    assert sorted(catalog.tasks) == sorted(SHIPPED)
    for task in catalog:
        assert task.solution_dir is not None and (task.solution_dir / "start.sh").is_file()
        assert task.content_hash.startswith("sha256:")
        if task.lang == "java":  # golden src/test tree; the agent gets the pom seed
            assert len(list(task.tests_dir.rglob("*Test.java"))) >= 1 and "pom.xml" in task.seed_files
        else:
            assert (task.solution_dir / "requirements.txt").is_file()
            assert len(list(task.tests_dir.rglob("test_*.py"))) >= 1


def test_good_manifest(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path))
    assert (task.id, task.port, task.framework) == ("demo", 5055, "flask")
    assert task.manifest.timeouts.startup == 10 and task.manifest.timeouts.tests == 300


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (lambda t: t.replace("port = 5055", "port = 70000"), "field 'port'"),
        (lambda t: t.replace("port = 5055", 'port = "eighty"'), "field 'port'"),
        (lambda t: t.replace("port = 5055\n", ""), "field 'port' is required"),
        (lambda t: t.replace('lang = "python"', 'lang = "cobol"'), "field 'lang'"),
        (lambda t: t.replace('id = "demo"', 'id = "../evil"'), "field 'id'"),
        (lambda t: "bogus = 1\n" + t, "unknown field 'bogus'"),
        (lambda t: t.replace("startup = 10", "startup = -1"), "field 'timeouts.startup'"),
        (lambda t: t.replace('title = "Demo"', 'title = "Demo'), "invalid TOML"),
    ],
)
def test_broken_manifest_names_the_field(tmp_path: Path, mutation, expected: str) -> None:
    folder = make_task(tmp_path, mutation(GOOD_TOML))
    with pytest.raises(TaskError) as info:
        load_task(folder)
    message = str(info.value)
    assert expected in message and "task.toml" in message
    assert "\n" not in message


def test_missing_readme_or_tests(tmp_path: Path) -> None:
    folder = make_task(tmp_path)
    (folder / "README.md").unlink()
    with pytest.raises(TaskError, match="README.md is missing"):
        load_task(folder)
    folder2 = make_task(tmp_path / "b")
    shutil.rmtree(folder2 / "tests")
    with pytest.raises(TaskError, match="golden tests"):
        load_task(folder2)


def test_seed_files_must_stay_outside_tests_and_solution(tmp_path: Path) -> None:
    folder = make_task(tmp_path, GOOD_TOML + '\n[seed]\nfiles = ["tests/test_demo.py"]\n')
    with pytest.raises(TaskError, match="seed.files"):
        load_task(folder)


def test_content_hash_covers_manifest_readme_and_tests(tmp_path: Path) -> None:
    folder = make_task(tmp_path)
    base = load_task(folder).content_hash
    (folder / "tests" / "test_demo.py").write_text("def test_one():\n    assert 1\n")
    changed_tests = load_task(folder).content_hash
    (folder / "README.md").write_text("# changed\n")
    changed_readme = load_task(folder).content_hash
    assert len({base, changed_tests, changed_readme}) == 3
    # The solution is not part of the hash: it is not what results are graded against.
    (folder / "solution").mkdir()
    (folder / "solution" / "app.py").write_text("print(1)\n")
    assert load_task(folder).content_hash == changed_readme


def test_catalog_keeps_good_tasks_and_reports_broken(tmp_path: Path) -> None:
    make_task(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "demo", broken)
    (broken / "task.toml").write_text(
        GOOD_TOML.replace('id = "demo"', 'id = "broken"').replace("port = 5055", "port = 0")
    )
    catalog = Catalog.from_options(tmp_path)
    assert list(catalog.tasks) == ["demo"]
    assert len(catalog.errors) == 1 and "field 'port'" in catalog.errors[0]
    with pytest.raises(TaskError, match="unknown task"):
        catalog.get("nope")


# ----------------------------------------------------------------------------- dataset


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    """A small tree in the RepoGenesis layout, written here (no upstream files are copied)."""
    root = tmp_path / "RepoGenesis"

    def py_task(name: str, *, variant: bool = False, extras: tuple[str, ...] = ()) -> None:
        d = root / "repo" / name
        (d / "tests").mkdir(parents=True)
        (d / "README.md").write_text(f"# {name}\n\nGET /api/v1/items - list\n")
        (d / "tests" / "test_api.py").write_text("def test_x():\n    assert True\n")
        for extra in extras:
            (d / extra).write_text("[pytest]\n" if extra.endswith(".ini") else "requests\n")
        if variant:
            v = root / "repo_readme_verified_python_no_t" / name
            v.mkdir(parents=True)
            (v / "README.md").write_text(f"# {name} (no tests variant)\n")

    py_task("SimpleFastPyAPI", variant=True)
    py_task("GameBackend", extras=("pytest.ini", "requirements.txt"))
    py_task("Tic-Tac-Toe")
    # a Java task: golden tests under src/test, pom seed from the no_t_with_p folder
    j = root / "repo" / "javalin-task-manager"
    (j / "src" / "test" / "java").mkdir(parents=True)
    (j / "README.md").write_text("# javalin\n")
    (j / "src" / "test" / "java" / "ApiTest.java").write_text("class ApiTest {}\n")
    jp = root / "repo_readme_verified_java_no_t_with_p" / "javalin-task-manager"
    jp.mkdir(parents=True)
    (jp / "README.md").write_text("# javalin variant\n")
    (jp / "pom.xml").write_text("<project/>\n")
    # a task whose golden tests are missing (upstream W1) and a folder that is not a Verified task
    (root / "repo" / "eve").mkdir(parents=True)
    (root / "repo" / "eve" / "README.md").write_text("# eve\n")
    (root / "repo" / "NotVerified" / "tests").mkdir(parents=True)
    return root


def test_dataset_import_uses_upstream_names_ports_and_layout(dataset: Path) -> None:
    tasks, errors = load_dataset(dataset)
    by_id = {t.id: t for t in tasks}
    assert sorted(by_id) == ["GameBackend", "SimpleFastPyAPI", "Tic-Tac-Toe", "javalin-task-manager"]
    for name, task in by_id.items():
        spec = VERIFIED_SPECS[name]
        assert (task.port, task.lang, task.framework) == (spec.port, spec.lang, spec.framework)
        assert task.source == "dataset"
    assert by_id["Tic-Tac-Toe"].port == 8082
    assert "no tests variant" in by_id["SimpleFastPyAPI"].readme
    assert by_id["Tic-Tac-Toe"].readme.startswith("# Tic-Tac-Toe")
    assert set(by_id["GameBackend"].test_extras) == {"pytest.ini", "requirements.txt"}
    assert "requirements.txt" in by_id["GameBackend"].seed_files
    java = by_id["javalin-task-manager"]
    assert java.tests_dir.as_posix().endswith("src/test") and "pom.xml" in java.seed_files
    assert java.manifest.timeouts.startup == 20 and java.manifest.timeouts.tests == 600
    assert by_id["SimpleFastPyAPI"].manifest.test_env["SERVICE_BASE_URL"] == "http://127.0.0.1:8000"
    assert list(errors) == ["eve"] and "golden tests are missing" in errors["eve"]


def test_dataset_missing_golden_tests_is_an_error(dataset: Path) -> None:
    with pytest.raises(TaskError, match="golden tests are missing"):
        load_dataset_task(dataset, "eve")
    with pytest.raises(TaskError, match="not one of the 30"):
        load_dataset_task(dataset, "NotVerified")


def test_cli_tasks_list_json(tasks_dir: Path, dataset: Path) -> None:
    out = rgbridge("tasks", "list", "--json")
    assert out.returncode == 0, out.stderr
    ids = [t["id"] for t in json.loads(out.stdout)["tasks"]]
    assert sorted(ids) == sorted(SHIPPED)
    out = rgbridge("tasks", "list", "--dataset", str(dataset), "--json")
    data = json.loads(out.stdout)
    ports = {t["id"]: t["port"] for t in data["tasks"]}
    assert ports == {"GameBackend": 8080, "SimpleFastPyAPI": 8000, "Tic-Tac-Toe": 8082, "javalin-task-manager": 7000}
    # Java tasks are scorable like Python ones (issue 11).
    assert {t["id"]: (t["lang"], t["scorable"]) for t in data["tasks"]}["javalin-task-manager"] == ("java", True)
    assert all(t["scorable"] for t in data["tasks"])
    assert out.returncode == 1 and any("eve" in e for e in data["errors"])  # broken task reported, not hidden


def test_cli_tasks_list_never_truncates_ids_in_80_columns(dataset: Path) -> None:
    """Issue 9: ids such as `django-rest-framework-crud` were cut to `django-res…` at 80 columns."""
    long_ids = ("django-rest-framework-crud", "rock-paper-scissors-flask")
    for name in long_ids:
        d = dataset / "repo" / name / "tests"
        d.mkdir(parents=True)
        (d / "test_api.py").write_text("def test_x():\n    assert True\n")
        (d.parent / "README.md").write_text(f"# {name}\n")
    env = {**os.environ, "COLUMNS": "80"}
    for args in (("--dataset", str(dataset)), ("--dataset", str(dataset), "--task-dir", str(TASKS_DIR))):
        out = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "tasks", "list", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        lines = out.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines), out.stdout
        for name in (*long_ids, "SimpleFastPyAPI", "javalin-task-manager"):
            assert any(line.split() and line.split()[0] == name for line in lines), (name, out.stdout)
        assert "…" not in out.stdout
    # --dataset alone serves only the checkout (intended, and said so); --task-dir adds the shipped ones
    only = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "tasks", "list", "--dataset", str(dataset)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert "kv-ledger" not in only.stdout and "add --task-dir DIR to serve both" in only.stdout
    both = json.loads(
        rgbridge("tasks", "list", "--dataset", str(dataset), "--task-dir", str(TASKS_DIR), "--json").stdout
    )
    assert {"kv-ledger", "SimpleFastPyAPI"} <= {t["id"] for t in both["tasks"]}


def test_dataset_declares_white_box_and_flags_uncollectable_suites(dataset: Path) -> None:
    blog = dataset / "repo" / "Blog" / "tests"
    blog.mkdir(parents=True)
    (blog.parent / "README.md").write_text("# Blog\n")
    (blog / "conftest.py").write_text("from app.main import app\n")
    (blog / "test_cases.py").write_text("def test_x():\n    assert True\n")
    rbac = dataset / "repo" / "simple-rbac-service" / "tests"
    rbac.mkdir(parents=True)
    (rbac.parent / "README.md").write_text("# rbac\n")
    (rbac / "test_rbac.py").write_text(
        "class Checker:\n    def __init__(self):\n        pass\n\n    def test_a(self):\n        pass\n"
    )
    catalog = Catalog.from_options(dataset_dir=dataset)
    assert catalog.get("Blog").white_box and not catalog.get("Tic-Tac-Toe").white_box
    assert [w.split(":")[0] for w in catalog.warnings] == ["simple-rbac-service"]
    assert "simple-rbac-service" in catalog.tasks  # still served: compat scores it as upstream does


def test_cli_broken_task_one_line_error(tmp_path: Path) -> None:
    make_task(tmp_path, GOOD_TOML.replace("port = 5055", "port = 99999"))
    out = rgbridge("tasks", "show", "demo", "--task-dir", str(tmp_path))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "port" in lines[0]


def test_cli_show_never_prints_tests_or_solution(tasks_dir: Path) -> None:
    for task_id in SHIPPED:
        out = rgbridge("tasks", "show", task_id, "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        golden = tasks_dir / task_id / "tests"
        for test_file in golden.rglob("*.py"):
            body = test_file.read_text()
            # A distinctive line of every golden file must not appear in the output.
            lines = [
                ln.strip() for ln in body.splitlines() if len(ln.strip()) > 40 and ln.strip() not in data["readme"]
            ]
            for line in lines[:5]:
                assert line not in out.stdout
        assert "solution" not in json.dumps(data.get("seed_files"))


def test_version() -> None:
    out = rgbridge("--version")
    assert out.returncode == 0 and out.stdout.startswith("rgbridge ")


def test_cli_error_text_is_never_rich_markup() -> None:
    """Issue 8: `rgbridge tasks show '[/x]'` crashed with a rich MarkupError instead of an error line."""
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "tasks", "show", "[/x]"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert "MarkupError" not in out.stderr and "Traceback" not in out.stderr
    assert "unknown task '[/x]'" in out.stderr
