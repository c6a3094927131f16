"""pom.xml rewrites: upstream's Java 11 -> 17 edit (compat) and strict's test-gate override.

Poms are untrusted XML: size-capped, DOCTYPE/ENTITY refused, parsed with the standard library
(no external entities). strict parses and rewrites the effective inputs Maven reads from the
repo: every `pom.xml` in it (a local parent via `relativePath` is a pom of the repo too).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from bridge.errors import ScoringError

NS = "http://maven.apache.org/POM/4.0.0"
MAX_POM_BYTES = 1_000_000
_DANGEROUS = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
#: Surefire used when the pom names none: the Debian-packaged one, which runs JUnit 5
#: (Maven 3.8.7's default binding, 2.12.4, predates the JUnit Platform).
DEFAULT_SUREFIRE = "2.22.3"
TEST_PLUGINS = ("maven-surefire-plugin", "maven-failsafe-plugin")
#: Surefire parameters that skip, filter or soften golden tests (removed from the pom).
GATE_PARAMETERS = frozenset(
    {
        "skip",
        "skipTests",
        "skipExec",
        "testFailureIgnore",
        "includes",
        "excludes",
        "includesFile",
        "excludesFile",
        "test",
        "groups",
        "excludedGroups",
        "dependenciesToScan",
        "testSourceDirectory",
        "testClassesDirectory",
        "reportsDirectory",
        "skipAfterFailureCount",
        "rerunFailingTestsCount",
        "failIfNoSpecifiedTests",
        "runOrder",
        "classpathDependencyExcludes",
        "additionalClasspathElements",
        "testNGArtifactName",
        "junitArtifactName",
        "properties",
        "suiteXmlFiles",
        "parallel",
        "forkCount",
        "reuseForks",
        "forkedProcessExitTimeoutInSeconds",
        "shutdown",
    }
)
#: User properties strict pins on the command line (they beat pom properties).
FORCED_PROPERTIES: dict[str, str] = {
    "skipTests": "false",
    "maven.test.skip": "false",
    "maven.test.skip.exec": "false",
    "maven.test.failure.ignore": "false",
    "surefire.skipAfterFailureCount": "0",
    "surefire.rerunFailingTestsCount": "0",
    "failIfNoTests": "false",
    "maven.main.skip": "false",
    "skip": "false",
}
_GATE_PROPERTY = re.compile(
    r"^(skip.*|maven\.test\..*|surefire\..*|test|groups|excludedGroups|"
    r"maven\.main\.skip|failIfNoTests)$"
)

_JAVA11 = (
    (re.compile(r"(<maven\.compiler\.source>\s*)(?:1\.)?11(\s*</maven\.compiler\.source>)"), r"\g<1>17\g<2>"),
    (re.compile(r"(<maven\.compiler\.target>\s*)(?:1\.)?11(\s*</maven\.compiler\.target>)"), r"\g<1>17\g<2>"),
    (re.compile(r"(<source>\s*)(?:1\.)?11(\s*</source>)"), r"\g<1>17\g<2>"),
    (re.compile(r"(<target>\s*)(?:1\.)?11(\s*</target>)"), r"\g<1>17\g<2>"),
)


class PomError(ScoringError):
    """A pom.xml strict refuses to read (too big, DTDs, not XML)."""


def java11_to_17(text: str) -> str:
    """Upstream's `sed` of Dockerfile.java: Java 11 -> 17 in compiler source/target settings."""
    for pattern, repl in _JAVA11:
        text = pattern.sub(repl, text)
    return text


def _q(like: ET.Element, tag: str) -> str:
    """`tag` in the namespace of `like` (poms with and without the POM namespace exist)."""
    return f"{like.tag.split('}', 1)[0]}}}{tag}" if like.tag.startswith("{") else tag


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


@dataclass
class Sanitized:
    text: str
    changes: list[str] = field(default_factory=list)


def _parse(text: str) -> ET.Element:
    if len(text.encode("utf-8", errors="replace")) > MAX_POM_BYTES:
        raise PomError(f"pom.xml is larger than {MAX_POM_BYTES} bytes")
    if _DANGEROUS.search(text):
        raise PomError("pom.xml contains a DOCTYPE or ENTITY declaration; refused")
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise PomError(f"pom.xml is not well-formed XML: {exc}") from None


def _children(el: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in el if _local(c.tag) == name]


def _strip_config(config: ET.Element, where: str, changes: list[str]) -> None:
    for child in list(config):
        if _local(child.tag) in GATE_PARAMETERS:
            config.remove(child)
            changes.append(f"{where}: removed <{_local(child.tag)}>")


