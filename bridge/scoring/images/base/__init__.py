"""Base images: host facts, the rootfs, the recipe, the base and tester images, build primitives.

The build primitives are those every image of the bridge uses (Docker builds, locks, where wheels
come from).

Imports only the disk wing (``disk/``: the package cache). Everything outside this package
imports from here."""

from __future__ import annotations

from bridge.scoring.images.base import reqfile
from bridge.scoring.images.base.build import (
    LABEL_RECIPE,
    LOG_TAIL_CHARS,
    Background,
    BuildResult,
    DependencyInstallError,
    LayerLoadError,
    build_lock,
    docker_build,
    hash12,
    image_exists,
    layer_diff_id,
    load_layer_image,
    say,
    try_build_lock,
    volume_exists,
)
from bridge.scoring.images.base.host import (
    debian_source,
    host_extra_cas,
    host_pip_index_settings,
    read_pip_index_settings_ahead,
)
from bridge.scoring.images.base.image import (
    OFFICIAL_PYTHON,
    ensure_base_image,
    ensure_rootfs_image,
    official_python_image,
    rootfs_tar_path,
)
from bridge.scoring.images.base.recipe import (
    APP_DIRS,
    APP_GID,
    APP_UID,
    BASE_PATH,
    BASE_REPO,
    base_image_tag,
    base_recipe_hash,
)
from bridge.scoring.images.base.rootfs import Beside, build_rootfs, chroot, remove_tree, run_command
from bridge.scoring.images.base.tester import TESTER_PINS, build_all, ensure_tester_image
from bridge.scoring.images.base.wheelhouse import (
    UnsafeRequirementError,
    check_requirements,
    host_fetch,
    index_reachable_from_containers,
    prepare_wheelhouse,
    probe_index,
    uv_tool,
    wheelhouse_digest,
)

__all__ = [
    "APP_DIRS",
    "APP_GID",
    "APP_UID",
    "BASE_PATH",
    "BASE_REPO",
    "LABEL_RECIPE",
    "LOG_TAIL_CHARS",
    "OFFICIAL_PYTHON",
    "TESTER_PINS",
    "Background",
    "Beside",
    "BuildResult",
    "DependencyInstallError",
    "LayerLoadError",
    "UnsafeRequirementError",
    "base_image_tag",
    "base_recipe_hash",
    "build_all",
    "build_lock",
    "try_build_lock",
    "build_rootfs",
    "check_requirements",
    "chroot",
    "debian_source",
    "docker_build",
    "ensure_base_image",
    "ensure_rootfs_image",
    "ensure_tester_image",
    "hash12",
    "host_extra_cas",
    "host_fetch",
    "host_pip_index_settings",
    "read_pip_index_settings_ahead",
    "image_exists",
    "index_reachable_from_containers",
    "layer_diff_id",
    "load_layer_image",
    "official_python_image",
    "prepare_wheelhouse",
    "probe_index",
    "remove_tree",
    "reqfile",
    "rootfs_tar_path",
    "run_command",
    "say",
    "uv_tool",
    "volume_exists",
    "wheelhouse_digest",
]
