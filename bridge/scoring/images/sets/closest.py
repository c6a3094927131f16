"""A never-seen set started from the closest finished set on disk (issue 23).

When a never-seen set's requirement files only add a few lines to those of a set already built
on the same base (same recipe, wheel source and store), the build copies that set into its fresh
volume instead of the base's venv and installs only what is missing; before the set is handed out, a fresh resolution
of its files must pick exactly what the environment holds, else it is built from scratch.

The rule is conservative: every line of the closest set's files is in the new set's files (no
line removed or changed; a changed pin is a removed line), at most ``MAX_ADDED_LINES`` are added
and none of them is an option line; and the check (``delta_check``) resolves the new files from
scratch (``uv pip compile``, the resolver a fresh build uses) and requires the environment to
hold the base's distributions plus exactly those pins, and the first file's choice to be the
same with the second file added (a fresh build installs them in turn). Any doubt means a build
from scratch, never a different environment.

The closest set is only read: mounted read-only into the build container, leased in the disk
books while the build runs (``usage.hold``), so no eviction removes it mid-copy. What is copied
is a whole environment, which on this machine costs more than installing it from cached wheels
(docs/measurements.md): by default (``RGBRIDGE_CLOSEST_SET=auto``) a set starts from the closest
one only when a fresh build would have to fetch or build something the package cache lacks;
``always`` and ``never`` force the choice.

Each finished set of the volume store is remembered in the disk books (``sets/<volume>.json``:
its tag, scope, files and pins) so candidates are found without opening any volume.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import docker

from bridge.scoring.images.base import image_exists, volume_exists
from bridge.scoring.images.disk import books_dir
from bridge.scoring.images.sets.store import DepSet

CLOSEST_ENV = "RGBRIDGE_CLOSEST_SET"
MAX_ADDED_LINES = 3
#: exit status of a delta build whose environment is not what a fresh build would hold
DELTA_DIFFERS = 5
CLOSEST_DIR = "/run/rgbridge/closest"
_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class SetRecord:
    """A finished set of the volume store, as the disk books remember it."""

    volume: str
    tag: str
    scope: str
    files: dict[str, str]
    pins: list[str]


def _records(client: docker.DockerClient) -> Path:
    path = books_dir(client) / "sets"
    path.mkdir(exist_ok=True)
    return path


def remember(client: docker.DockerClient, volume: str, want: DepSet, pins: list[str]) -> None:
    """Record a set accepted into ``volume`` (best effort: a set without a record is only never
    used as a starting point)."""
    record = SetRecord(volume=volume, tag=want.tag, scope=want.scope, files=want.files, pins=sorted(pins))
    with contextlib.suppress(OSError):
        folder = _records(client)
        tmp = folder / f".{_NAME.sub('_', volume)}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(record), sort_keys=True), encoding="utf-8")
        os.replace(tmp, folder / f"{_NAME.sub('_', volume)}.json")


def forget(client: docker.DockerClient, volume: str) -> None:
    with contextlib.suppress(OSError):
        (_records(client) / f"{_NAME.sub('_', volume)}.json").unlink()


def records(client: docker.DockerClient) -> list[SetRecord]:
    out: list[SetRecord] = []
    with contextlib.suppress(OSError):
        for path in sorted(_records(client).glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                data = json.loads(path.read_text(encoding="utf-8"))
                out.append(
                    SetRecord(
                        volume=str(data["volume"]),
                        tag=str(data["tag"]),
                        scope=str(data["scope"]),
                        files={str(k): str(v) for k, v in dict(data["files"]).items()},
                        pins=[str(p) for p in data["pins"]],
                    )
                )
    return out


def added_lines(old: dict[str, str], new: dict[str, str]) -> int | None:
    """How many lines ``new``'s files add to ``old``'s; None unless the files are the same ones
    and every old line is kept, and no added line is an option (``-c``, ``--index-url`` ...)."""
    if set(old) != set(new):
        return None
    added = 0
    for name, text in new.items():
        before, after = set(old[name].splitlines()), set(text.splitlines())
        if not before <= after:
            return None
        extra = after - before
        if any(line.lstrip().startswith("-") for line in extra):
            return None
        added += len(extra)
    return added


def find_closest(client: docker.DockerClient, want: DepSet, *, missing: list[str] | None = None) -> SetRecord | None:
    """The finished set on disk to start ``want`` from, or None (build from the base).

    ``missing``: the candidate's pins the package cache lacks, computed by the caller's cache
    (``auto`` only starts from a set when installing it again would fetch or build something)."""
    mode = os.environ.get(CLOSEST_ENV, "auto").strip().lower()
    if mode == "never" or not want.scope:
        return None
    ranked = []
    for rec in records(client):
        if rec.scope != want.scope or rec.tag == want.tag:
            continue
        n = added_lines(rec.files, want.files)
        if n is not None and 0 < n <= MAX_ADDED_LINES:
            ranked.append((n, rec))
    ranked.sort(key=lambda item: item[0])
    for _n, rec in ranked:
        if not image_exists(client, rec.tag) or not volume_exists(client, rec.volume):
            forget(client, rec.volume)  # evicted or removed since
            continue
        if mode == "always":
            return rec
        from bridge.scoring.images.disk import WheelCache

        lacking = WheelCache().missing(rec.pins)
        if missing is not None:
            missing[:] = lacking
        return rec if lacking else None
    return None


def merged_pins(base: list[str], added: list[str]) -> list[str]:
    """``base`` pins with ``added`` ones replacing those of the same project."""

    def key(pin: str) -> str:
        return re.sub(r"[-_.]+", "-", pin.partition("==")[0]).lower()

    out = {key(p): p for p in base}
    out.update({key(p): p for p in added})
    return sorted(out.values())


# The check runs in the build container with the environment's python: argv = the fresh
# resolutions of the files in turn (1, 1+2, ...), then the environment's freeze, then the folder
# of the base's venv (the seed), whose distributions a fresh build keeps.
_COMPARE = r"""
import glob, importlib.metadata as md, re, sys
def key(line):
    name, _, version = line.strip().partition("==")
    return re.sub(r"[-_.]+", "-", name).lower(), version.split(";")[0].strip()
