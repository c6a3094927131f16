"""The task model: a `task.toml` manifest, the README the agent sees, golden tests, a solution.

Loading validates everything up front and raises one TaskError naming the file and the field,
so a task is either fully loaded or not loaded at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bridge.errors import TaskError

#: Task-root files the golden tests rely on (upstream W3 drops them; strict carries them).
TEST_EXTRA_NAMES = ("pytest.ini", "requirements.txt", "conftest.py", "setup.cfg", "tox.ini")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Timeouts(BaseModel):
    """Wall-clock limits in seconds; `session` is the working-time limit of a session (0 = none)."""

    model_config = ConfigDict(extra="forbid")

    build: int = Field(600, ge=1, le=7200)
    startup: int = Field(15, ge=1, le=600)
    tests: int = Field(300, ge=1, le=7200)
    session: int = Field(0, ge=0, le=7 * 24 * 3600)


class Seed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    """The contents of `task.toml`."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str = Field(min_length=1, max_length=200)
    lang: Literal["python", "java"]
    framework: str = Field(min_length=1, max_length=64)
    port: int = Field(ge=1, le=65535)
    difficulty: Literal["easy", "medium", "hard", "unrated"] = "unrated"
    version: str = Field("1.0.0", min_length=1, max_length=32)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    seed: Seed = Field(default_factory=Seed)
    test_env: dict[str, str] = Field(default_factory=dict)
    #: the golden suite imports the agent's code (`import app...`) instead of only calling the
    #: service over HTTP: strict then runs it with the agent's code importable (docs/strict-rules.md)
    white_box: bool = False

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not TASK_ID_RE.match(value):
            raise ValueError("must match [A-Za-z0-9][A-Za-z0-9_.-]* (at most 128 characters)")
        return value

    @field_validator("test_env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME_RE.match(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return value


class Task(BaseModel):
    """A loaded, validated task. Paths are absolute; golden files stay outside any workspace."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    manifest: Manifest
    root: Path
    readme_path: Path
    tests_dir: Path
    solution_dir: Path | None = None
    #: files copied into the workspace besides the README: workspace name -> source path
    seed_files: dict[str, Path] = Field(default_factory=dict)
    #: task-root files the golden tests need (e.g. pytest.ini, requirements.txt): name -> path
    test_extras: dict[str, Path] = Field(default_factory=dict)
    source: Literal["native", "dataset"] = "native"
    content_hash: str = ""

    # Convenience accessors, so callers do not reach into the manifest everywhere.
    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def port(self) -> int:
        return self.manifest.port

    @property
    def lang(self) -> str:
        return self.manifest.lang

    @property
    def framework(self) -> str:
        return self.manifest.framework

    @property
    def readme(self) -> str:
        return self.readme_path.read_text(encoding="utf-8", errors="replace")

    def test_environment(self) -> dict[str, str]:
        """Environment for the golden tests: the manifest's plus the standard service variables."""
        env = {
            "SERVICE_BASE_URL": f"http://localhost:{self.port}",
            "SERVICE_PORT": str(self.port),
            "PORT": str(self.port),
        }
        env.update(self.manifest.test_env)
        return env

    @property
    def white_box(self) -> bool:
        return self.manifest.white_box

    def summary(self) -> dict[str, object]:
        m = self.manifest
        return {
            "id": m.id,
            "title": m.title,
            "lang": m.lang,
            "framework": m.framework,
            "port": m.port,
            "difficulty": m.difficulty,
            "version": m.version,
            "source": self.source,
            "content_hash": self.content_hash,
        }


def _describe_validation_error(path: Path, error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(root)"
    kind = first["type"]
    if kind == "missing":
        return f"{path}: field '{field}' is required"
    if kind == "extra_forbidden":
        return f"{path}: unknown field '{field}'"
    value = first.get("input")
    shown = f" (got {value!r})" if value is not None and not isinstance(value, dict) else ""
    return f"{path}: field '{field}': {first['msg']}{shown}"


def parse_manifest(path: Path) -> Manifest:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"{path}: task.toml not found") from None
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: invalid TOML: {exc}") from None
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(_describe_validation_error(path, exc)) from None


def _iter_tree(root: Path) -> list[Path]:
    return sorted(
        (p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"),
        key=lambda p: p.relative_to(root).as_posix(),
    )


def compute_task_hash(manifest: Manifest, readme: Path, tests_dir: Path, extras: dict[str, Path]) -> str:
    """Content hash over manifest, README, golden tests and test extras (not the solution).

    Remembered by the files' stat signatures (bridge/tasks/statcache.py): loading a catalog while a
    session is open then opens no golden file."""
    from bridge.tasks.statcache import remembered

    dump = manifest.model_dump(mode="json")
    if not dump.get("white_box"):
        dump.pop("white_box", None)  # added later: leaves the hashes of existing tasks unchanged
    files = [readme, *_iter_tree(tests_dir), *extras.values()]
    extra = json.dumps([dump, sorted(extras)], sort_keys=True)
    return remembered("task-hash", extra, files, lambda: _task_hash(dump, readme, tests_dir, extras))


def _task_hash(dump: dict[str, object], readme: Path, tests_dir: Path, extras: dict[str, Path]) -> str:
    h = hashlib.sha256()
    h.update(b"manifest\0" + json.dumps(dump, sort_keys=True).encode())
    h.update(b"\0readme\0" + readme.read_bytes())
    for file in _iter_tree(tests_dir):
        rel = file.relative_to(tests_dir).as_posix()
        h.update(b"\0test\0" + rel.encode() + b"\0" + hashlib.sha256(file.read_bytes()).digest())
    for name in sorted(extras):
        h.update(b"\0extra\0" + name.encode() + b"\0" + hashlib.sha256(extras[name].read_bytes()).digest())
    return "sha256:" + h.hexdigest()


def has_test_files(tests_dir: Path) -> bool:
    """True when the folder holds at least one pytest or JUnit test source file."""
    return any(tests_dir.rglob("test_*.py")) or any(tests_dir.rglob("*_test.py")) or any(tests_dir.rglob("*Test*.java"))


def _inside(child: Path, parent: Path) -> bool:
    return child.resolve().is_relative_to(parent.resolve())


def load_task(task_dir: Path) -> Task:
    """Load and validate a native task folder."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise TaskError(f"{task_dir}: not a task folder")
    manifest_path = task_dir / "task.toml"
    manifest = parse_manifest(manifest_path)
    readme = task_dir / "README.md"
    if not readme.is_file():
        raise TaskError(f"{readme}: README.md is missing")
    tests_dir = task_dir / "tests"
    if not tests_dir.is_dir() or not has_test_files(tests_dir):
        raise TaskError(f"{tests_dir}: golden tests folder is missing or has no test files")
    seeds: dict[str, Path] = {}
    for index, name in enumerate(manifest.seed.files):
        source = task_dir / name
        if not _inside(source, task_dir) or _inside(source, tests_dir) or _inside(source, task_dir / "solution"):
            raise TaskError(
                f"{manifest_path}: field 'seed.files.{index}': {name!r} must be inside the task folder and outside tests/ and solution/"
            )
        if not source.is_file():
            raise TaskError(f"{manifest_path}: field 'seed.files.{index}': {name!r} does not exist")
        seeds[Path(name).name if "/" not in name else name] = source
    solution = task_dir / "solution"
    extras = {
        name: (task_dir / name).resolve()
        for name in TEST_EXTRA_NAMES
        if (task_dir / name).is_file() and not (task_dir / name).is_symlink()
    }
    task = Task(
        manifest=manifest,
        root=task_dir.resolve(),
        readme_path=readme.resolve(),
        tests_dir=tests_dir.resolve(),
        solution_dir=solution.resolve() if solution.is_dir() else None,
        seed_files=seeds,
        test_extras=extras,
        source="native",
    )
    task.content_hash = compute_task_hash(manifest, readme, tests_dir, task.test_extras)
    return task
