"""Hand results back in upstream's shapes: the IDE output layout and leaderboard rows.

IDE layout (docs/upstream.md §3.1): `repo_readme_<MMDD>_<ide>_<model>_<Language>/<Task>/`,
one folder per language (`Python`, `Java`), MMDD from the run date. Upstream parses the folder
name as: first 4-digit token = date, token after it = IDE, last token = language, the rest =
model; so the IDE token may not contain `_` (the model may).

Leaderboard rows (§4.1 `results.json`): one row per language present with keys model,
category ("IDE"), language, pass_at_1, ac, dsr (percent, 2 decimals), org, date, link, org_img.
The numbers come from the run's **compat summary** (`summary.*_by_lang` of the report, i.e.
upstream's aggregation: macro means, repos with zero collected tests left out of Pass@1,
repos without README endpoints left out of AC, DSR over all repos); `aggregation="strict"`
takes the strict summary's by-language blocks instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError, RecordingError, ScoringError

LANGUAGE_NAMES = {"python": "Python", "java": "Java"}
IDE_DISPLAY = {"vscode": "Copilot", "copilot": "Copilot", "antigravity": "Antigravity"}
_IDE_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]*$")
_MODEL_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_TASK = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def ide_display(ide: str) -> str:
    """Upstream's display name of an IDE token (`vscode` → Copilot, else capitalised)."""
    return IDE_DISPLAY.get(ide.lower(), ide[:1].upper() + ide[1:])


def config_name(mmdd: str, ide: str, model: str, lang: str) -> str:
    if not re.fullmatch(r"\d{4}", mmdd):
        raise BridgeError(f"invalid date token {mmdd!r} (MMDD)")
    if not _IDE_TOKEN.match(ide or ""):
        raise BridgeError(f"invalid --ide {ide!r}: letters, digits, '.' and '-' only (no '_': upstream splits on it)")
    if not _MODEL_TOKEN.match(model or "") or re.fullmatch(r"(?i)python|java|\d{4}", model.split("_")[-1]):
        raise BridgeError(f"invalid --model {model!r}: letters, digits, '.', '-' and '_' only")
    language = LANGUAGE_NAMES.get(lang.lower())
    if language is None:
        raise BridgeError(f"unknown language {lang!r} (python or java)")
    return f"repo_readme_{mmdd}_{ide}_{model}_{language}"


@dataclass
class ExportResult:
    out_dir: Path
    folders: dict[str, list[str]] = field(default_factory=dict)  # config folder -> tasks
    skipped: list[str] = field(default_factory=list)
    #: exported tasks whose recording opened golden files while open (bridge/sessions/contamination.py)
    contaminated: list[str] = field(default_factory=list)


def _copy_repo(src: Path, dest: Path) -> None:
    """Copy a scored repo as the engine stages it (the workspace ignore rules, bridge/fs/ignore.py)."""
    from bridge.fs.walk import copy_tree_at

    copy_tree_at(src, dest)


def _run_date(report: dict[str, Any]) -> datetime:
    md = report.get("metadata") or {}
    for key in ("timestamp", "run_id"):
        raw = str(md.get(key) or "")
        for fmt in (None, "%Y-%m-%d_%H-%M-%S"):
            try:
                return datetime.fromisoformat(raw) if fmt is None else datetime.strptime(raw, fmt)
            except ValueError:
                continue
    raise ScoringError("the run report has no usable date (metadata.timestamp / run_id)")