def _sanitize_build(build: ET.Element, where: str, changes: list[str], *, root_build: bool) -> None:
    for tag in ("testSourceDirectory", "testOutputDirectory", "directory", "outputDirectory"):
        for el in _children(build, tag):
            build.remove(el)
            changes.append(f"{where}: removed <{tag}>")
    containers = [build, *_children(build, "pluginManagement")]
    seen_surefire = False
    for holder in containers:
        for plugins in _children(holder, "plugins"):
            for plugin in _children(plugins, "plugin"):
                ids = _children(plugin, "artifactId")
                artifact = (ids[0].text or "").strip() if ids else ""
                if artifact not in TEST_PLUGINS:
                    continue
                seen_surefire |= artifact == "maven-surefire-plugin" and holder is build
                label = f"{where} {artifact}"
                for config in _children(plugin, "configuration"):
                    _strip_config(config, label, changes)
                for executions in _children(plugin, "executions"):
                    for execution in _children(executions, "execution"):
                        for config in _children(execution, "configuration"):
                            _strip_config(config, f"{label} execution", changes)
                        for phase in _children(execution, "phase"):
                            if (phase.text or "").strip() in ("none", ""):
                                execution.remove(phase)
                                changes.append(f"{label}: execution re-bound to its default phase")
                if artifact == "maven-surefire-plugin" and not _children(plugin, "version"):
                    version = ET.SubElement(plugin, _q(plugin, "version"))
                    version.text = DEFAULT_SUREFIRE
                    changes.append(f"{label}: version {DEFAULT_SUREFIRE} pinned")
    if root_build and not seen_surefire:
        plugins_list = _children(build, "plugins")
        plugins = plugins_list[0] if plugins_list else ET.SubElement(build, _q(build, "plugins"))
        managed = _managed_surefire_version(build)
        plugin = ET.SubElement(plugins, _q(plugins, "plugin"))
        for tag, value in (
            ("groupId", "org.apache.maven.plugins"),
            ("artifactId", "maven-surefire-plugin"),
            ("version", managed or DEFAULT_SUREFIRE),
        ):
            ET.SubElement(plugin, _q(plugin, tag)).text = value
        changes.append(f"{where}: maven-surefire-plugin {managed or DEFAULT_SUREFIRE} declared")


def _managed_surefire_version(build: ET.Element) -> str | None:
    for pm in _children(build, "pluginManagement"):
        for plugins in _children(pm, "plugins"):
            for plugin in _children(plugins, "plugin"):
                ids = _children(plugin, "artifactId")
                versions = _children(plugin, "version")
                if ids and (ids[0].text or "").strip() == "maven-surefire-plugin" and versions:
                    return (versions[0].text or "").strip() or None
    return None


def _sanitize_properties(holder: ET.Element, where: str, changes: list[str]) -> None:
    for props in _children(holder, "properties"):
        for prop in list(props):
            if _GATE_PROPERTY.match(_local(prop.tag)):
                props.remove(prop)
                changes.append(f"{where}: removed property {_local(prop.tag)}")


def sanitize_pom(text: str, *, root: bool = True) -> Sanitized:
    """strict's rewrite: no test gate left in the pom (profiles included), Surefire declared.

    The text is returned unchanged when nothing needed rewriting (so a clean pom keys the same
    dependency layer in both profiles).
    """
    project = _parse(text)
    if _local(project.tag) != "project":
        raise PomError(f"pom.xml root element is <{_local(project.tag)}>, not <project>")
    changes: list[str] = []
    ET.register_namespace("", NS)
    _sanitize_properties(project, "project", changes)
    builds = _children(project, "build")
    if not builds and root:
        builds = [ET.SubElement(project, _q(project, "build"))]
    for build in builds:
        _sanitize_build(build, "build", changes, root_build=root and not _children(project, "parent"))
    for profiles in _children(project, "profiles"):
        for profile in _children(profiles, "profile"):
            _sanitize_properties(profile, "profile", changes)
            for build in _children(profile, "build"):
                _sanitize_build(build, "profile build", changes, root_build=False)
    if not changes:
        return Sanitized(text=text)
    body = ET.tostring(project, encoding="unicode")
    return Sanitized(text='<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n", changes=changes)


def sanitize_repo_poms(repo: Path) -> list[str]:
    """Rewrite every regular `pom.xml` in `repo` (never through a symlink); returns the changes."""
    changes: list[str] = []
    for path in sorted(repo.rglob("pom.xml")):  # rglob does not descend into linked dirs
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(repo).as_posix()
        result = sanitize_pom(path.read_text(encoding="utf-8", errors="replace"), root=rel == "pom.xml")
        if result.changes:
            path.unlink()
            path.write_text(result.text, encoding="utf-8")
            changes.extend(f"{rel}: {c}" for c in result.changes)
    return changes


def forced_property_args() -> list[str]:
    return [f"-D{k}={v}" for k, v in sorted(FORCED_PROPERTIES.items())]
