"""The disk budget: what grows with the number of dependency sets fits it, least recently used first.

Python sets in volumes or layers, Java layers, the package and Maven caches and staged archives
fit ``RGBRIDGE_DISK_BUDGET`` (``--disk-budget``); least-recently-used sets are evicted first.

``make_room`` runs before a new set is built: under this engine's books lock (usage.py) it takes
the inventory (inventory.py), and while the kept total plus one more set would pass the budget
it removes the least recently used set that no container and no score uses (a lease held by any
process keeps a set), then stale staged archives, then trims the package caches; sets other
builds are making at that moment count as one whole set each. What cannot be
freed (everything in use) is reported, never waited for, so the disk high-water mark stays
within the budget plus the sets in flight. A budget smaller than one set is an error.

The default budget is half of what the bridge could ever hold on the file system of the
engine's data root (its kept total plus the free space there), so it does not shrink as the
bridge's own sets fill the disk. Fixed things (base, tester and Java images, their rootfs) are
listed by ``rgbridge cache stats`` but not counted.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.disk.inventory import (
    CACHE_KINDS,
    STAGED_KIND,
    STAGED_STALE_SECONDS,
    Inventory,
    KeptItem,
    kept_inventory,
    remove_set,
)
from bridge.scoring.images.disk.usage import books_dir, books_lock, exclusive, forget, log_eviction
from bridge.scoring.types import ProgressFn

BUDGET_ENV = "RGBRIDGE_DISK_BUDGET"
#: what one set is assumed to weigh before any set of that kind was measured here
DEFAULT_SET_BYTES = {"python-set": 120_000_000, "python-layer": 120_000_000, "java-layer": 300_000_000}
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class DiskBudgetError(ScoringError):
    """The disk budget cannot hold what the bridge needs (e.g. smaller than one set)."""


def parse_size(text: str) -> int:
    """``20G``, ``500M``, ``1.5GiB``, ``800MB``, ``1048576`` (bytes) -> bytes (binary units);
    ``0``/``none``/``unlimited`` -> 0 (no budget)."""
    raw = text.strip()
    if raw.lower() in ("0", "none", "off", "unlimited"):
        return 0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTkmgt]?)(?:i?[Bb])?", raw)
    if not m:
        raise ScoringError(f"not a size: {text!r} (use e.g. 20G, 500M, 1.5G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` -> seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text.strip().lower())
    if not m:
        raise ScoringError(f"not an age: {text!r} (use e.g. 7d, 12h, 30m)")
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def format_size(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if abs(n) < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}G"  # pragma: no cover


def apply_budget_option(value: str | None) -> None:
    """The one helper every verb with ``--disk-budget`` calls (evaluate, serve, run): checks the
    size and exports it as ``RGBRIDGE_DISK_BUDGET``, so every build of this process (sessions,
    rescoring, Ray jobs it starts) keeps to it. None leaves the environment alone."""
    if value is None:
        return
    parse_size(value)
    os.environ[BUDGET_ENV] = value.strip()


def data_root(client: docker.DockerClient) -> Path:
    """Where the engine keeps images and volumes, when that folder is on this host; else the
    bridge's cache folder (a remote engine: its disk cannot be seen from here)."""
    try:
        root = Path(str(client.info().get("DockerRootDir") or ""))
    except DockerException:
        root = Path()
    return root if str(root) not in ("", ".") and root.is_dir() else cache_dir()


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class Budget:
    bytes: int  # 0 = none
    source: str  # "RGBRIDGE_DISK_BUDGET" or how the default was derived

    def describe(self) -> str:
        return "none" if self.bytes <= 0 else f"{format_size(self.bytes)} ({self.source})"


