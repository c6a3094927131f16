"""The golden suite's own collection, strict's Pass@1 denominator: collected alone in the tester
(no agent file there), through our pytest plugin, cached per task and tester image; white-box
suites, which need the agent's code to import, count their tests from the source instead.
The rule for each suite quirk is in docs/strict-rules.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from bridge.fs.files import write_json_atomic
from bridge.locations import cache_dir
from bridge.scoring import grading
from bridge.scoring.plan import ScoringPlan, run_step
from bridge.scoring.python import pytest_results
from bridge.scoring.python.plan import COLLECT_REPORT_PATH, JUNIT_MAX_BYTES
from bridge.scoring.run.workdir import LogSink
from bridge.scoring.sandbox.protocol import Sandbox
from bridge.tasks.model import Task
from bridge.tasks.suite import static_test_ids

#: bump when the collection rules change (part of the collection cache key)
COLLECTION_RULES = "3"


@dataclass
class Collection:
    """What the golden suite collects on its own: Pass@1's denominator.

    `items` are the plugin's collected node ids; `error_items` stand for modules pytest could not
    import (their tests, read with `ast`, or the module itself): they count as `error`, so one
    broken file never shrinks the denominator. `task_error` is set when the suite cannot be
    graded at all (nothing collectable): a fault of the task, not of any submission.
    """

    items: list[str] = field(default_factory=list)
    error_items: dict[str, str] = field(default_factory=dict)  # nodeid -> collection error
    exitstatus: int | None = None
    task_error: str = ""
    cached: bool = False

    @property
    def nodeids(self) -> list[str]:
        return list(dict.fromkeys([*self.items, *self.error_items]))


def _error_items(task: Task, errors: list[dict[str, str]]) -> dict[str, str]:
    static = static_test_ids(task.tests_dir)
    out: dict[str, str] = {}
    for err in errors:
        module = grading.normalize_nodeid(err["nodeid"])
        message = f"collection error: {err['message'][-500:]}"
        for nodeid in static.get(module) or [module]:
            out[nodeid] = message
    return out


def _last_error_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("E ") or "Error" in line:
            return line.removeprefix("E").strip()[:200]
    return lines[-1][:200] if lines else "collection error"


def collection_cache_key(task: Task, tester_image_id: str, args: list[str]) -> str:
    raw = "\0".join([COLLECTION_RULES, task.content_hash, tester_image_id, *args])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def collect_suite(task: Task, plan: ScoringPlan, tester: Sandbox, logs: LogSink) -> Collection:
    """Collect the golden suite alone (no agent file is in the tester), through the plugin.

    The collection depends only on the task and the tester image, so it is cached on
    (rules, task hash, tester image id, arguments): a task error is found once, not per
    submission.
    """
    step = plan.step("collect")
    args = step.argv[:-2]  # the pytest command without `--collect-only -q`: the cache key's part
    cache = cache_dir() / "collections" / f"{collection_cache_key(task, tester.image_id, args)}.json"
    try:
        cached = Collection(**json.loads(cache.read_text(encoding="utf-8")))
        cached.cached = True
        logs.write(
            "collect.log",
            f"(cached collection of the golden suite: {len(cached.nodeids)} items"
            f"{'; task error: ' + cached.task_error if cached.task_error else ''})\n"
            + "\n".join(cached.nodeids)
            + "\n",
        )
        return cached
    except (OSError, ValueError, TypeError):
        pass
    run = run_step(tester, step)
    logs.write("collect.log", run.output)
    report = pytest_results.parse_plugin_report(tester.copy_out(COLLECT_REPORT_PATH, max_bytes=JUNIT_MAX_BYTES))
    if run.timed_out:
        raise RuntimeError(f"collecting the golden suite of {task.id} took over {step.timeout:g}s")
    collection = Collection(exitstatus=report.exitstatus if report else run.exit_code)
    if report is None:
        tail = " | ".join(line for line in run.output.strip().splitlines()[-3:] if line.strip())[-400:]
        collection.task_error = f"pytest cannot load the golden suite (exit {run.exit_code}): {tail}"
    else:
        collection.items = report.collected
        collection.error_items = _error_items(task, report.collect_errors)
        if not collection.items and report.collect_errors:
            # Nothing importable in the tester (e.g. the suite imports a package its task never
            # declares): a defect of the task, not of any submission.
            why = _last_error_line(report.collect_errors[0]["message"])
            collection.error_items = {}
            collection.task_error = (
                f"no golden test module can be imported in the tester ({why}); "
                "declare the suite's packages in tests/requirements.txt"
            )
        elif not collection.nodeids:
            collection.task_error = (
                f"the golden suite collects no test items (pytest exit {report.exitstatus}); see docs/strict-rules.md"
            )
    if not task.white_box:
        write_json_atomic(cache, {k: v for k, v in asdict(collection).items() if k != "cached"}, indent=None)
    return collection


def white_box_denominator(task: Task, run_collected: list[str]) -> list[str]:
    """White-box suites cannot be collected without the agent's code, so their denominator is
    the union of what the run collected and the test ids read from the source (a parametrized
    id `m::t[x]` stands in for its static `m::t`): an agent whose code breaks the import loses
    those tests instead of shrinking the suite."""
    seen = dict.fromkeys(grading.normalize_nodeid(n) for n in run_collected)
    bases = {n.split("[", 1)[0] for n in seen}
    for ids in static_test_ids(task.tests_dir).values():
        for nodeid in ids:
            if nodeid not in bases:
                seen.setdefault(nodeid, None)
    return list(seen)
