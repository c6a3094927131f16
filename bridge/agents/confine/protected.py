"""What an attempt's agent must never see: the `protected` paths of its Confinement.

The sandbox binds by allow-list (the attempt's workspace, HOME and TMPDIR, the CLI and what it
needs, `--agent-bind` paths); these are the paths a bind must never expose, masked or refused
when one would: every task folder the run could serve (golden tests and solutions), the dataset
checkout, the recordings, the bridge's data home and caches (result store, staged images), the
run folder (other attempts' folders and the reports), and the Docker engine's socket (which can
mount any host path).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from bridge.locations import cache_dir, data_home, shipped_tasks_dir
from bridge.tasks.model import Task

#: the server options that name a task source (bridge/commands/common.py TaskSource.server_args;
#: `--tasks DIR` in the run files of runs before `--task-dir`)
SOURCE_OPTIONS = ("--task-dir", "--tasks", "--dataset")
DEFAULT_DOCKER_SOCKET = Path("/var/run/docker.sock")


def protected_paths(
    server_args: Sequence[str], tasks: Iterable[Task], recordings: Path, output_dir: Path
) -> tuple[Path, ...]:
    """The run's: the task source options its attempts' server gets, the tasks it could serve,
    its recordings and run folder. Absolute, de-duplicated (both as given and resolved: a symlinked folder is protected
    under either name), in a stable order."""
    paths: list[Path] = [p for p in source_of(server_args) if p is not None]
    try:
        paths.append(shipped_tasks_dir())  # the installed package's tasks, served or not
    except RuntimeError:
        pass  # an install without them: nothing there to protect
    for task in tasks:
        paths += [task.root, task.tests_dir, *([task.solution_dir] if task.solution_dir else [])]
        paths += task.test_extras.values()
    paths += [recordings, data_home(), cache_dir(), output_dir, *docker_sockets()]
    return _unique(paths)


def source_of(server_args: Sequence[str]) -> tuple[Path | None, Path | None]:
    """(task folder, dataset) the server options name (the attempt's server serves these)."""
    given = {
        server_args[i]: server_args[i + 1] for i in range(len(server_args) - 1) if server_args[i] in SOURCE_OPTIONS
    }
    folder = given.get("--task-dir") or given.get("--tasks")
    dataset = given.get("--dataset")
    return (Path(folder) if folder else None), (Path(dataset) if dataset else None)


def docker_sockets() -> list[Path]:
    """The engine's unix socket: DOCKER_HOST's when it names one, else the default."""
    host = os.environ.get("DOCKER_HOST", "")
    found = [DEFAULT_DOCKER_SOCKET]
    if host.startswith("unix://"):
        found.append(Path(host[len("unix://") :]))
    return found


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    out: dict[str, Path] = {}
    for path in paths:
        absolute = Path(os.path.abspath(os.path.expanduser(str(path))))
        for candidate in (absolute, Path(os.path.realpath(absolute))):
            out.setdefault(str(candidate), candidate)
    return tuple(out.values())
