"""The Java scoring image, built without a registry like the Python base image.

``rgbridge-java:<recipe hash12>`` is the Python base rootfs (debootstrap minbase, user ``app``,
``/repo``, CA trust, python3 for our probe scripts) plus Debian's JDK 17, Maven 3.8 and the
Maven plugins and JUnit 5 artifacts that Debian packages into ``/usr/share/maven-repo``: enough
to build and test a JDK-only project with no repository reachable. The packages are installed
with ``apt-get`` in a chroot of the extracted base rootfs (the host's Debian mirror, as for
debootstrap), then the tree is imported with ``docker import``; the tarball is cached by recipe.

A writable Maven local repository ``/opt/m2/repository`` (owned by uid 10001) starts as a copy of
Debian's repository (its symlinks point into ``/usr/share/java``); dependency layers add to it.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import docker

from bridge.locations import cache_dir
from bridge.scoring.images.base import (
    APP_GID,
    APP_UID,
    BASE_PATH,
    LABEL_RECIPE,
    base_recipe_hash,
    build_lock,
    build_rootfs,
    chroot,
    ensure_rootfs_image,
    hash12,
    remove_tree,
    rootfs_tar_path,
    run_command,
    say,
)
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE
from bridge.scoring.types import ProgressFn

JAVA_RECIPE_VERSION = "3"
JAVA_REPO = "rgbridge-java"
#: Debian bookworm packages: the JDK, Maven, and the plugins of the default lifecycle (their
#: Debian versions plus the aliases Maven 3.8.7's default bindings ask for), JUnit 5.
JAVA_PACKAGES: tuple[str, ...] = (
    "openjdk-17-jdk-headless",
    "maven",
    "junit5",
    "junit4",
    "libhamcrest-java",
    "libsurefire-java",
    "libmaven-compiler-plugin-java",
    "libmaven-resources-plugin-java",
    "libmaven-jar-plugin-java",
    "libmaven-install-plugin-java",
    "libmaven-clean-plugin-java",
    "libmaven-dependency-plugin-java",
)
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
M2_HOME_DIR = "/opt/m2"
LOCAL_REPO = f"{M2_HOME_DIR}/repository"
DEBIAN_REPO = "/usr/share/maven-repo"
#: Every JVM in a scoring container is sized from the container's memory limit (JDK 17 is
#: cgroup-aware): a third each leaves room for Maven, the forked test JVM and the service.
GLOBAL_SETTINGS = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">\n'
    f"  <localRepository>{LOCAL_REPO}</localRepository>\n"
    "  <interactiveMode>false</interactiveMode>\n"
    "</settings>\n"
)
JVM_OPTIONS = "-XX:MaxRAMPercentage=30 -XX:+UseSerialGC -Xss512k"


def java_recipe_hash() -> str:
    return hash12(
        "java",
        JAVA_RECIPE_VERSION,
        base_recipe_hash(),
        JAVA_PACKAGES,
        JAVA_HOME,
        LOCAL_REPO,
        APP_UID,
        GLOBAL_SETTINGS,
        JVM_OPTIONS,
    )


def java_image_tag() -> str:
    return f"{JAVA_REPO}:{java_recipe_hash()}"


def _java_changes(recipe: str) -> list[str]:
    return [
        f"ENV PATH={BASE_PATH}",
        f"ENV JAVA_HOME={JAVA_HOME}",
        "ENV LANG=C.UTF-8",
        f'ENV MAVEN_OPTS="{JVM_OPTIONS}"',
        "WORKDIR /repo",
        'CMD ["/bin/bash"]',
        f"LABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}=java {LABEL_RECIPE}={recipe}",
    ]


def _build_java_rootfs(base_tar: Path, dest_tar: Path, progress: ProgressFn | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="rootfs-java-", dir=cache_dir()))
    root = work / "root"
    root.mkdir()
    proc = root / "proc"
    try:
        say(progress, "extracting the base rootfs")
        run_command(
            ["tar", "--numeric-owner", "-xpf", str(base_tar), "-C", str(root)], timeout=600, what="untar base rootfs"
        )
        resolv = root / "etc/resolv.conf"
        saved = resolv.read_bytes() if resolv.is_file() and not resolv.is_symlink() else None
        if resolv.is_symlink():
            resolv.unlink()
        resolv.write_bytes(Path("/etc/resolv.conf").read_bytes())
        proc.mkdir(exist_ok=True)
        # ca-certificates-java runs java in its postinst, and java needs /proc.
        subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True, timeout=30)
        try:
            say(progress, "apt-get install: JDK 17, Maven and Debian's Maven repository")
            chroot(root, "apt-get", "update", progress=progress)
            chroot(
                root,
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "--no-install-recommends",
                *JAVA_PACKAGES,
                progress=progress,
            )
            chroot(root, "apt-get", "clean")
        finally:
            subprocess.run(["umount", "-l", str(proc)], check=False, capture_output=True, timeout=30)
        chroot(root, "mkdir", "-p", LOCAL_REPO)
        chroot(root, "cp", "-a", f"{DEBIAN_REPO}/.", f"{LOCAL_REPO}/")
        # Debian's repository links its jars relatively (``../../java/x.jar`` from the repo's
        # parent): the same link beside the copy keeps them resolving.
        chroot(root, "ln", "-s", "/usr/share/java", f"{M2_HOME_DIR}/java")
        chroot(root, "chown", "-R", f"{APP_UID}:{APP_GID}", M2_HOME_DIR)
        # Plain `mvn` (an agent's start.sh, upstream's flow) must find the shared local repo.
        (root / "etc/maven/settings.xml").write_text(GLOBAL_SETTINGS, encoding="utf-8")
        if saved is not None:
            resolv.write_bytes(saved)
        else:
            resolv.unlink()
        for child in (root / "var/lib/apt/lists").glob("*"):
            if child.is_file():
                child.unlink()
        (root / "etc/rgbridge-release").write_text(f"recipe={java_recipe_hash()}\nkind=java\n")
        say(progress, "packing the Java rootfs")
        partial = dest_tar.with_suffix(".partial")
        run_command(
            ["tar", "--numeric-owner", "--one-file-system", "-C", str(root), "-cf", str(partial), "."],
            timeout=900,
            what="tar java rootfs",
        )
        partial.replace(dest_tar)
    finally:
        remove_tree(work)


def _java_tar(dest: Path, progress: ProgressFn | None) -> None:
    """The Java rootfs: the base rootfs (built first if its tarball is not cached) plus the JDK."""
    base_recipe = base_recipe_hash()
    base_tar = rootfs_tar_path("base", base_recipe)
    with build_lock(f"base-{base_recipe}"):
        if not base_tar.is_file():
            base_tar.parent.mkdir(parents=True, exist_ok=True)
            build_rootfs(base_tar, progress)
    _build_java_rootfs(base_tar, dest, progress)


def ensure_java_image(client: docker.DockerClient, *, progress: ProgressFn | None = None, force: bool = False) -> str:
    """Tag of the Java image, building it (rootfs cached under the cache dir) if missing."""
    recipe = java_recipe_hash()
    return ensure_rootfs_image(
        client,
        kind="java",
        repo=JAVA_REPO,
        recipe=recipe,
        make_tar=_java_tar,
        changes=_java_changes(recipe),
        progress=progress,
        force=force,
    )
