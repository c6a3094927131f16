"""API coverage (AC): upstream static AC, the legacy micro-average, and our dynamic probe.

* `static_api_coverage` reproduces upstream's `api_coverage.py` (docs/upstream.md §2.7)
  exactly, including its leniency (W17): with a generic pattern such as `\\.get\\s*\\(` any
  `dict.get(` in a file that also contains one path segment counts as an implementation.
* `legacy_micro_average` is the legacy scripts' Σimplemented / Σtotal (§3.2).
* `dynamic_api_coverage` (strict only) classifies real HTTP probes made by
  `assets/probe_endpoints.py` inside the tester container; see `classify_probe`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.scoring.result import APICoverage, EndpointCoverage

SOURCE_EXTENSIONS: frozenset[str] = frozenset({".py", ".java", ".js", ".ts", ".kt"})
EXCLUDED_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        "__pycache__",
        "node_modules",
        "venv",
        ".venv",
        "target",
        "build",
        ".pytest_cache",
        "dist",
        "egg-info",
        "test",
        "tests",
        ".idea",
        ".vscode",
    }
)
HTTP_METHODS: tuple[str, ...] = ("GET", "POST", "PUT", "DELETE", "PATCH")
#: Source files above this size are skipped (ours: upstream reads everything; no real
#: generated source file comes near it, and it bounds work on hostile repos).
MAX_SOURCE_BYTES = 8 * 1024 * 1024

# --- upstream extractor patterns (§2.7), kept verbatim in behaviour ---
_ENDPOINT_LINE = re.compile(r"(GET|POST|PUT|DELETE|PATCH)\s+(/[^\s\-:]+)\s*[-:]?\s*(.+?)(?:\n|$)", re.IGNORECASE)
_TABLE_ROW = re.compile(r"\|\s*(GET|POST|PUT|DELETE|PATCH)\s*\|\s*`?(/[^|`]+?)`?\s*\|", re.IGNORECASE)
_FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_FEATURE = re.compile(
    r"[-*]\s+([A-Z][A-Za-z\s]+(?:Check|Login|Register|Create|Update|Delete|Search|List|View|Get"
    r"|Add|Remove|Edit|Manage|Upload|Download|Send|Receive))"
)


@dataclass(frozen=True)
class Endpoint:
    method: str  # GET/POST/PUT/DELETE/PATCH, or FEATURE for the fallback
    path: str
    description: str = ""

    @property
    def key(self) -> str:
        return f"{self.method}:{self.path}"


# ----------------------------------------------------------------------------- extractor


def extract_endpoints(readme_text: str) -> list[Endpoint]:
    """README endpoints by upstream's four rules, deduplicated on METHOD:path (first kept)."""
    found: dict[str, Endpoint] = {}

    def add(ep: Endpoint) -> None:
        found.setdefault(ep.key, ep)

    def endpoint_lines(text: str) -> None:
        for m in _ENDPOINT_LINE.finditer(text):
            path = m.group(2).strip().rstrip("`").rstrip("*")
            add(Endpoint(m.group(1).upper(), path, m.group(3).strip()))

    endpoint_lines(readme_text)
    for m in _TABLE_ROW.finditer(readme_text):
        add(Endpoint(m.group(1).upper(), m.group(2).strip(), ""))
    for block in _FENCED.finditer(readme_text):
        endpoint_lines(block.group(1))
    if not found:
        for m in _FEATURE.finditer(readme_text):
            feature = m.group(1).strip()
            add(Endpoint("FEATURE", feature, feature))
    return list(found.values())


# ----------------------------------------------------------------------------- matcher


def search_patterns(endpoint: Endpoint) -> list[re.Pattern[str]]:
    """The upstream "implementation looks present" patterns for one endpoint (all IGNORECASE)."""
    if endpoint.method == "FEATURE":
        feature = endpoint.path
        snake = re.sub(r"\s+", "_", re.sub(r"(?<=[a-z])(?=[A-Z])", "_", feature).lower())
        raw = [re.escape(snake), re.escape(feature.replace(" ", "").lower()), re.escape(feature.lower())]
    else:
        m, M, Mc = endpoint.method.lower(), endpoint.method, endpoint.method.capitalize()
        raw = [
            rf"@app\.{m}\s*\(",
            rf"@router\.{m}\s*\(",
            rf"@bp\.{m}\s*\(",
            rf"@.*\.{m}\s*\(",
            rf'methods\s*=\s*\[.*?"{M}"',
            rf"app\.{m}\s*\(",
            rf"router\.{m}\s*\(",
            rf"@{Mc}Mapping",
            rf"@RequestMapping.*method\s*=\s*RequestMethod\.{M}",
            rf"\.{m}\s*\(",
            rf"Spark\.{m}\s*\(",
            rf"@{Mc}\s*\(",
            rf"@{M}\s*$",  # no MULTILINE upstream: `$` is the end of the file
        ]
    return [re.compile(p, re.IGNORECASE) for p in raw]


