"""The bridge's exact version, as recordings and run reports carry it (`bridge_version`): the
package version, plus the commit of the source checkout it runs from when there is one
(`0.4.0+g1a2b3c4`, `.dirty` with uncommitted changes), so two builds of one release differ."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from bridge import __version__


@functools.cache
def exact_version() -> str:
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / ".git").exists():
        return __version__  # an installed wheel: the release is the version
    # Our own checkout (never a recording's store): its git config is the user's, not untrusted input.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "describe", "--always", "--dirty", "--abbrev=10", "--match", "v*"],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return __version__
    described = out.stdout.strip()
    if out.returncode != 0 or not described:
        return __version__
    commit, dirty = described.removesuffix("-dirty"), described.endswith("-dirty")
    commit = commit.rsplit("-g", 1)[-1]
    return f"{__version__}+g{commit}" + (".dirty" if dirty else "")
