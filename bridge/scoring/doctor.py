"""`rgbridge doctor` and the pre-flight check before long runs: is the environment able to score?

Each check says what it found and, when something is wrong, the command that fixes it: the
Docker engine answers (and its storage driver), free disk against the disk budget, the scoring
images are present or can be built, the package index is reachable from containers, the Maven
sources of Java tasks exist, the clocks of host and engine agree. ``preflight`` runs them before
`evaluate` (and `run`) and raises ``PreflightError`` listing every error; warnings are printed.
An environment that breaks later, during the run, is classed apart (``runner.infra_reason``).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import docker
from docker.errors import DockerException
from requests import RequestException

from bridge.errors import ScoringError
from bridge.scoring.images.base import BASE_REPO, base_recipe_hash, host_pip_index_settings, image_exists, probe_index
from bridge.scoring.images.disk import data_root, format_size, free_bytes, kept_inventory, resolve_budget, set_estimate
from bridge.scoring.sandbox.docker_client import engine_available, get_client, reset_client

#: the largest tolerated difference between the host's and the engine's clocks
CLOCK_SKEW_SECONDS = 120.0
INDEX_PROBE_SECONDS = 20


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    severity: Literal["error", "warning"] = "error"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PreflightError(ScoringError):
    """The pre-flight found errors; ``checks`` are all the checks run."""

    def __init__(self, checks: list[Check]) -> None:
        bad = [c for c in checks if not c.ok and c.severity == "error"]
        text = "; ".join(f"{c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "") for c in bad)
        super().__init__(f"pre-flight failed: {text}; skip with --no-preflight")
        self.checks = checks


def check_engine() -> tuple[Check, docker.DockerClient | None]:
    ok, reason = engine_available()
    if not ok:
        host = os.environ.get("DOCKER_HOST", "")
        fix = (
            f"start the engine behind DOCKER_HOST={host} or unset DOCKER_HOST"
            if host
            else "start the engine: sudo systemctl start docker (or dockerd &)"
        )
        return Check("engine", False, reason, fix), None
    reset_client()
    return Check("engine", True, reason), get_client()


def check_storage(client: docker.DockerClient) -> Check:
    info = client.info()
    driver = str(info.get("Driver", "?"))
    detail = f"storage driver {driver}, data root {info.get('DockerRootDir', '?')}"
    if driver == "vfs":
        return Check(
            "storage",
            False,
            detail + " (vfs copies every layer whole: slow and large)",
            "configure overlay2 or fuse-overlayfs in /etc/docker/daemon.json",
            "warning",
        )
    return Check("storage", True, detail)


def check_disk(client: docker.DockerClient | None, path: Path | None = None) -> Check:
    """Free space where the engine keeps its data (or ``path``) against one set and the budget."""
    from bridge.locations import cache_dir

    where = path or (data_root(client) if client is not None else cache_dir())
    free = free_bytes(where)
    inv = kept_inventory(client) if client is not None else None
    kept = inv.budgeted_bytes if inv is not None else 0
    one = set_estimate(inv, "python-set") if inv is not None else set_estimate_default()
    budget = resolve_budget(client, kept, path=where) if client is not None else None
    detail = f"{format_size(free)} free on {where}; kept {format_size(kept)}"
    if budget is not None:
        detail += f"; budget {budget.describe()}"
    if free < one:
        return Check(
            "disk",
            False,
            f"disk full: {detail}, less than one dependency set (~{format_size(one)})",
            f"free space on {where}, or: rgbridge cache prune --max-size {format_size(max(0, kept // 2))}",
        )
    if budget is not None and budget.bytes > 0 and budget.bytes - kept > free:
        return Check(
            "disk",
            False,
            f"{detail}: the budget cannot be reached before the disk fills",
            f"--disk-budget {format_size(kept + free * 9 // 10)} (or RGBRIDGE_DISK_BUDGET)",
            "warning",
        )
    return Check("disk", True, detail)


def set_estimate_default() -> int:
    from bridge.scoring.images.disk import DEFAULT_SET_BYTES

    return DEFAULT_SET_BYTES["python-set"]


def check_images(client: docker.DockerClient) -> Check:
    tag = f"{BASE_REPO}:{base_recipe_hash()}"
    if image_exists(client, tag):
        return Check("images", True, f"{tag} present")
    buildable = shutil.which("debootstrap") is not None and os.geteuid() == 0
    if buildable:
        return Check(
            "images",
            True,
            f"{tag} missing; it will be built on first use (about a minute)",
            "rgbridge images build",
            "warning",
        )
    return Check(
        "images",
        False,
        f"{tag} missing and cannot be built here (needs root and debootstrap)",
        "sudo apt-get install debootstrap && sudo rgbridge images build",
    )


def check_index(client: docker.DockerClient) -> Check:
    """pip in a bridge-networked container downloads a small package from the index the host's
    pip settings name (what builds use; bridge/scoring/images/base/host.py)."""
    settings = host_pip_index_settings(fresh=True)
    url = settings.get("PIP_INDEX_URL", "https://pypi.org/simple")
    base = f"{BASE_REPO}:{base_recipe_hash()}"
    if not image_exists(client, base):
        return Check("index", True, "not checked: no base image yet", "rgbridge images build", "warning")
    reachable, log = probe_index(client, base, settings, INDEX_PROBE_SECONDS, fail_fast=True)
    if reachable:
        return Check("index", True, f"containers reach {url}")
    last = next((x.strip() for x in reversed(log.splitlines()) if x.strip()), "no output")[:200]
    return Check(
        "index",
        False,
        f"containers cannot reach the package index {url}: {last}",
        "point PIP_INDEX_URL (or pip config set global.index-url URL) at a reachable index or mirror, "
        "or pass --wheelhouse DIR (builds then install from the host)",
        "warning",
    )


def check_maven() -> Check:
    from bridge.scoring.java.layers import MavenSources

    try:
        sources = MavenSources.from_env()
    except ScoringError as exc:
        return Check("maven", False, str(exc), "fix or unset RGBRIDGE_MAVEN_REPO / RGBRIDGE_MAVEN_SETTINGS")
    if not sources.allows_online() and sources.repo_dir is None:
        return Check(
            "maven",
            True,
            "offline (RGBRIDGE_MAVEN_ONLINE=0): Debian's Maven packages only",
            "Java tasks needing more: --maven-repo DIR or RGBRIDGE_MAVEN_ONLINE=1",
            "warning",
        )
    where = [str(p) for p in (sources.repo_dir, sources.settings) if p] or ["Maven Central (online)"]
    return Check("maven", True, "Java layers resolve from Debian's packages, then " + ", ".join(where))


def check_clock(client: docker.DockerClient | None) -> Check:
    now = time.time()
    if now < 1_704_067_200:  # 2024-01-01: TLS and the result cache's timestamps need a real date
        return Check("clock", False, f"host clock reads {time.ctime(now)}", "sync the clock: timedatectl set-ntp true")
    if client is None:
        return Check("clock", True, "host clock plausible")
    from bridge.scoring.images.disk import age_epoch

    engine = age_epoch(str(client.info().get("SystemTime", "")))
    skew = abs(engine - now) if engine else 0.0
    if skew > CLOCK_SKEW_SECONDS:
        return Check(
            "clock",
            False,
            f"engine and host clocks differ by {skew:.0f}s",
            "sync both clocks: timedatectl set-ntp true",
        )
    return Check("clock", True, f"host and engine agree within {skew:.1f}s")


def run_checks(*, path: Path | None = None, index: bool = True, maven: bool = True) -> list[Check]:
    """Every check (those needing the engine are skipped, and say so, when it does not answer)."""
    engine, client = check_engine()
    checks = [engine]
    if client is not None:
        try:
            checks += [check_storage(client), check_disk(client, path), check_images(client)]
            if index:
                checks.append(check_index(client))
        except (DockerException, RequestException) as exc:
            checks.append(Check("engine", False, f"engine failed during the checks: {exc}", "restart the engine"))
    else:
        checks.append(check_disk(None, path))
    if maven:
        checks.append(check_maven())
    checks.append(check_clock(client))
    return checks


def preflight(*, path: Path | None = None, java: bool = False) -> list[Check]:
    """The checks before a long run; raises PreflightError when any error was found."""
    checks = run_checks(path=path, maven=java)
    if any(not c.ok and c.severity == "error" for c in checks):
        raise PreflightError(checks)
    return checks