def path_parts(path: str) -> list[str]:
    """Path segments that count as evidence: longer than 3 chars, not `{...}` / `<...>`."""
    return [p for p in path.strip("/").split("/") if len(p) > 3 and not p.startswith(("{", "<"))]


def iter_source_files(repo_dir: Path) -> list[tuple[str, str]]:
    """(relative path, text) of source files in upstream's os.walk order and pruning.

    Symlinks and non-regular files are skipped (ours: the walk runs on the host).
    """
    out: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(repo_dir):
        dirs[:] = [d for d in dirs if d not in EXCLUDED_DIRS]
        for name in files:
            full = Path(root) / name
            if full.suffix not in SOURCE_EXTENSIONS:
                continue
            try:
                st = full.lstat()
                if not full.is_file() or full.is_symlink() or st.st_size > MAX_SOURCE_BYTES:
                    continue
                text = full.read_text(encoding="utf-8", errors="ignore")
            except OSError:
                continue
            out.append((full.relative_to(repo_dir).as_posix(), text))
    return out


def match_endpoint(endpoint: Endpoint, sources: Sequence[tuple[str, str]]) -> str | None:
    """The first source file that counts as implementing `endpoint` (upstream rule), or None."""
    patterns = search_patterns(endpoint)
    parts = path_parts(endpoint.path)
    for rel, text in sources:
        if not any(p.search(text) for p in patterns):
            continue
        if endpoint.method == "FEATURE":
            return rel
        if endpoint.path in text or any(part in text for part in parts):
            return rel
    return None


def static_api_coverage(readme_text: str, repo_dir: Path | str) -> APICoverage:
    """Upstream static AC of a repo against a README text."""
    endpoints = extract_endpoints(readme_text)
    if not endpoints:
        return APICoverage.from_endpoints([], note="No API endpoints found in README")
    sources = iter_source_files(Path(repo_dir))
    rows = []
    for ep in endpoints:
        evidence = match_endpoint(ep, sources)
        rows.append(
            EndpointCoverage(method=ep.method, path=ep.path, implemented=evidence is not None, evidence=evidence or "")
        )
    return APICoverage.from_endpoints(rows)


def upstream_api_coverage(readme_path: Path | str, repo_dir: Path | str) -> APICoverage | None:
    """Upstream's gate: AC only when both the README and the repo exist, else None (no key)."""
    readme_path, repo_dir = Path(readme_path), Path(repo_dir)
    if not readme_path.is_file() or not repo_dir.exists():
        return None
    return static_api_coverage(readme_path.read_text(encoding="utf-8", errors="ignore"), repo_dir)


# ----------------------------------------------------------------------------- legacy


def legacy_micro_average(results: Iterable[APICoverage | Mapping[str, Any]]) -> float:
    """Legacy AC: Σimplemented / Σtotal over repos with endpoints, rounded to 4 places."""
    impl = total = 0
    for r in results:
        t = r.total_apis if isinstance(r, APICoverage) else int(r.get("total_apis", 0))
        i = r.implemented_apis if isinstance(r, APICoverage) else int(r.get("implemented_apis", 0))
        if t > 0:
            total += t
            impl += i
    return round(impl / total, 4) if total else 0.0


# ----------------------------------------------------------------------------- dynamic

PROBE_SCRIPT = Path(__file__).with_name("assets") / "probe_endpoints.py"

# Default "no such route" bodies of common frameworks, matched case-insensitively.
_DEFAULT_404_MARKERS: tuple[str, ...] = (
    "the requested url was not found on the server",  # Flask / Werkzeug
    "<title>error response</title>",  # Python http.server
    "page not found at",  # Django DEBUG page
    "the requested resource was not found on this server",  # Django production page
    "<h2>404 not found</h2>",  # Spark Java
    "<title>404: not found</title>",  # Tornado
    "cannot get /",
    "cannot post /",
    "cannot put /",
    "cannot delete /",
    "cannot patch /",  # Express
    "could not find resource for full path",  # RESTEasy / Quarkus
    "whitelabel error page",  # Spring Boot HTML
)
_BARE_NOT_FOUND = {"", "not found", "404 not found", "404 page not found", "404"}