def resolve_budget(client: docker.DockerClient, kept_bytes: int, *, path: Path | None = None) -> Budget:
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if raw:
        return Budget(parse_size(raw), BUDGET_ENV)
    where = path or data_root(client)
    return Budget((kept_bytes + free_bytes(where)) // 2, f"default: half of kept + free space on {where}")


#: the share of kept sets a new set's reserved room is at least as large as
RESERVE_QUANTILE = 0.9


def set_estimate(inventory: Inventory, kind: str, *, quantile: float = 0.5) -> int:
    """What the next set of ``kind`` will weigh: the median of those kept (or another quantile
    of their sizes), else a default."""
    sizes = sorted(i.bytes for i in inventory.items if i.kind == kind and i.bytes > 0)
    if not sizes:
        return DEFAULT_SET_BYTES.get(kind, DEFAULT_SET_BYTES["python-set"])
    if quantile == 0.5:
        return int(statistics.median(sizes))
    return sizes[min(len(sizes) - 1, int(quantile * len(sizes)))]


@dataclass
class RoomReport:
    budget: Budget
    kept_before: int
    kept_after: int
    evicted: list[KeptItem]
    #: bytes over budget that nothing could free (all in use)
    short: int = 0


def make_room(
    client: docker.DockerClient,
    *,
    kind: str = "python-set",
    progress: ProgressFn | None = None,
    reason: str = "new set",
) -> RoomReport:
    """Evict least-recently-used sets (then stale staged archives, then package-cache entries)
    until one more set of ``kind`` fits the budget. Raises DiskBudgetError when the budget is
    smaller than one set."""
    books = books_dir(client)
    with books_lock(books):
        inv = kept_inventory(client)
        before = inv.budgeted_bytes
        budget = resolve_budget(client, before)
        need = set_estimate(inv, kind)
        if budget.bytes <= 0:
            return RoomReport(budget, before, before, [])
        if need > budget.bytes:
            raise DiskBudgetError(
                f"disk budget {format_size(budget.bytes)} is smaller than one dependency set (~{format_size(need)}): "
                f"raise {BUDGET_ENV} or --disk-budget"
            )
        # Room is made for a large set, not a typical one: sets differ (more packages, bytecode)
        # and with the median a run of larger sets went over budget + one set (bench/scale.py).
        room = min(budget.bytes, max(need, set_estimate(inv, kind, quantile=RESERVE_QUANTILE)))
        return _evict(client, books, inv, budget, room, progress, reason)


def room_ahead(client: docker.DockerClient, sets: int, *, kind: str = "python-set") -> bool:
    """Would ``sets`` more sets of ``kind``, built ahead of their use, fit the budget beside every
    set in use now and one more being built for the score under way? Only sets nobody uses may
    be evicted for them, so a set prepared ahead never pushes out one in use, and (held until
    its score) is never evicted before it is used. No budget: always."""
    with books_lock(books_dir(client)):
        inv = kept_inventory(client)
        budget = resolve_budget(client, inv.budgeted_bytes)
        if budget.bytes <= 0:
            return True
        room = max(set_estimate(inv, kind), set_estimate(inv, kind, quantile=RESERVE_QUANTILE))
        unused = sum(i.bytes for i in inv.sets() if not i.in_use and not i.building)
        kept = inv.budgeted_bytes - unused + sum(max(0, room - i.bytes) for i in inv.items if i.building)
        return kept + room * (sets + 1) <= budget.bytes


def prune(
    client: docker.DockerClient,
    *,
    max_bytes: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
) -> RoomReport:
    """``rgbridge cache prune``: remove sets unused for ``older_than`` seconds and/or the least
    recently used ones until the kept total is at most ``max_bytes``; ``dry_run`` only says
    what would go. Sets in use are never removed."""
    books = books_dir(client)
    with books_lock(books):
        inv = kept_inventory(client)
        before = inv.budgeted_bytes
        now = time.time()
        total = before
        chosen: list[KeptItem] = []
        for item in sorted(inv.sets(), key=lambda i: i.last_used):
            if item.in_use:
                continue
            too_old = older_than is not None and now - item.last_used >= older_than
            too_big = max_bytes is not None and total > max_bytes
            if too_old or too_big:
                chosen.append(item)
                total -= item.bytes
        budget = Budget(max_bytes or 0, "--max-size")
        if dry_run:
            return RoomReport(budget, before, total, chosen)
        evicted = [item for item in chosen if _remove(client, books, item, "prune")]
        report = RoomReport(budget, before, before - sum(i.bytes for i in evicted), evicted)
        if max_bytes is not None and report.kept_after > max_bytes:
            report.kept_after -= _trim_caches(inv, report.kept_after - max_bytes)
        return report


def _remove(client: docker.DockerClient, books: Path, item: KeptItem, reason: str) -> bool:
    with exclusive(books, item.name) as ours:
        if not ours or not remove_set(client, item):
            return False
        forget(books, item.name)
        log_eviction(books, item.name, item.bytes, reason)
        return True


def _evict(
    client: docker.DockerClient,
    books: Path,
    inv: Inventory,
    budget: Budget,
    need: int,
    progress: ProgressFn | None,
    reason: str,
) -> RoomReport:
    before = inv.budgeted_bytes
    # sets other builds are making now will grow to about one set each: their room is reserved
    total = before + sum(max(0, need - i.bytes) for i in inv.items if i.building)
    evicted: list[KeptItem] = []
    for item in sorted(inv.sets(), key=lambda i: i.last_used):
        if total + need <= budget.bytes:
            break
        if not item.in_use and _remove(client, books, item, f"budget ({reason})"):
            evicted.append(item)
            total -= item.bytes
    now = time.time()
    for item in inv.items:
        if total + need > budget.bytes and item.kind == STAGED_KIND and now - item.last_used > STAGED_STALE_SECONDS:
            shutil.rmtree(item.path, ignore_errors=True)
            total -= item.bytes
    if total + need > budget.bytes:
        total -= _trim_caches(inv, total + need - budget.bytes)
    short = max(0, total + need - budget.bytes)
    if progress is not None and evicted:
        progress(f"disk budget {format_size(budget.bytes)}: evicted {len(evicted)} unused set(s)")
    if progress is not None and short:
        progress(f"disk budget {format_size(budget.bytes)}: {format_size(short)} over, the rest is in use")
    return RoomReport(budget, before, total, evicted, short)


def _trim_caches(inv: Inventory, over: int) -> int:
    """Trim the package caches (least recently used entries first) by about ``over`` bytes;
    returns what was freed."""
    from bridge.scoring.images.disk.pkgcache import WheelCache, evict_lru, maven_version_dirs

    freed = 0
    for item in sorted((i for i in inv.items if i.kind in CACHE_KINDS), key=lambda i: i.last_used):
        if freed >= over:
            break
        root = Path(item.path)
        units = maven_version_dirs(root) if item.kind == "maven-cache" else WheelCache(root).units()
        sizes_before = item.bytes
        gone = evict_lru(units, max(1, sizes_before - (over - freed)))
        if gone:
            freed += min(sizes_before, over - freed)
    return freed
