#!/usr/bin/env bash
# Time a newcomer's first demo (issue 41): a fresh clone, an empty pip cache, an empty bridge
# cache and no scoring image of its own, then `bash scripts/demo.sh`, step by step.
#
#   bash bench/newcomer.sh [REPS]     (default 1; run as root, like the demo)
#
# The engine may be shared (other people's images stay untouched): the run gets image tags of its
# own through RGBRIDGE_IMAGE_SALT (mixed into the base recipe hash, so base and tester are built
# from nothing, rootfs included), and afterwards it removes only the images labelled with that recipe
# (base, tester, the sets on them) and their sets' and seed volumes, again for up to a minute
# while the demo's server still tags a set or compiles into it. What
# this cannot empty is the engine's own state and the host's apt/debootstrap downloads (debootstrap
# fetches from the host's mirror every time). Prints one line per run:
#   run N: setup S s, images I s, demo run D s, total T s (PASS|FAIL)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-1}"
src="$PWD"
volumes_of() {  # the set volumes and seed volumes of the images labelled with recipe $1
  local ref id short
  for ref in $(docker images --filter "label=rgbridge.recipe=$1" --format '{{.Repository}}:{{.Tag}}'); do
    case "$ref" in rgbridge-deps:*) echo "rgbridge-env-${ref#rgbridge-deps:}" ;; esac
  done
  for id in $(docker images -a -q --no-trunc --filter "label=rgbridge.recipe=$1" | sort -u); do
    short="${id#sha256:}"
    echo "rgbridge-seed-${short:0:12}"
  done
}
for rep in $(seq 1 "$reps"); do
  work="$(mktemp -d /tmp/rgbridge-newcomer-XXXXXX)"
  git clone -q "$src" "$work/clone"
  salt="newcomer-$(date +%s)-$rep-$$"
  log="$work/demo.log"
  rc=0
  (
    cd "$work/clone"
    # a newcomer's shell: none of this session's Python settings (PYTHONDONTWRITEBYTECODE would
    # make every process of the demo compile the bridge's modules again)
    unset RGBRIDGE_WHEEL_CACHE VIRTUAL_ENV PYTHONPATH PYTHONDONTWRITEBYTECODE
    export RGBRIDGE_IMAGE_SALT="$salt" XDG_CACHE_HOME="$work/xdg-cache" PIP_CACHE_DIR="$work/pip-cache"
    export RGBRIDGE_CACHE="$work/rgbridge-cache" RGBRIDGE_HOME="$work/rgbridge-home"
    bash scripts/demo.sh 2>&1 | tee "$log"
  ) || rc=$?
  took() { sed -n "s/^demo: \[[0-9]* s\]   $1 took \([0-9]*\) s$/\1/p" "$log" | tail -1; }
  total="$(sed -n 's/^demo: total \([0-9]*\) s$/\1/p' "$log" | tail -1)"
  verdict=FAIL
  grep -q "PASS: Pass@1 = 1.0" "$log" && [ "$rc" = 0 ] && verdict=PASS
  # only this run's images: every image labelled with the salted base recipe (the base, the
  # tester, sets on them), the sets' volumes and the seed volumes of those images
  recipe="$(cd "$work/clone" && RGBRIDGE_IMAGE_SALT="$salt" .venv/bin/python -c '
from bridge.scoring.images.base import base_recipe_hash
print(base_recipe_hash())' 2>/dev/null || true)"
  if [ -n "$recipe" ]; then
    # The demo's server may still tag a set (pip's verdict) or compile into it after the result
    # came: clean up until nothing of this recipe is left (at most a minute), then say what stayed.
    vols=""
    for _try in $(seq 1 12); do
      vols="$(printf '%s\n' $vols $(volumes_of "$recipe") | sort -u)"
      refs="$(docker images --filter "label=rgbridge.recipe=$recipe" --format '{{.Repository}}:{{.Tag}}' | grep -v '<none>' || true)"
      for vol in $vols; do docker volume rm "$vol" >/dev/null 2>&1 || true; done
      [ -z "$refs" ] || docker image rm $refs >/dev/null 2>&1 || true
      left="$(docker images -a -q --filter "label=rgbridge.recipe=$recipe")"
      kept="$(for vol in $vols; do docker volume ls -q --filter "name=^$vol\$"; done)"
      [ -z "$left$kept" ] && break
      sleep 5
    done
    [ -z "$kept" ] || echo "run $rep: volumes left on the engine: $kept" >&2
    [ -z "$left" ] || echo "run $rep: left on the engine (recipe $recipe): $left" >&2
  fi
  echo "run $rep: setup $(took setup) s, images $(took images) s, demo run $(took 'demo run') s, total ${total:-?} s ($verdict)"
  grep -E "^setup:|fetched on the host|uv ready|second stage|installed beside the base|rootfs built in|imported |image ready in|package index \(probed|scored in" "$log" | sed 's/^/  /' || true
  rm -rf "$work"
done
