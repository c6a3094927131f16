"""`rgbridge run --prompt upstream|bridge|file`: the upstream template read with `ast` from a
RepoGenesis-layout checkout's generation scripts (tests/fixtures/repogenesis_prompt, synthetic)
and filled as the scripts fill it, from the README-only variant (Java: with its pom); clear
refusals when the checkout lacks them; a user's template; the time limit told; the rendered
prompt kept in the attempt folder and the recording, its template hash in the row."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from bridge.agents.run.prompt import bridge_template, file_template, load_template, read_upstream_template
from bridge.cli import main as rgbridge
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "repogenesis_prompt"
PY_README = (FIXTURE / "repo_readme_verified_python_no_t" / "Blog" / "README.md").read_text()
PY_REQS = (FIXTURE / "repo_readme_verified_python_no_t" / "Blog" / "requirements.txt").read_text()
JAVA_VARIANT = FIXTURE / "repo_readme_verified_java_no_t_with_p" / "javalin-task-manager"

# What the fixture's scripts produce, written out by hand: the f-string filled first, then
# `textwrap.dedent` (a no-op: the README's lines start at column 0) and `.strip()`, as upstream does.
PY_EXPECTED = (
    "Fixture prompt: build the Python service {described} below.\n\n"
    "        README:\n"
    f"        {PY_README}\n\n"
    "        requirements.txt (reference):\n"
    f"        {PY_REQS}\n\n"
    "        Rules:\n"
    "        1. Put one start.sh at the root; it listens on 0.0.0.0 on the README's port.\n"
    "        2. Do not open or peek at any tests directory."
)
JAVA_EXPECTED = (
    "Fixture prompt: build the Java service below with Maven.\n\n"
    "        README:\n"
    f"        {(JAVA_VARIANT / 'README.md').read_text()}\n\n"
    "        POM.xml (reference):\n"
    f"        {(JAVA_VARIANT / 'pom.xml').read_text()}\n\n"
    "        Rules:\n"
    "        1. Put one start.sh at the root; it listens on 0.0.0.0 on the README's port.\n"
    "        2. Do not open or peek at any tests directory."
)


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A copy of the fixture checkout (tests may break it; the scripts' run marker lands here)."""
    target = tmp_path / "RepoGenesis"
    shutil.copytree(FIXTURE, target)
    return target