def read(path):
    return dict(key(x) for x in open(path) if "==" in x and not x.lstrip().startswith(("#", "-")))
*fresh, env, seed = sys.argv[1:]
steps = [read(p) for p in fresh]
for a, b in zip(steps, steps[1:]):
    if any(b.get(k) != v for k, v in a.items()):
        print("RGBRIDGE_DELTA_DIFFERS a later file changes what an earlier one installs"); sys.exit(1)
sites = glob.glob(seed + "/lib/python*/site-packages")
expected = dict(key(f"{d.metadata['Name']}=={d.version}") for d in md.distributions(path=sites))
expected.update(steps[-1])
have = read(env)
if have != expected:
    diff = sorted(set(have.items()) ^ set(expected.items()))[:10]
    print("RGBRIDGE_DELTA_DIFFERS", " ".join(f"{k}=={v}" for k, v in diff)); sys.exit(1)
"""


def delta_check(reqs: list[str], seed: str) -> list[str]:
    """Shell lines the install script (``assets/install_set.sh``, index mode) sources after the
    installs, with its settings and ``UV_CACHE``/``UV_INDEX_ARGS`` in scope: a fresh resolution
    of ``reqs`` in turn must be what the environment holds, else exit ``DELTA_DIFFERS``."""
    uv = (
        '"$RGBRIDGE_TOOLS_DIR/uv" pip compile --python "$(command -v python)" --index-strategy unsafe-best-match'
        ' --find-links "$RGBRIDGE_CACHE_DIR/flat" --cache-dir "$UV_CACHE" "${UV_INDEX_ARGS[@]}"'
        " --no-header --no-annotate --quiet"
    )
    fresh = [f'"$SCRATCH/rgbridge-fresh-{i}.txt"' for i in range(len(reqs))]
    env = '"$SCRATCH/rgbridge-env.txt"'
    lines = ["printf '%s' " + _shell_quote(_COMPARE) + ' > "$BUILD_DIR/compare.py"']
    for i, out in enumerate(fresh):
        files = " ".join(reqs[: i + 1])  # compile takes the files themselves, no -r
        lines.append(f"{uv} {files} -o {out} || exit {DELTA_DIFFERS}")
    lines += [
        f'"$RGBRIDGE_TOOLS_DIR/uv" pip freeze --python "$(command -v python)" > {env} || exit {DELTA_DIFFERS}',
        f'python "$BUILD_DIR/compare.py" {" ".join(fresh)} {env} {seed} || exit {DELTA_DIFFERS}',
        "phase verified",
    ]
    return lines


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
