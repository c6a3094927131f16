"""What the base image holds (packages, user, venv, folders, PATH) and the recipe hash in its tag."""

from __future__ import annotations

import hashlib
import os

from bridge.scoring.images.base.build import hash12
from bridge.scoring.images.base.host import debian_source, host_extra_cas

# Bump when the recipe changes in a way the hashed inputs below do not capture.
RECIPE_VERSION = "1"

BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-venv",
    "python3-pip",
    "ca-certificates",
    "curl",
    "procps",
    "netcat-openbsd",
)

APP_USER = "app"
APP_UID = 10001
APP_GID = 10001
VENV = "/opt/venv"
APP_DIRS: tuple[str, ...] = ("/repo", "/tests", "/results")  # owned by APP_UID in the base image
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_PATH = f"{VENV}/bin:{SYSTEM_PATH}"
PIP_DEFAULT_TIMEOUT = 60
BASE_REPO = "rgbridge-base"
#: A word mixed into the base recipe hash, so every image built on the base gets tags of its own:
#: bench/newcomer.sh times a build from nothing on an engine other people's images share.
SALT_ENV = "RGBRIDGE_IMAGE_SALT"


def base_recipe_hash() -> str:
    _, suite = debian_source()
    cas = [(name, hashlib.sha256(pem).hexdigest()) for name, pem in host_extra_cas()]
    salt = os.environ.get(SALT_ENV, "")
    inputs = ("base", RECIPE_VERSION, suite, BASE_PACKAGES, cas, APP_UID, APP_GID, VENV, APP_DIRS, PIP_DEFAULT_TIMEOUT)
    return hash12(*inputs, salt) if salt else hash12(*inputs)  # unsalted: the tags of every release


def base_image_tag() -> str:
    return f"{BASE_REPO}:{base_recipe_hash()}"
