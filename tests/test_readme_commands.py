"""The README cannot drift from the CLI (issue 24, item 5).

Every ```bash block of the README is checked line by line, and so is every inline `rgbridge ...`
code span of its prose:
* `rgbridge VERB ...`: `rgbridge VERB --help` runs, and each `--option` the line names exists for
  that verb; a `[--opt a|b]` lists only real choices; a `[--opt VALUE]` with a literal value
  states the default `--help` states. Cheap commands with no placeholder (`tasks list`, `tasks
  show ID`, `plan ID`) run for real, optional `[...]` parts left out.
* `bash scripts/X.sh`: the script exists and parses (`bash -n`); `pip install -e '.[extra]'`:
  the extra exists in pyproject.toml.
* anything else needs external resources (a network clone, apt, a Ray cluster) and must be
  marked: an HTML comment `<!-- readme-test: external -->` on the line before its block. Such a
  block's `rgbridge` lines are still checked against `--help`.
The README's table of default folders must agree with each verb's `--help` as well.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
MARKER = "<!-- readme-test: external -->"
RUN_FOR_REAL = {("tasks", "list"), ("tasks", "show"), ("plan",)}
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_ENV_PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")  # `KEY=... rgbridge run ...`
_PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_:]+\b|~|path/|\.\.\.|<")


def bash_blocks(text: str) -> Iterator[tuple[int, bool, list[str]]]:
    """(line number, marked external, lines) of every ```bash block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            external = i > 0 and lines[i - 1].strip() == MARKER
            start, body = i + 1, []
            i += 1
            head = -1  # the line a `\\`-continued command started on: it is checked as one line
            while i < len(lines) and lines[i].strip() != "```":
                if head >= 0 and body[head].rstrip().endswith("\\"):
                    body[head] = body[head].rstrip()[:-1].rstrip() + " " + lines[i].strip()
                    body.append("")  # keeps the line numbers of what follows
                else:
                    head = len(body)
                    body.append(lines[i])
                i += 1
            yield start + 1, external, body
        i += 1


def rgbridge_commands() -> list[tuple[str, str]]:
    """(where, command line) of every rgbridge command in blocks and inline code spans."""
    found = []
    for start, _, body in bash_blocks(README):
        for k, raw in enumerate(body):
            line = _ENV_PREFIX.sub("", raw.strip())
            if line.startswith("rgbridge "):
                found.append((f"README.md:{start + k}", line))
    for m in re.finditer(r"`(rgbridge [^`]+)`", README):
        found.append((f"README.md:{README.count(chr(10), 0, m.start()) + 1}", m.group(1)))
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def resolve(line: str) -> tuple[list[str], argparse.ArgumentParser]:
    """The verb path of a command line and its parser (`recordings pack` -> that sub-parser)."""
    parser, verb = build_parser(), []
    for token in line.split()[1:]:
        subs = _subparsers(parser)
        if token not in subs:
            break
        parser, verb = subs[token], [*verb, token]
    return verb, parser


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: a for a in parser._actions for opt in a.option_strings}


def _stated_default(action: argparse.Action) -> str | None:
    m = re.search(r"default:?\s+([^\s,;)]+)", action.help or "")
    return m.group(1) if m else None


COMMANDS = rgbridge_commands()


def test_the_readme_has_commands_to_check() -> None:
    assert len(COMMANDS) > 20 and any(line.startswith("rgbridge evaluate") for _, line in COMMANDS)


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_each_named_option_exists(where: str, line: str) -> None:
    verb, parser = resolve(line)
    assert verb, f"{where}: {line!r} names no rgbridge verb"
    options = _options(parser)
    # options inside a quoted argument (an --agent-cmd template) belong to another program
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)
    for opt in _OPTION.findall(unquoted):
        assert opt in options, f"{where}: `rgbridge {' '.join(verb)}` has no {opt} (README: {line!r})"
    for opt, values in re.findall(r"\[(--[a-z][a-z0-9-]*) ([a-z0-9|]+)\]", line):
        action = options[opt]
        if "|" in values:
            assert action.choices is not None and set(values.split("|")) <= set(action.choices), (where, opt)
        elif (stated := _stated_default(action)) is not None:
            assert stated == values, f"{where}: README shows [{opt} {values}], --help says default {stated}"


def test_every_verb_help_runs(capsys: pytest.CaptureFixture[str]) -> None:
    verbs = sorted({tuple(resolve(line)[0]) for _, line in COMMANDS})
    assert len(verbs) >= 10, verbs  # the README names most verbs: an empty list would check nothing
    for verb in verbs:
        with pytest.raises(SystemExit) as exc:
            main([*verb, "--help"])
        assert exc.value.code == 0, verb
        assert "usage: rgbridge" in capsys.readouterr().out


def test_cheap_commands_run_for_real(capsys: pytest.CaptureFixture[str]) -> None:
    ran = 0
    for where, line in COMMANDS:
        verb, _ = resolve(line)
        if tuple(verb) not in RUN_FOR_REAL:
            continue
        bare = re.sub(r"\s*#.*$", "", re.sub(r"\[[^\]]*\]", "", line)).strip()
        if _PLACEHOLDER.search(bare):
            continue
        assert main(shlex.split(bare)[1:]) == 0, f"{where}: {bare!r} failed: {capsys.readouterr().err}"
        ran += 1
    assert ran >= 3


def test_other_lines_exist_or_are_marked_external() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    scripts: set[str] = set()
    for start, external, body in bash_blocks(README):
        for k, raw in enumerate(body):
            line = _ENV_PREFIX.sub("", raw.strip())
            where = f"README.md:{start + k}"
            if not line or line.startswith("#") or line.startswith("rgbridge "):
                continue
            if line.startswith("bash scripts/"):
                script = REPO / shlex.split(line)[1]
                scripts.add(shlex.split(line)[1])
                assert script.is_file(), f"{where}: {script} missing"
                assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0, where
            elif m := re.search(r"pip install -e '\.\[([a-z,-]+)\]'", line):
                assert set(m.group(1).split(",")) <= set(extras), f"{where}: unknown extra in {line!r}"
            else:
                assert external, f"{where}: {line!r} is not checkable: mark its block with {MARKER}"
    assert {"scripts/demo.sh", "scripts/test.sh"} <= scripts, scripts  # the two README commands were checked


def test_default_folders_table_agrees_with_help() -> None:
    rows = re.findall(r"^\| [^|]+ \| `(--[a-z-]+) ([A-Z]+)` \| `\w+` \| (.+?) \|$", README, flags=re.M)
    assert rows, "the README's default-folders table was not found"

    def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
        yield path
        for name, sub in _subparsers(parser).items():
            yield from parsers(sub, (*path, name))

    for flag, metavar, default in rows:
        spans = re.findall(r"`([^`]+)`", default) or [default]
        checked = 0
        for path in parsers(build_parser()):
            _, parser = resolve("rgbridge " + " ".join(path))
            action = _options(parser).get(flag)
            if action is None or not path or "(no default" in (action.help or ""):
                continue
            if action.metavar not in (None, metavar):  # the same flag for something else (`run --tasks ID`)
                continue
            checked += 1
            expected = dict(re.findall(r"`rgbridge ([a-z -]+)`: `([^`]+)`", default)).get(" ".join(path), spans[0])
            assert expected in (action.help or ""), (
                f"`rgbridge {' '.join(path)} {flag}` help {action.help!r} does not state the README default {expected}"
            )
        assert checked, flag
