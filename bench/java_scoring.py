"""Java scoring benchmark: cold and cached-layer score times of the `link-shortener` oracle.

    python bench/java_scoring.py [--reps 3] [--json FILE]

  (a) cold: the oracle's pom-keyed dependency layer removed first, no result cache, both profiles
      (the Java image itself is built once beforehand; its build time is printed separately when
      it had to be built);
  (b) cached layer: a one-file change (fresh snapshot, result-cache miss), layer reused, both
      profiles, and each profile alone;
  (c) unchanged snapshot: result-cache hit.
Scores must be identical (Pass@1 1.0, DSR true) in every run. Offline: RGBRIDGE_MAVEN_ONLINE=0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from docker.errors import ImageNotFound

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.scoring.java.images import ensure_java_image, java_image_tag
from bridge.scoring.java.layers import MavenSources, jdeps_tag, repo_poms
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.sandbox.docker_client import get_client
from bridge.scoring.types import ScoreRequest, profile_choice
from bridge.tasks.catalog import Catalog

TASK = "link-shortener"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ["RGBRIDGE_MAVEN_ONLINE"] = "0"
    client = get_client()
    task = Catalog.from_options(Path(__file__).resolve().parent.parent / "tasks").get(TASK)
    figures: dict[str, object] = {}
    had_image = True
    try:
        client.images.get(java_image_tag())
    except ImageNotFound:
        had_image = False
    t0 = time.monotonic()
    ensure_java_image(client)
    if not had_image:
        figures["java_image_build_s"] = round(time.monotonic() - t0, 1)

    def score(repo: Path, profile: str = "both", cache: bool = False) -> tuple[float, dict[str, tuple]]:
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as out:
            r = score_repo(
                task,
                repo,
                ScoreRequest(profile=profile_choice(profile), use_cache=cache, output_dir=Path(out)),
                ScoreOptions(client=client),
            )
        seconds = round(time.monotonic() - started, 1)
        return seconds, {n: (p.outcome, p.dsr.success, p.pass_at_1.score) for n, p in r.profiles.items()}

    results: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(task.solution_dir, repo)

        def nonce() -> None:
            (repo / "NOTES.md").write_text(f"{uuid.uuid4()}\n")

        cold, warm, strict_only, compat_only = [], [], [], []
        for _ in range(args.reps):
            # strict and compat share the layer when the pom needs no rewrite (this one does not)
            tag = jdeps_tag(ensure_java_image(client), repo_poms(repo), MavenSources())
            try:
                client.images.remove(tag, force=True)
            except ImageNotFound:
                pass
            nonce()
            s, r = score(repo)
            cold.append(s)
            results.add(json.dumps(r, sort_keys=True))
            nonce()
            s, r = score(repo)
            warm.append(s)
            results.add(json.dumps(r, sort_keys=True))
            nonce()
            strict_only.append(score(repo, "strict")[0])
            nonce()
            compat_only.append(score(repo, "compat")[0])
        score(repo, cache=True)
        hit, _ = score(repo, cache=True)
    figures.update(
        {
            "reps": args.reps,
            "cold_both_s": statistics.median(cold),
            "cached_layer_both_s": statistics.median(warm),
            "cached_layer_strict_s": statistics.median(strict_only),
            "cached_layer_compat_s": statistics.median(compat_only),
            "result_cache_hit_s": hit,
            "runs": {"cold": cold, "cached_layer": warm},
            "identical_scores": len(results) == 1,
            "scores": json.loads(next(iter(results))),
        }
    )
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if len(results) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
