"""The task catalog: native task folders plus, optionally, a RepoGenesis dataset checkout."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bridge.errors import TaskError
from bridge.locations import shipped_tasks_dir as default_tasks_dir
from bridge.tasks.dataset import load_dataset
from bridge.tasks.model import Task, load_task
from bridge.tasks.statcache import remembered, tree_files
from bridge.tasks.suite import static_test_ids

__all__ = ["Catalog", "default_tasks_dir"]


def _static_ids(tests_dir: Path) -> dict[str, list[str]]:
    """static_test_ids, remembered by stat (bridge/tasks/statcache.py: no golden file opened)."""
    return remembered("static-test-ids", "", tree_files(tests_dir), lambda: static_test_ids(tests_dir))


@dataclass
class Catalog:
    tasks: dict[str, Task] = field(default_factory=dict)
    #: one line per task that could not be loaded (the catalog never holds half-loaded tasks)
    errors: list[str] = field(default_factory=list)
    #: folder name -> its load error, so asking for a broken task shows why it is broken
    broken: dict[str, str] = field(default_factory=dict)
    #: loaded tasks whose golden suite looks ungradable (read statically at load time; strict
    #: confirms it once, by collecting in the tester, and then reports `task_error`)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_options(cls, tasks_dir: Path | None = None, dataset_dir: Path | None = None) -> Catalog:
        catalog = cls()
        if dataset_dir is None or tasks_dir is not None:
            catalog.add_native_dir(Path(tasks_dir) if tasks_dir else default_tasks_dir())
        if dataset_dir is not None:
            tasks, errors = load_dataset(Path(dataset_dir))
            for task in tasks:
                catalog._add(task)
                if task.lang == "python" and not task.white_box and not any(_static_ids(task.tests_dir).values()):
                    catalog.warnings.append(
                        f"{task.id}: its golden suite has no pytest-collectable test (runner classes or no "
                        "test functions): strict reports task_error for it; see docs/strict-rules.md"
                    )
            catalog.errors.extend(errors.values())
            catalog.broken.update(errors)
        return catalog

    def add_native_dir(self, tasks_dir: Path) -> None:
        if not tasks_dir.is_dir():
            raise TaskError(f"{tasks_dir}: tasks folder does not exist")
        if (tasks_dir / "task.toml").is_file():  # a single task folder was named
            candidates = [tasks_dir]
        else:
            candidates = sorted(p for p in tasks_dir.iterdir() if p.is_dir() and (p / "task.toml").exists())
        for candidate in candidates:
            try:
                self._add(load_task(candidate))
            except TaskError as exc:
                self.errors.append(str(exc))
                self.broken[candidate.name] = str(exc)

    def _add(self, task: Task) -> None:
        if task.id in self.tasks:
            self.errors.append(f"{task.root}: duplicate task id {task.id!r} (also {self.tasks[task.id].root})")
            return
        self.tasks[task.id] = task

    def get(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            if task_id in self.broken:
                raise TaskError(self.broken[task_id]) from None
            raise TaskError(f"unknown task {task_id!r}{self.did_you_mean(task_id)}") from None

    def close_names(self, name: str) -> list[str]:
        """Task ids close to `name` (difflib), compared without case, `-`, `_`, `.` or spaces, so
        a folder named `TicTacToe` finds `tic-tac-toe`."""
        return close_names(name, self.tasks)

    def did_you_mean(self, name: str) -> str:
        """`; did you mean X?` for an unknown name, else the known ids (a short list) or nothing."""
        close = self.close_names(name)
        if close:
            return f"; did you mean {' or '.join(repr(c) for c in close)}?"
        known = sorted(self.tasks)
        if not known:
            return " (no tasks are loaded)"
        shown = ", ".join(known[:12]) + (f", … ({len(known)} in all)" if len(known) > 12 else "")
        return f" (known: {shown}; `rgbridge tasks list` shows them all)"

    def __iter__(self) -> Iterator[Task]:
        return iter(sorted(self.tasks.values(), key=lambda t: t.id))

    def __len__(self) -> int:
        return len(self.tasks)


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch not in "-_. ")


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` names of `known` close to `name`, best first (difflib on squashed names)."""
    by_squash: dict[str, str] = {}
    for k in sorted(known):
        by_squash.setdefault(_squash(k), k)
    matches = difflib.get_close_matches(_squash(name), list(by_squash), n=n, cutoff=0.6)
    return [by_squash[m] for m in matches]
