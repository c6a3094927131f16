"""One attempt's Confinement from what the run knows: the attempt's folders, the program it
starts (a CLI binary, or the `command` adapter's template words), the user's `--agent-bind`
paths, and what the bridge protects (its own folders, plus the run's tasks, dataset and run
folder). Nothing is added that the user did not name beyond what the program's path leads to."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from bridge.agents.confine.binds import protected_defaults
from bridge.agents.confine.model import Confinement, Limits, SandboxError
from bridge.agents.confine.needs import minimal, needs_of, needs_of_template


def confinement_for(
    *,
    workspace: Path,
    home: Path,
    tmp: Path,
    program: Sequence[str],
    agent_binds: Sequence[Path] = (),
    protected: Sequence[Path] = (),
    limits: Limits | None = None,
    search_path: str | None = None,
) -> Confinement:
    """`program` is `[binary]` for a CLI adapter or the template's words for `--agent-cmd`
    (before its `{...}` fields are filled); `protected` adds the run's own paths (tasks folders,
    `--dataset`, the run folder, recordings) to the bridge's defaults."""
    path = search_path if search_path is not None else os.environ.get("PATH")
    words = list(program)
    needs = needs_of_template(words, search_path=path) if len(words) > 1 else needs_of(Path(words[0]), search_path=path)
    for bind in agent_binds:
        if not Path(bind).exists():
            raise SandboxError(f"--agent-bind {bind}: no such file or folder")
    return Confinement(
        workspace=workspace,
        home=home,
        tmp=tmp,
        read_only=minimal([*needs, *(Path(os.path.abspath(b)) for b in agent_binds)]),
        protected=(*protected_defaults(), *protected),
        limits=limits or Limits(),
    )
