"""This run beside the published rows: `rgbridge report RUN --reference results.json` puts the
run's row among the rows of a leaderboard `results.json` (the RepoGenesis repository's
`leaderboard/data/results.json`, or any file in its row schema), in the terminal and in the HTML.

Upstream's file has had two shapes:
- a list of rows (or `{"results": [rows]}`), the shape `report --leaderboard-row` writes;
- a dict of boards, each a list of rows: `{"verified": [...], "full": [...],
  "verified_no_docker": [...]}` (the published leaderboard's tabs; its page reads
  `data[tab]`). Keys that do not hold a list are ignored, so a board added later is read too.
A row is `model` ("<agent or IDE> + <model>"), `category` (Agent, IDE, CLI), `language`
(Python, Java), `pass_at_1`, `ac`, `dsr` in percent, each may be null ("N/A" on the published
page; a board may leave `dsr` out), plus `org`, `date`, `link`, `org_img`, kept as extra keys.

The file is input like any other: every row goes through a pydantic model, a bad row is a
one-line error naming it, every string is escaped on the page and printed as text, never markup.

The paper's tables put one system per line with Pass@1, AC and DSR per language side by side;
`paper_rows` pivots the per-language rows into that shape and `reference_table` /
`reference_html` print it with the run's own line among them, ranked by Pass@1 over the
languages the run has.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from bridge.errors import ScoringError
from bridge.reports.markup import e

METRICS = (("pass_at_1", "Pass@1"), ("ac", "AC"), ("dsr", "DSR"))
#: languages as upstream's rows spell them, in the paper's column order
LANGUAGES = ("Python", "Java")
#: the published file holds ~70 rows per board; this bounds what an untrusted file can make us draw
MAX_ROWS = 2000
MAX_TEXT = 200
THIS_RUN = "this run"


class LeaderboardRow(BaseModel):
    """One row of upstream's leaderboard results.json (extra keys such as org, date are kept)."""

    model_config = ConfigDict(extra="allow")

    model: str
    category: str = ""
    language: str = ""
    pass_at_1: float | None = None
    ac: float | None = None
    dsr: float | None = None
    board: str = ""  # the key of the board it came from ("" for a plain list)

    @field_validator("model", "category", "language", "board")
    @classmethod
    def _short(cls, v: str) -> str:
        return v[:MAX_TEXT]

    @field_validator("pass_at_1", "ac", "dsr")
    @classmethod
    def _percent(cls, v: float | None) -> float | None:
        if v is not None and (not math.isfinite(v) or not 0.0 <= v <= 100.0):
            raise ValueError("must be a percentage between 0 and 100")
        return v


def _boards(data: Any, path: Path) -> list[tuple[str, list[Any]]]:
    """The file's rows by board, whichever of upstream's shapes it has."""
    if isinstance(data, list):
        return [("", data)]
    if isinstance(data, Mapping):
        if isinstance(data.get("results"), list):
            return [("", data["results"])]
        boards = [(str(k), v) for k, v in data.items() if isinstance(v, list)]
        if boards:
            return boards
    raise ScoringError(
        f"{path}: not a leaderboard results.json (expected a list of rows, or boards of rows such as "
        '{"verified": [...], "verified_no_docker": [...]})'
    )


