"""The disk: what the bridge keeps (package caches, usage books, the budget, the inventory).

The bottom of the images wing: it imports nothing from ``base/`` or ``sets/`` (the names it reads
on the engine are in ``labels``). Everything outside this package imports from here."""

from __future__ import annotations

from bridge.scoring.images.disk.budget import (
    BUDGET_ENV,
    DEFAULT_SET_BYTES,
    Budget,
    DiskBudgetError,
    apply_budget_option,
    data_root,
    format_size,
    free_bytes,
    make_room,
    parse_age,
    parse_size,
    prune,
    resolve_budget,
    room_ahead,
    set_estimate,
)
from bridge.scoring.images.disk.inventory import (
    Inventory,
    KeptItem,
    age_epoch,
    kept_inventory,
    list_images,
    remove_holder,
    remove_images,
)
from bridge.scoring.images.disk.labels import (
    DEPS_REPO,
    HOLDER_KIND,
    HOLDER_NAME,
    LABEL_DEPS_TAG,
    SEED_KIND,
    VOLUME_KIND,
)
from bridge.scoring.images.disk.pkgcache import (
    WheelCache,
    cache_limit_bytes,
    evict_lru,
    maven_cache_root,
    maven_version_dirs,
    sha256_file,
    touch,
)
from bridge.scoring.images.disk.usage import books_dir, evictions, hold, holding, lease

__all__ = [
    "BUDGET_ENV",
    "DEFAULT_SET_BYTES",
    "DEPS_REPO",
    "HOLDER_KIND",
    "HOLDER_NAME",
    "LABEL_DEPS_TAG",
    "SEED_KIND",
    "VOLUME_KIND",
    "Budget",
    "DiskBudgetError",
    "Inventory",
    "KeptItem",
    "WheelCache",
    "age_epoch",
    "apply_budget_option",
    "books_dir",
    "cache_limit_bytes",
    "data_root",
    "evict_lru",
    "evictions",
    "format_size",
    "free_bytes",
    "hold",
    "holding",
    "kept_inventory",
    "lease",
    "list_images",
    "make_room",
    "maven_cache_root",
    "maven_version_dirs",
    "parse_age",
    "parse_size",
    "prune",
    "remove_holder",
    "remove_images",
    "resolve_budget",
    "room_ahead",
    "set_estimate",
    "sha256_file",
    "touch",
]