def show(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = rgbridge(["run", "--show-prompt", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_upstream_prompt_for_a_python_and_a_java_task(checkout: Path, capsys) -> None:
    code, text, err = show(
        capsys, "--prompt", "upstream", "--dataset", str(checkout), "--tasks", "Blog", "--time-limit", "600"
    )
    assert code == 0, err
    assert text == PY_EXPECTED + "\n\nYou have 10 minutes of wall-clock time for this task.\n"
    assert "full README" not in text  # the README-only variant, not repo/<Task>/README.md
    code, text, err = show(
        capsys, "--prompt", "upstream", "--dataset", str(checkout), "--tasks", "javalin-task-manager"
    )
    assert code == 0, err
    assert text == JAVA_EXPECTED + "\n\nYou have 30 minutes of wall-clock time for this task.\n"
    assert not (checkout / "EXECUTED").exists(), "the generation script was executed"


def test_upstream_template_is_parsed_not_run(checkout: Path) -> None:
    piece = read_upstream_template(checkout / "gen_and_eval.py")
    assert piece.dedent and piece.strip
    assert "{readme}" in piece.text and "{requirements}" in piece.text and "{{described}}" in piece.text
    assert "characters" not in piece.text  # the decoy f-string with the README but no start.sh rules
    assert not (checkout / "EXECUTED").exists()
    # the template's hash is the template's, the same for every task and run
    catalog = Catalog.from_options(None, checkout)
    tasks = [catalog.get("Blog"), catalog.get("javalin-task-manager")]
    one = load_template("upstream", prompt_file=None, tasks=tasks)
    assert one.digest == load_template("upstream", prompt_file=None, tasks=tasks).digest
    assert one.digest != bridge_template().digest


def test_upstream_refuses_a_checkout_without_its_pieces(checkout: Path, capsys) -> None:
    (checkout / "gen_and_eval_Java.py").unlink()
    code, _, err = show(capsys, "--prompt", "upstream", "--dataset", str(checkout), "--tasks", "javalin-task-manager")
    assert code == 2 and "gen_and_eval_Java.py is missing" in " ".join(err.split())
    (checkout / "gen_and_eval.py").write_text('PROMPT = f"no template here {1 + 1}"\n')
    code, _, err = show(capsys, "--prompt", "upstream", "--dataset", str(checkout), "--tasks", "Blog")
    assert code == 2 and "holds no prompt template" in " ".join(err.split())
    shutil.copy(FIXTURE / "gen_and_eval.py", checkout / "gen_and_eval.py")
    shutil.rmtree(checkout / "repo_readme_verified_python_no_t" / "Blog")
    code, _, err = show(capsys, "--prompt", "upstream", "--dataset", str(checkout), "--tasks", "Blog")
    assert code == 2 and "repo_readme_verified_python_no_t/Blog is missing" in "".join(err.split("\n"))
    shutil.copytree(
        FIXTURE / "repo_readme_verified_python_no_t" / "Blog", checkout / "repo_readme_verified_python_no_t" / "Blog"
    )
    (checkout / JAVA_VARIANT.relative_to(FIXTURE) / "pom.xml").unlink()
    shutil.copy(FIXTURE / "gen_and_eval_Java.py", checkout / "gen_and_eval_Java.py")
    code, _, err = show(capsys, "--prompt", "upstream", "--dataset", str(checkout), "--tasks", "javalin-task-manager")
    assert code == 2 and "pom.xml is missing" in " ".join(err.split())
    # the shipped tasks are not from a checkout: upstream's prompt needs --dataset
    code, _, err = show(capsys, "--prompt", "upstream", "--tasks", "kv-ledger")
    assert code == 2 and "--dataset" in err


def test_bridge_and_file_templates_tell_the_time_limit(tmp_path: Path, capsys) -> None:
    code, text, _ = show(capsys, "--tasks", "kv-ledger", "--time-limit", "900")
    assert code == 0 and "You have 15 minutes of wall-clock time" in text and "Submit before the time is up" in text
    template = tmp_path / "mine.txt"
    template.write_text("Task {task_id} on port {port} in {time_limit_seconds}s; braces {{kept}}.\n{readme}")
    code, text, err = show(capsys, "--prompt", "file", "--prompt-file", str(template), "--tasks", "kv-ledger")
    readme = (REPO_ROOT / "tasks" / "kv-ledger" / "README.md").read_text()
    assert code == 0, err
    assert text == f"Task kv-ledger on port 8090 in 1800s; braces {{kept}}.\n{readme}\n"  # uses the limit itself
    template.write_text("{readme.__class__} {nope}")
    code, _, err = show(capsys, "--prompt", "file", "--prompt-file", str(template), "--tasks", "kv-ledger")
    assert code == 2 and "unknown field" in err
    template.write_text("a lone { brace {readme}")
    with pytest.raises(Exception, match="lone"):
        file_template(template)
    code, _, err = show(capsys, "--prompt", "file", "--tasks", "kv-ledger")
    assert code == 2 and "--prompt-file" in err


def test_prompt_kept_in_the_attempt_and_its_recording(checkout: Path, docker_client, tmp_path: Path) -> None:
    """An attempt's rendered prompt in `agent/prompt.txt` of the attempt folder and of the recording,
    the template's hash and the time limit in its row (an agent that crashes: nothing to score)."""
    out = tmp_path / "out"
    crash = f"{sys.executable} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'"
    code = rgbridge(
        [
            "run",
            "--agent",
            "command",
            "--agent-cmd",
            crash,
            "--dataset",
            str(checkout),
            "--tasks",
            "Blog",
            "--prompt",
            "upstream",
            "--time-limit",
            "600",
            "--retries",
            "0",
            "--allow-errors",
            "--output-dir",
            str(out),
            "--run-id",
            "prompted",
        ]
    )
    assert code == 0
    (path,) = out.glob("report_*.json")
    report = json.loads(path.read_text())
    (row,) = report["results"]
    expected = PY_EXPECTED + "\n\nYou have 10 minutes of wall-clock time for this task."
    assert (out / "attempts" / "Blog" / "a1" / "agent" / "prompt.txt").read_text() == expected
    assert (Path(row["run"]["recording"]) / "agent" / "prompt.txt").read_text() == expected
    catalog = Catalog.from_options(None, checkout)
    digest = load_template("upstream", prompt_file=None, tasks=[catalog.get("Blog")]).digest
    assert row["run"]["prompt_hash"] == digest and row["run"]["time_limit_seconds"] == 600
    assert report["metadata"]["config"]["prompt"] == "upstream"
    assert report["metadata"]["config"]["prompt_hash"] == digest
    assert report["metadata"]["config"]["time_limit_seconds"] == 600
    assert not (checkout / "EXECUTED").exists()