def load_reference(path: Path | str, board: str | None = None) -> list[LeaderboardRow]:
    """Every row of a leaderboard results.json (of `board` only when given)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScoringError(f"{path}: unreadable reference results: {exc}") from None
    boards = _boards(data, path)
    if board is not None:
        names = [name for name, _ in boards]
        boards = [(name, rows) for name, rows in boards if name == board]
        if not boards:
            raise ScoringError(f"{path}: no board {board!r} (boards: {', '.join(n or '-' for n in names)})")
    out: list[LeaderboardRow] = []
    for name, raw_rows in boards:
        for i, raw in enumerate(raw_rows):
            if len(out) >= MAX_ROWS:
                raise ScoringError(f"{path}: more than {MAX_ROWS} rows")
            where = f"{name}[{i}]" if name else f"row {i}"
            if not isinstance(raw, Mapping):
                raise ScoringError(f"{path}: {where} is not an object")
            try:
                out.append(LeaderboardRow.model_validate({**raw, "board": name}))
            except ValidationError as exc:
                err = exc.errors()[0]
                field_name = ".".join(str(x) for x in err["loc"])
                raise ScoringError(f"{path}: {where}: {field_name}: {err['msg']}") from None
    return out


# ----------------------------------------------------------------------------- the run's own row


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def run_label(report: Mapping[str, Any]) -> tuple[str, str]:
    """(system, model) of a run: the agent with its CLI version, the model the provider reported."""
    md = _mapping(report.get("metadata"))
    raw_agent = md.get("agent")
    agent = _mapping(raw_agent) or ({"name": raw_agent} if isinstance(raw_agent, str) else {})
    config = _mapping(md.get("config"))
    system = " ".join(str(x) for x in (agent.get("name"), config.get("cli_version") or agent.get("version")) if x)
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    models = sorted({str(_mapping(r.get("agent")).get("model") or "") for r in results} - {""})
    model = ", ".join(models) or str(config.get("model") or agent.get("model") or md.get("model_name") or "")
    return (system or THIS_RUN)[:MAX_TEXT], model[:MAX_TEXT]


def run_rows(report: Mapping[str, Any]) -> list[LeaderboardRow]:
    """This report's own rows, one per language, as upstream computes the leaderboard (compat
    summary, percent); agent failures are not in the summary (bridge/scoring/run/reporting.py)."""
    system, model = run_label(report)
    summary = _mapping(report.get("summary"))
    by_lang = _mapping(_mapping(report.get("strict_summary")).get("by_lang"))
    langs = {str(r.get("lang")) for r in report.get("results") or [] if isinstance(r, Mapping)}
    rows = []
    for lang, language in (("python", "Python"), ("java", "Java")):
        if lang not in langs:
            continue
        category = THIS_RUN
        if isinstance(summary.get("pass_at_1_by_lang"), Mapping):
            raw = [_mapping(summary.get(f"{k}_by_lang")).get(lang) for k in ("pass_at_1", "ac", "dsr")]
        else:  # a strict-only run has no compat summary: its strict means, said so
            strict = _mapping(by_lang.get(lang))
            raw = [strict.get(k) for k in ("avg_pass_at_1", "avg_api_coverage", "deployment_success_rate")]
            category = f"{THIS_RUN} (strict)"
        values = {
            # a report is a file on disk: a mean that is no fraction is shown as N/A, never drawn
            key: round(100 * float(v), 2) if isinstance(v, (int, float)) and 0.0 <= v <= 1.0 else None
            for key, v in zip(("pass_at_1", "ac", "dsr"), raw, strict=True)
        }
        rows.append(
            LeaderboardRow.model_validate(
                {"model": f"{system} + {model}" if model else system, "category": category, "language": language}
                | values
            )
        )
    return rows


# ----------------------------------------------------------------------------- the paper's table


@dataclass
class PaperRow:
    """One line of the paper's table: a system and model with Pass@1 / AC / DSR per language."""

    category: str
    system: str
    model: str
    board: str
    ours: bool
    cells: dict[str, tuple[float | None, float | None, float | None]] = field(default_factory=dict)

    def rank_key(self, languages: frozenset[str]) -> float:
        """Mean Pass@1 over `languages` (the published page sorts by Pass@1)."""
        values = [c[0] for lang, c in self.cells.items() if lang in languages and c[0] is not None]
        return sum(values) / len(values) if values else -1.0


def _split(model: str) -> tuple[str, str]:
    system, sep, rest = model.partition(" + ")
    return (system, rest) if sep else (model, "")


def paper_rows(report: Mapping[str, Any], reference: Sequence[LeaderboardRow]) -> list[PaperRow]:
    """The run's line and the reference lines, best Pass@1 first."""
    lines: dict[tuple[str, str, bool], PaperRow] = {}
    for row, ours in [(r, True) for r in run_rows(report)] + [(r, False) for r in reference]:
        key = (row.board, row.model, ours)
        if key not in lines:
            system, model = _split(row.model)
            lines[key] = PaperRow(row.category, system, model, row.board, ours)
        language = row.language.capitalize() if row.language.lower() in ("python", "java") else row.language
        lines[key].cells[language] = (row.pass_at_1, row.ac, row.dsr)
    # ranked on the languages the run has, so that a Python-only run is compared on Python
    run_langs = frozenset(lang for p in lines.values() if p.ours for lang in p.cells)
    ranked = run_langs or frozenset(lang for p in lines.values() for lang in p.cells)
    return sorted(lines.values(), key=lambda p: (-p.rank_key(ranked), not p.ours, p.system, p.model))


def _languages(rows: Sequence[PaperRow]) -> list[str]:
    present = {lang for r in rows for lang in r.cells}
    return [lang for lang in LANGUAGES if lang in present] + sorted(present - set(LANGUAGES))


