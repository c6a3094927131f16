#!/usr/bin/env bash
# Time a newcomer's first demo (issue 41): a fresh clone, an empty pip cache, an empty bridge
# cache and no scoring image of its own, then `bash scripts/demo.sh`, step by step.
#
#   bash bench/newcomer.sh [REPS]     (default 1; run as root, like the demo)
#
# The engine may be shared (other people's images stay untouched): the run gets image tags of its
# own through RGBRIDGE_IMAGE_SALT (mixed into the base recipe hash, so base and tester are built
# from nothing, rootfs included), and it removes only the images with those tags afterwards. What
# this cannot empty is the engine's own state and the host's apt/debootstrap downloads (debootstrap
# fetches from the host's mirror every time). Prints one line per run:
#   run N: setup S s, images I s, demo run D s, total T s (PASS|FAIL)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-1}"
src="$PWD"
for rep in $(seq 1 "$reps"); do
  work="$(mktemp -d /tmp/rgbridge-newcomer-XXXXXX)"
  git clone -q "$src" "$work/clone"
  salt="newcomer-$(date +%s)-$rep-$$"
  log="$work/demo.log"
  rc=0
  (
    cd "$work/clone"
    unset RGBRIDGE_WHEEL_CACHE VIRTUAL_ENV PYTHONPATH
    export RGBRIDGE_IMAGE_SALT="$salt" XDG_CACHE_HOME="$work/xdg-cache" PIP_CACHE_DIR="$work/pip-cache"
    export RGBRIDGE_CACHE="$work/rgbridge-cache" RGBRIDGE_HOME="$work/rgbridge-home"
    bash scripts/demo.sh 2>&1 | tee "$log"
  ) || rc=$?
  took() { sed -n "s/^demo: \[[0-9]* s\]   $1 took \([0-9]*\) s$/\1/p" "$log" | tail -1; }
  total="$(sed -n 's/^demo: total \([0-9]*\) s$/\1/p' "$log" | tail -1)"
  verdict=FAIL
  grep -q "PASS: Pass@1 = 1.0" "$log" && [ "$rc" = 0 ] && verdict=PASS
  # only this run's images: the salted base and tester tags
  tags="$(cd "$work/clone" && RGBRIDGE_IMAGE_SALT="$salt" .venv/bin/python -c '
from bridge.scoring.images.base import base_image_tag
from bridge.scoring.images.base.tester import tester_image_tag
print(tester_image_tag(base_image_tag()), base_image_tag())' 2>/dev/null || true)"
  # the salted base's id: sets in volumes tag it too (rgbridge-deps:*), with their volumes and
  # the base's seed volume; those, and nothing else, go with it
  base_tag="$(echo "$tags" | tail -1)"
  base_id="$(docker image inspect -f '{{.Id}}' "$base_tag" 2>/dev/null | sed 's/^sha256://' | cut -c1-12 || true)"
  if [ -n "$base_id" ]; then
    for deps in $(docker images --filter reference='rgbridge-deps:*' --format '{{.Repository}}:{{.Tag}} {{.ID}}' |
      awk -v id="$base_id" '$2 == id {print $1}'); do
      tags="$tags $deps"
      vol="rgbridge-env-${deps#rgbridge-deps:}"
      docker volume rm "$vol" >/dev/null 2>&1 || true
    done
    docker volume rm "rgbridge-seed-$base_id" >/dev/null 2>&1 || true
  fi
  for tag in $tags; do
    docker image rm "$tag" >/dev/null 2>&1 || true
  done
  echo "run $rep: setup $(took setup) s, images $(took images) s, demo run $(took 'demo run') s, total ${total:-?} s ($verdict)"
  grep -E "^setup:|fetched on the host|rootfs built in|imported |image ready in|scored in" "$log" | sed 's/^/  /' || true
  rm -rf "$work"
done