def _prepare(out_dir: Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out


def export_run(
    run_dir: Path | str,
    out_dir: Path | str,
    *,
    ide: str,
    model: str,
    run_id: str | None = None,
    predictions_dir: Path | None = None,
) -> ExportResult:
    """Copy the repos a run scored (its predictions) into the upstream IDE layout."""
    from bridge.reports.runreport import load_run_report

    _, report = load_run_report(Path(run_dir), run_id)
    preds = Path(predictions_dir or (report.get("metadata") or {}).get("predictions_dir") or "")
    if not str(preds) or not preds.is_dir():
        raise ScoringError(
            f"predictions folder {str(preds) or '(none in the report)'} not found: pass --predictions-dir"
        )
    mmdd = _run_date(report).strftime("%m%d")
    out = _prepare(Path(out_dir))
    result = ExportResult(out)
    for entry in sorted(report["results"], key=lambda r: str(r.get("repo_name", ""))):
        task = str(entry.get("repo_name", ""))
        src = preds / task
        if not _TASK.match(task) or not src.is_dir():
            result.skipped.append(task)
            continue
        folder = config_name(mmdd, ide, model, str(entry.get("lang", "")))
        dest = out / folder / task
        if dest.exists():
            raise BridgeError(f"{dest} already exists")
        _copy_repo(src, dest)
        result.folders.setdefault(folder, []).append(task)
    return result


def export_recordings(
    recordings_dir: Path | str, out_dir: Path | str, *, ide: str, model: str, catalog: Any | None = None
) -> ExportResult:
    """Materialise each recording's submission as `<config>/<Task>/` (newest submission per task)."""
    from bridge.recording.clock import parse_iso
    from bridge.recording.reader import iter_recordings, load_meta
    from bridge.recording.replay import replay
    from bridge.recording.results import latest_result
    from bridge.sessions.contamination import evidence

    chosen: dict[str, tuple[str, Path, str]] = {}  # task -> (submitted at, recording, lang)
    result = ExportResult(Path(out_dir))
    for rec in iter_recordings(Path(recordings_dir)):
        try:
            meta = load_meta(rec)
        except BridgeError:
            result.skipped.append(rec.name)
            continue
        if meta.submission is None:
            result.skipped.append(rec.name)
            continue
        lang = None
        latest = latest_result(rec)
        if latest is not None:
            try:
                import json

                lang = json.loads((rec / latest["path"]).read_text(encoding="utf-8")).get("lang")
            except (OSError, ValueError):
                lang = None
        if not lang:
            if catalog is None:
                from bridge.tasks.catalog import Catalog

                catalog = Catalog.from_options()
            lang = catalog.get(meta.task_id).lang
        at = meta.submission.at
        prev = chosen.get(meta.task_id)
        if prev is None or parse_iso(at) > parse_iso(prev[0]):
            if prev is not None:
                result.skipped.append(prev[1].name)
            chosen[meta.task_id] = (at, rec, str(lang))
        else:
            result.skipped.append(rec.name)
    if not chosen:
        raise RecordingError(f"{recordings_dir}: no submitted recordings")
    newest = max(parse_iso(at) for at, _, _ in chosen.values())
    mmdd = newest.strftime("%m%d")
    out = _prepare(Path(out_dir))
    for task, (_, rec, lang) in sorted(chosen.items()):
        if not _TASK.match(task):
            result.skipped.append(rec.name)
            continue
        folder = config_name(mmdd, ide, model, lang)
        dest = out / folder / task
        if dest.exists():
            raise BridgeError(f"{dest} already exists")
        dest.parent.mkdir(parents=True, exist_ok=True)
        replay(rec, "submission", dest)
        result.folders.setdefault(folder, []).append(task)
        if evidence(rec):
            result.contaminated.append(task)
    return result


def leaderboard_rows(
    report: dict[str, Any],
    *,
    ide: str,
    model: str,
    org: str | None = None,
    link: str = "",
    org_img: str = "",
    aggregation: str = "compat",
    date: str | None = None,
) -> list[dict[str, Any]]:
    """The run as upstream leaderboard rows, one per language present (see module doc)."""
    if aggregation not in ("compat", "strict"):
        raise ScoringError("aggregation must be compat or strict")
    day = date or _run_date(report).strftime("%Y-%m-%d")
    langs = sorted(
        {str(r.get("lang")) for r in report.get("results") or [] if r.get("lang") in LANGUAGE_NAMES},
        key=lambda lang: list(LANGUAGE_NAMES).index(lang),
    )
    rows = []
    for lang in langs:
        if aggregation == "compat":
            s = report.get("summary") or {}
            p1 = (s.get("pass_at_1_by_lang") or {}).get(lang, 0.0)
            ac = (s.get("ac_by_lang") or {}).get(lang, 0.0)
            dsr = (s.get("dsr_by_lang") or {}).get(lang, 0.0)
        else:
            b = ((report.get("strict_summary") or {}).get("by_lang") or {}).get(lang) or {}
            p1, ac, dsr = (
                b.get("avg_pass_at_1", 0.0),
                b.get("avg_api_coverage") or 0.0,
                b.get("deployment_success_rate", 0.0),
            )
        rows.append(
            {
                "model": f"{ide_display(ide)} + {model}",
                "category": "IDE",
                "language": LANGUAGE_NAMES[lang],
                "pass_at_1": round(100 * float(p1), 2),
                "ac": round(100 * float(ac), 2),
                "dsr": round(100 * float(dsr), 2),
                "org": org if org is not None else ide_display(ide),
                "date": day,
                "link": link,
                "org_img": org_img,
            }
        )
    return rows