def _pct(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def reference_table(report: Mapping[str, Any], reference: Sequence[LeaderboardRow], console: Any = None) -> Any:
    """A rich table in the paper's shape with the run's line among the reference lines (marked
    and in bold); printed to `console` when given, returned either way."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    rows = paper_rows(report, reference)
    langs = _languages(rows)
    boards = sorted({r.board for r in rows if not r.ours} - {""})
    table = Table(
        title="Beside the reference rows (percent; compat = upstream's rules)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    table.add_column("#", justify="right")
    for col in ("Category", "Agent / IDE", "Model", *(["Board"] if len(boards) > 1 else [])):
        table.add_column(col, overflow="fold")
    for lang in langs:
        for _, title in METRICS:
            table.add_column(f"{lang[:2]} {title}", justify="right")
    for i, r in enumerate(rows, 1):
        style = "bold red" if r.ours else ""
        cells: list[Any] = [
            Text(str(i), style=style),
            Text(("▶ " if r.ours else "") + r.category, style=style),
            Text(r.system, style=style),
            Text(r.model, style=style),
        ]
        if len(boards) > 1:
            cells.append(Text(r.board, style=style))
        for lang in langs:
            cells.extend(Text(_pct(v), style=style) for v in r.cells.get(lang, (None, None, None)))
        table.add_row(*cells)
    ours = [i for i, r in enumerate(rows, 1) if r.ours]
    table.caption = (
        f"this run: line {', '.join(map(str, ours)) or '-'} of {len(rows)}"
        + (f"; boards: {', '.join(boards)}" if boards else "")
        + " (Py = Python, Ja = Java)"
    )
    if console is not None:
        console.print(table)
    return table


def table_html(report: Mapping[str, Any], reference: Sequence[LeaderboardRow]) -> str:
    """The paper's table in HTML, the run's line highlighted (class `ours`)."""
    rows = paper_rows(report, reference)
    langs = _languages(rows)
    boards = sorted({r.board for r in rows if not r.ours} - {""})
    head = "<tr><th rowspan='2'>#</th><th rowspan='2'>Category</th><th rowspan='2'>Agent / IDE</th>"
    head += "<th rowspan='2'>Model</th>" + ("<th rowspan='2'>Board</th>" if len(boards) > 1 else "")
    head += "".join(f"<th colspan='3'>{e(lang)}</th>" for lang in langs) + "</tr><tr>"
    head += "".join(f"<th>{e(t)}</th>" for _ in langs for _, t in METRICS) + "</tr>"
    body = []
    for i, r in enumerate(rows, 1):
        cls = " class='ours'" if r.ours else ""
        cells = [
            f"<td class='n'>{i}</td>",
            f"<td>{e(r.category)}</td>",
            f"<td>{e(r.system)}</td>",
            f"<td>{e(r.model)}</td>",
        ]
        if len(boards) > 1:
            cells.append(f"<td>{e(r.board)}</td>")
        for lang in langs:
            cells.extend(f"<td class='n'>{e(_pct(v))}</td>" for v in r.cells.get(lang, (None, None, None)))
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table class='paper'><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


def bars_svg(title: str, rows: Sequence[tuple[str, float, bool]], width: int = 900) -> str:
    """Horizontal bars, 0-100 %, this run's in red, reference rows in blue-grey."""
    left, right, bar, gap, top = 330, 60, 16, 6, 26
    height = top + len(rows) * (bar + gap) + 24
    pw = width - left - right
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fbfcfd"/>',
        f'<text x="8" y="17" font-size="13" font-weight="600" fill="#1d2430">{e(title)} (%)</text>',
    ]
    for i in range(5):
        gx = left + pw * i / 4
        parts.append(
            f'<line x1="{gx:.1f}" y1="{top - 4}" x2="{gx:.1f}" y2="{height - 20}" stroke="#e3e8ef"/>'
            f'<text x="{gx:.1f}" y="{height - 6}" font-size="11" fill="#6b7a8c" text-anchor="middle">{25 * i}</text>'
        )
    for k, (label, value, ours) in enumerate(rows):
        y = top + k * (bar + gap)
        color = "#d92d20" if ours else "#7d8fa6"
        weight = "600" if ours else "400"
        parts.append(
            f'<text x="{left - 8}" y="{y + bar - 4}" font-size="12" font-weight="{weight}" fill="#1d2430" '
            f'text-anchor="end">{e(label[:46])}</text>'
            f'<rect x="{left}" y="{y}" width="{max(1.0, pw * value / 100):.1f}" height="{bar}" fill="{color}">'
            f"<title>{e(label)}: {value:.2f}</title></rect>"
            f'<text x="{left + pw * value / 100 + 4:.1f}" y="{y + bar - 4}" font-size="11" fill="#33475b">'
            f"{value:.2f}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def reference_html(report: Mapping[str, Any], reference: Sequence[LeaderboardRow]) -> str:
    """The paper's table with the run's line among the reference lines, then a chart per metric
    (rows without the metric, N/A on the published page, are left out of its chart)."""
    ours = run_rows(report)
    rows = [(r, True) for r in ours] + [(r, False) for r in reference]
    boards = sorted({r.board for r in reference if r.board})
    out = [
        "<h2>Beside the reference rows</h2><p class='muted'>This run's line (highlighted; compat "
        f"aggregation as upstream, percent) among {len(reference)} reference row(s) from the supplied "
        f"results.json{' (boards: ' + e(', '.join(boards)) + ')' if boards else ''}, best Pass@1 first.</p>",
        table_html(report, reference),
    ]
    for key, title in METRICS:
        bars = sorted(
            (
                (f"{THIS_RUN if mine else r.model} — {r.language}" if r.language else r.model, float(value), mine)
                for r, mine in rows
                if (value := getattr(r, key)) is not None
            ),
            key=lambda b: -b[1],
        )
        out.append(bars_svg(title, bars))
    return "".join(out)
