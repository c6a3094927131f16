"""Names and labels that mark what the bridge keeps on the engine: one home for builders and inventory.

The builders (sets/) set them and the inventory reads them, so the disk wing needs nothing from
the wings above it."""

from __future__ import annotations

#: the repository of Python dependency sets' tags (a layer image, or the tag on a base image
#: that marks a set kept in a volume as finished)
DEPS_REPO = "rgbridge-deps"
#: the ``rgbridge.kind`` of a set's volume and of a base image's seed volume
VOLUME_KIND = "deps-env"
SEED_KIND = "deps-seed"
#: the volume label naming the set's tag (a seed's: its base image's id)
LABEL_DEPS_TAG = "rgbridge.deps_tag"
#: the long-lived container whose network namespace build containers share (sets/buildnet.py)
HOLDER_NAME = "rgbridge-buildnet"
HOLDER_KIND = "build-net"