def _json_or_none(body: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def looks_like_default_not_found(body: str | None, path: str = "") -> bool:
    """Whether a 404 body looks like a framework's built-in "no route" response."""
    text = (body or "").strip()
    low = text.lower()
    if low in _BARE_NOT_FOUND:
        return True
    data = _json_or_none(text)
    if isinstance(data, dict):
        lowered = {str(k).lower(): v for k, v in data.items()}
        if set(lowered) == {"detail"} and str(lowered["detail"]).lower() == "not found":
            return True  # FastAPI / Starlette
        if lowered.get("error") == "Not Found" and "timestamp" in lowered and "path" in lowered:
            return True  # Spring Boot JSON error
        if (
            str(lowered.get("title", "")).lower().startswith("endpoint ")
            and "not found" in str(lowered["title"]).lower()
        ):
            return True  # Javalin
        if lowered.get("message") == "Not Found" and "_links" in lowered:
            return True  # Micronaut
        return False
    return any(marker in low for marker in _DEFAULT_404_MARKERS)


def _normalise_body(body: str | None, path: str) -> str:
    text = (body or "").strip()
    return text.replace(path, "<path>") if path else text


def classify_probe(
    status: int | None,
    body: str | None = None,
    *,
    path: str = "",
    control_status: int | None = None,
    control_body: str | None = None,
    control_path: str = "",
) -> tuple[bool, str]:
    """Decide whether a probe response shows a routed ("handled") endpoint.

    Returns (implemented, reason). Heuristic, documented honestly:
    * no status (connection refused, timeout) -> not implemented;
    * 405 Method Not Allowed and 501 Not Implemented -> unrouted for that method;
    * 404 whose body looks like a framework's default not-found page (FastAPI
      `{"detail":"Not Found"}`, Werkzeug/Flask HTML, http.server's error page, Django's debug or
      production page, Spring/Javalin/Micronaut/Express/Spark/Tornado defaults, empty or bare
      "Not Found") -> unrouted;
    * 404 identical to the response for a path that certainly does not exist (the control
      request, same method, path substituted) -> unrouted, which catches apps with a custom
      catch-all 404 handler;
    * any other status (2xx, 3xx, 400, 401, 403, 422, 500, a custom 404 such as
      `{"detail":"Item not found"}`) -> handled: something routed the request.
    Known limits: a handler that answers its own 404 with the framework default body reads as
    unrouted; a catch-all route that answers 200 for everything reads as handled.
    """
    if status is None:
        return False, "no response"
    if status in (405, 501):
        return False, f"{status}: method not routed"
    if status == 404:
        if looks_like_default_not_found(body, path):
            return False, "404: default not-found page"
        if control_status == 404 and _normalise_body(body, path) == _normalise_body(control_body, control_path):
            return False, "404: same as an unrouted control path"
        return True, "404 with a custom body"
    return True, f"{status}: handled"


def probeable_endpoints(endpoints: Iterable[Endpoint]) -> list[dict[str, str]]:
    """The JSON input of the probe script: HTTP endpoints only (FEATURE items are not URLs)."""
    return [{"method": e.method, "path": e.path} for e in endpoints if e.method in HTTP_METHODS]


def dynamic_api_coverage(
    endpoints: Iterable[Endpoint], probes: Iterable[Mapping[str, Any]], *, unreachable: str = ""
) -> APICoverage:
    """Dynamic AC from probe results (the JSON list printed by probe_endpoints.py).

    The denominator is exactly static AC's: every item the README lists, so the two always
    agree on what the README asks for. FEATURE items (upstream's fallback when a README has no
    `METHOD /path` lines) name no URL and cannot be probed: they count as not implemented,
    with that reason. An endpoint without a probe result counts as not implemented; with
    `unreachable` (the service never deployed) nothing is probed and every item says why.
    """
    by_key = {f"{str(p.get('method', '')).upper()}:{p.get('path', '')}": p for p in probes}
    rows: list[EndpointCoverage] = []
    features = 0
    for ep in endpoints:
        if ep.method not in HTTP_METHODS:
            features += 1
            rows.append(
                EndpointCoverage(
                    method=ep.method,
                    path=ep.path,
                    implemented=False,
                    evidence="not probeable: a feature bullet, not an HTTP route",
                )
            )
            continue
        if unreachable:
            rows.append(EndpointCoverage(method=ep.method, path=ep.path, implemented=False, evidence=unreachable))
            continue
        probe = by_key.get(ep.key)
        if probe is None:
            rows.append(EndpointCoverage(method=ep.method, path=ep.path, implemented=False, evidence="not probed"))
            continue
        status = probe.get("status")
        ok, reason = classify_probe(
            status,
            probe.get("body"),
            path=str(probe.get("url_path", "")),
            control_status=probe.get("control_status"),
            control_body=probe.get("control_body"),
            control_path=str(probe.get("control_path", "")),
        )
        if status is None and probe.get("error"):
            reason = f"no response: {probe['error']}"
        rows.append(EndpointCoverage(method=ep.method, path=ep.path, implemented=ok, evidence=reason, status=status))
    note = ""
    if features:
        note = f"{features} README item(s) are feature bullets without an HTTP route: not probeable"
    return APICoverage.from_endpoints(rows, note=note)
