"""Dependency sets: a repository's requirements installed on a base image, kept as a layer or in a volume.

Both stores are behind one protocol; a set is built in one build container, possibly started
from the closest finished set.

The top of the images wing: imports ``base/`` and ``disk/`` through their faces, never the other
way. Everything outside this package imports from here."""

from __future__ import annotations

from bridge.scoring.images.sets.buildbox import env_prefix, installed_pins
from bridge.scoring.images.sets.closest import CLOSEST_ENV
from bridge.scoring.images.sets.deps import (
    REJECTED_NOTE,
    deps_image_tag,
    deps_scope,
    ensure_deps_image,
    wait_for_cache_fills,
)
from bridge.scoring.images.sets.env_volume import (
    SEED_MARK,
    remove_volume,
    seed_volume,
    seeded_start,
    venv_path,
    volume_for,
    wait_for_compiles,
)
from bridge.scoring.images.sets.layer_export import LayerExportError, export_folder_layer, valid_prefix
from bridge.scoring.images.sets.store import DepSet, DepsImage

__all__ = [
    "CLOSEST_ENV",
    "REJECTED_NOTE",
    "SEED_MARK",
    "DepSet",
    "DepsImage",
    "LayerExportError",
    "deps_image_tag",
    "deps_scope",
    "ensure_deps_image",
    "env_prefix",
    "export_folder_layer",
    "installed_pins",
    "remove_volume",
    "seed_volume",
    "seeded_start",
    "valid_prefix",
    "venv_path",
    "volume_for",
    "wait_for_cache_fills",
    "wait_for_compiles",
]
