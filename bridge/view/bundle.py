"""`rgbridge view --export DIR`: the view's pages as a static bundle that opens from disk and can
be published (as `inspect view bundle` does): `index.html` (the runs), one page per run and per
attempt, `compare.html` over every run when there are two or more, and `api/*.json` with the same
data the server's API gives. No script: a bundle is a finished run's record (no live updates,
filters or recording files).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError
from bridge.view import attempt as attempt_data
from bridge.view import data, pages
from bridge.view.catalog import Catalog

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _dump(value: Any) -> str:
    return json.dumps(value, default=str, indent=1)


def export_bundle(catalog: Catalog, out: Path, *, seed: int = 0, reference_html: str = "") -> list[Path]:
    """Write the bundle into `out` (created); the pages written, index first."""
    links = pages.Links(exported=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "api").mkdir(exist_ok=True)
    written: list[Path] = []
    runs = data.runs(catalog, seed=seed)
    _write(out / "index.html", pages.runs_page(runs, links))
    _write(out / "api" / "runs.json", _dump(runs))
    written.append(out / "index.html")
    good = [r["id"] for r in runs if not r.get("error")]
    for rid in good:
        item = catalog.get(rid)
        detail = data.run_detail(catalog, item, seed=seed)
        page = out / links.run(rid)
        _write(page, pages.run_page(detail, links))
        _write(out / "api" / f"run-{_UNSAFE.sub('_', rid)}.json", _dump(detail))
        written.append(page)
        for row in detail["attempts"]:
            try:
                one = attempt_data.attempt_detail(catalog, item, row["key"])
            except BridgeError:
                continue
            name = links.attempt(rid, row["key"])  # a file name of ours (pages.Links)
            _write(out / name, pages.attempt_page(one, links))
            written.append(out / name)
    if len(good) > 1:
        both = data.compare(catalog, good, seed=seed)
        _write(out / "compare.html", pages.compare_page(both, links, reference_html))
        _write(out / "api" / "compare.json", _dump(both))
        written.append(out / "compare.html")
    return written
