#!/bin/bash
# rgbridge's install script of a dependency set, run by the build container
# (bridge/scoring/images/sets/buildbox.py copies it next to the requirement files and starts it).
#
# Settings: environment variables, exported by install.env next to this script (the host
# writes it; buildbox.install_settings names them) -- never the container's own environment,
# which a commit would keep in the image:
#   RGBRIDGE_MODE          index | pip | local
#     index: uv resolves and installs each file in turn as pip would (every index searched for
#            the best version, the host's index settings, cached wheels for identical files);
#            then pip's own dry run over all the files must find nothing left to install, else
#            the build exits RGBRIDGE_UV_REJECTED and the host rebuilds it in pip mode
#     pip:   pip alone, the package cache offered as the last extra index (pip prefers the later
#            index for an identical file, so a cached wheel is not downloaded again)
#     local: no network: the cache and a wheelhouse only (--no-index)
#   RGBRIDGE_FILES         the requirement files' names (in this folder), in install order
#   RGBRIDGE_READY_MARK    printed once the environment is final, before pip's check ("": none)
#   RGBRIDGE_CHECKED_MARK  printed once pip accepted the set, before the bytecode (compile late)
#   RGBRIDGE_CHECK         1: pip's check runs here; 0: the caller runs it
#   RGBRIDGE_COMPILE_LATE  1: bytecode after the ready mark and pip's verdict (sets in volumes),
#                          off the score's critical path; 0: compiled by the last file's install
#   RGBRIDGE_HOLD_COMPILE  1 (with compile late and a ready mark): after the verdict the
#                          bytecode waits for RGBRIDGE_GO_SIGNAL (the host sends it when the score
#                          beside it is over) or RGBRIDGE_HOLD_LIMIT seconds
#   RGBRIDGE_UV_REJECTED   exit status of a build whose uv install pip does not accept
#   RGBRIDGE_CACHE_DIR RGBRIDGE_OUTBOX_DIR RGBRIDGE_TOOLS_DIR
#                          read-only mounts: the package cache's view, a wheelhouse, the uv binary
#   RGBRIDGE_SCRATCH       where pip's cache and report go (removed at exit)
#   RGBRIDGE_BYTECODE_DIR  (index mode, compile late) a read-only mount of the bytecode store
#                          (bridge/scoring/images/sets/bytecode.py): the keys of the
#                          distributions the installs added that the store lacks are printed
#                          before the ready mark (a line RGBRIDGE_BYTECODE_MISSING); the store's
#                          hash-checked .pyc files of the others are copied in after it, beside
#                          the score, each file whole, none overwritten ("": no store)
#   RGBRIDGE_TWIN_DIR      (index mode) where a second, empty set's volume is mounted ("": none;
#                          bridge/scoring/images/sets/twin.py): once the first
#                          RGBRIDGE_TWIN_AFTER files are installed, the environment is copied
#                          there (uv's cache and lock left out: what a build of those files
#                          alone leaves) and RGBRIDGE_TWIN_MARK printed; that set gets its own
#                          pip check (the mark + _CHECKED, or + _REJECTED with the set emptied),
#                          the store's bytecode of its distributions and its late compile
# pip.env (next to this script) holds the host's pip index settings. A file verify.sh there is
# sourced after the installs in index mode (a delta build's check, closest.py).
#
# The first line of output names the active environment's prefix (the folder the host exports
# as the layer), printed before anything of the agent's runs. The build writes nothing on the
# host: the host fills the package cache itself.
set -u
BUILD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$BUILD_DIR/install.env"
SCRATCH="$RGBRIDGE_SCRATCH"
# The build files never reach the layer, whatever way the script ends.
trap 'rm -rf "$BUILD_DIR" "$SCRATCH/rgbridge-pip" "$SCRATCH/rgbridge-report.json" "$SCRATCH/rgbridge-twin-report.json"' EXIT
hold=0
if [ "$RGBRIDGE_COMPILE_LATE" = 1 ] && [ "$RGBRIDGE_HOLD_COMPILE" = 1 ] && [ -n "$RGBRIDGE_READY_MARK" ]; then
  # set before anything is printed: the host signals only after the verdict's mark
  hold=1
  go=0
  trap 'go=1' "$RGBRIDGE_GO_SIGNAL"
fi
# wait for a trapped signal's flag (named by $1) or the hold limit; `wait` returns as soon as a
# trapped signal arrives, a signal between the test and `wait` costs one more second at most
held() {
  while [ "${!1}" = 0 ] && [ "$SECONDS" -lt "$RGBRIDGE_HOLD_LIMIT" ]; do
    sleep 1 &
    wait $! 2>/dev/null
  done
}
# the environment's prefix, and that of a venv ("" otherwise), from one interpreter start
PREFIX="" VENV_PREFIX="" SITE=""
{ read -r PREFIX; read -r VENV_PREFIX; read -r SITE; } < <(python -c 'import sys, sysconfig; print(sys.prefix); print(sys.prefix if sys.prefix != sys.base_prefix else ""); print(sysconfig.get_paths()["purelib"])')
echo "RGBRIDGE_PREFIX=$VENV_PREFIX"
. "$BUILD_DIR/pip.env"
export PIP_CACHE_DIR="$SCRATCH/rgbridge-pip"
# phase times in build.log (where a slow build spends its time)
phase() { echo "RGBRIDGE_PHASE $1 $(date +%s.%N)"; }
pip_() { python -m pip "$@" --progress-bar off; }
phase start
TWIN="${RGBRIDGE_TWIN_DIR:-}"
[ "$RGBRIDGE_MODE" = index ] || TWIN=""
TWIN_SITE="$TWIN${SITE#"$PREFIX"}"
twin_made=0
reqs=()
for name in $RGBRIDGE_FILES; do reqs+=("$BUILD_DIR/$name"); done

if [ "$RGBRIDGE_MODE" = local ]; then
  for r in "${reqs[@]}"; do
    pip_ install --no-index --find-links "$RGBRIDGE_OUTBOX_DIR" --find-links "$RGBRIDGE_CACHE_DIR/flat" -r "$r" || exit 1
  done
  exit 0
fi

if [ "$RGBRIDGE_MODE" = pip ]; then
  export PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }file://$RGBRIDGE_CACHE_DIR/simple/"
  echo RGBRIDGE_INSTALLER=pip
  for r in "${reqs[@]}"; do
    pip_ install -r "$r" || exit 1
  done
  phase installed
  exit 0
fi

export SSL_CERT_FILE="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
# the host's pip index settings, as uv spells them
UV_INDEX_ARGS=()
[ -n "${PIP_INDEX_URL:-}" ] && UV_INDEX_ARGS+=(--index-url "$PIP_INDEX_URL")
for u in ${PIP_EXTRA_INDEX_URL:-}; do UV_INDEX_ARGS+=(--extra-index-url "$u"); done
for h in ${PIP_TRUSTED_HOST:-}; do UV_INDEX_ARGS+=(--allow-insecure-host "$h"); done
echo RGBRIDGE_INSTALLER=uv
# the distributions already there (the base's, or a closest set's): the store's bytecode is
# copied for the ones the installs add
dists_before=" "
for d in "$SITE"/*.dist-info; do dists_before+="${d##*/} "; done
# uv unpacks wheels into its cache and hard-links them into the environment: with the cache on
# the environment's own file system (a folder in it, removed before anyone sees the
# environment) nothing is copied twice; the installed files stay when the cache goes
UV_CACHE="$PREFIX/.rgbridge-uv-cache"
i=0
for r in "${reqs[@]}"; do
  i=$((i + 1))
  # bytecode by the last file's install (uv compiles the whole environment: once is enough)
  compile=()
  [ "$i" = "${#reqs[@]}" ] && [ "$RGBRIDGE_COMPILE_LATE" != 1 ] && compile=(--compile-bytecode)
  "$RGBRIDGE_TOOLS_DIR/uv" pip install --python "$(command -v python)" --index-strategy unsafe-best-match \
    --find-links "$RGBRIDGE_CACHE_DIR/flat" "${compile[@]}" --link-mode hardlink --cache-dir "$UV_CACHE" \
    "${UV_INDEX_ARGS[@]}" -r "$r" || { echo "RGBRIDGE_UV_REJECTED uv could not install $r"; exit "$RGBRIDGE_UV_REJECTED"; }
  phase installed
  if [ -n "$TWIN" ] && [ "$i" = "$RGBRIDGE_TWIN_AFTER" ]; then
    # the environment as these files left it is the twin set: copied whole, attributes kept
    if find "$PREFIX" -mindepth 1 -maxdepth 1 ! -name .rgbridge-uv-cache ! -name .lock -exec cp -a -t "$TWIN" {} +; then
      twin_made=1
      phase twin
      echo "$RGBRIDGE_TWIN_MARK"
    else
      echo "RGBRIDGE_TWIN_FAILED the environment could not be copied"
      find "$TWIN" -mindepth 1 -delete 2>/dev/null
      TWIN=""
    fi
  fi
done
[ "$twin_made" = 1 ] || TWIN=""
if [ -f "$BUILD_DIR/verify.sh" ]; then
  . "$BUILD_DIR/verify.sh"
fi
# uv's lock file in the environment folder is not part of what pip would leave there
rm -rf "$UV_CACHE" "$PREFIX/.lock"
phase cleaned
# the store's keys of the distributions in site-packages $1 that were not there before the
# installs: those the store has go to the array named by $2, the others to `missing`.
# A key is the .dist-info folder's name and version, normalised as bytecode.key_of does.
missing=()
store_keys() {
  local -n have=$2
  local d folder stem name version key
  for d in "$1"/*.dist-info; do
    folder="${d##*/}"
    [[ "$dists_before" == *" $folder "* ]] && continue
    stem="${folder%.dist-info}"
    name="${stem%%-*}" version="${stem#*-}"
    name="${name//[-.]/_}"
    while [[ "$name" == *__* ]]; do name="${name//__/_}"; done
    key="${name,,}-${version,,}"
    if [ -d "$RGBRIDGE_BYTECODE_DIR/$key" ]; then
      have+=("$key")
    elif [[ " ${missing[*]} " != *" $key "* ]]; then
      missing+=("$key")
    fi
  done
}
bytecode=() twin_bytecode=()
if [ -n "${RGBRIDGE_BYTECODE_DIR:-}" ] && [ "$RGBRIDGE_COMPILE_LATE" = 1 ]; then
  # hash-checked bytecode compiled from the same wheels by a container that only reads them;
  # Python uses a file only when its source hashes the same, so a copy never changes a module.
  store_keys "$SITE" bytecode
  [ -n "$TWIN" ] && store_keys "$TWIN_SITE" twin_bytecode
  echo "RGBRIDGE_BYTECODE_MISSING ${missing[*]}"
fi
if [ -n "$RGBRIDGE_READY_MARK" ]; then
  echo "$RGBRIDGE_READY_MARK"
fi
# beside the score: each file is written aside and renamed, so an import sees it whole or not
# at all (a module imported before its file arrives is compiled in memory, as without it)
copy_store() {
  python - "$RGBRIDGE_BYTECODE_DIR" "$@" <<'PY'
import os, shutil, sys
store, site, keys = sys.argv[1], os.path.normpath(sys.argv[2]), sys.argv[3:]
for key in keys:
    src = os.path.join(store, key)
    for root, _dirs, files in os.walk(src):
        folder = os.path.normpath(os.path.join(site, os.path.relpath(root, src)))
        if not folder.startswith(site + os.sep):
            continue
        for f in files:
            dest = os.path.join(folder, f)
            if not f.endswith(".pyc") or os.path.lexists(dest):
                continue
            try:
                os.makedirs(folder, exist_ok=True)
                shutil.copyfile(os.path.join(root, f), dest + ".part")
                os.replace(dest + ".part", dest)
            except OSError:
                pass
PY
}
copying="" twin_copying=""
if [ "${#bytecode[@]}" -gt 0 ]; then
  copy_store "$SITE" "${bytecode[@]}" &
  copying=$!
fi
if [ "${#twin_bytecode[@]}" -gt 0 ]; then
  copy_store "$TWIN_SITE" "${twin_bytecode[@]}" &
  twin_copying=$!
fi
# pip's own dry run of the files (-r options after $2) with the pip of the interpreter $1 finds
# nothing to install in that interpreter's environment (its report, $2, lists no install)
pip_accepts() {
  local py="$1" report="$2"
  shift 2
  "$py" -m pip install --dry-run --no-index --quiet --progress-bar off --report "$report" "$@" &&
    python3 -c 'import json, sys; sys.exit(1 if json.load(open(sys.argv[1])).get("install") else 0)' "$report"
}
twin_checking=""
if [ -n "$TWIN" ] && [ "$RGBRIDGE_CHECK" = 1 ]; then
  # the twin's own check, as its own build would run it (its files, its environment's pip),
  # beside this set's; its acceptance is printed at once, a rejection by twin_verdict
  (
    files=()
    for r in "${reqs[@]:0:$RGBRIDGE_TWIN_AFTER}"; do files+=(-r "$r"); done
    pip_accepts "$TWIN/bin/python" "$SCRATCH/rgbridge-twin-report.json" "${files[@]}" && echo "${RGBRIDGE_TWIN_MARK}_CHECKED"
  ) &
  twin_checking=$!
fi
# the twin's verdict, before this build ends either way. Rejected, the twin is emptied before
# its mark (the host builds it again in its volume, which this container may still hold) and
# gets no bytecode.
twin_verdict() {
  if [ -n "$twin_checking" ] && ! wait "$twin_checking"; then
    [ -n "$twin_copying" ] && wait "$twin_copying"
    find "$TWIN" -mindepth 1 -delete 2>/dev/null
    echo "${RGBRIDGE_TWIN_MARK}_REJECTED pip does not accept what uv installed"
    TWIN="" twin_copying=""
  fi
  twin_checking=""
}
if [ "$RGBRIDGE_CHECK" = 1 ]; then
  # pip's own dry run of every file in the environment uv made installs nothing: pip's rules
  # (specifiers, markers, extras, pre-releases) accept what uv chose. --no-index: an installed
  # distribution that satisfies a requirement needs no index, and one that does not makes the
  # dry run fail, which rejects uv's result all the same. One run over all the files: the final
  # environment must satisfy each of them, and files that conflict with each other are rejected
  # (pip then installs them in turn).
  files=()
  for r in "${reqs[@]}"; do files+=(-r "$r"); done
  pip_accepts python "$SCRATCH/rgbridge-report.json" "${files[@]}" ||
    { twin_verdict; echo 'RGBRIDGE_UV_REJECTED pip does not accept what uv installed'; exit "$RGBRIDGE_UV_REJECTED"; }
  phase checked
fi
twin_verdict
if [ "$RGBRIDGE_COMPILE_LATE" = 1 ]; then
  # what uv's --compile-bytecode does: every module of the environment's site-packages. What a
  # score imports before its file is written is compiled in memory; each .pyc appears whole.
  if [ -n "$RGBRIDGE_READY_MARK" ]; then
    echo "$RGBRIDGE_CHECKED_MARK"
  fi
  if [ "$hold" = 1 ]; then
    held go
  fi
  for job in $copying $twin_copying; do
    wait "$job"
  done
  [ -n "$copying$twin_copying" ] && phase bytecode
  # modules that have bytecode already (the store's) are left as they are; the twin's too (the
  # path a .pyc records is the one it was compiled at: imports replace it with the module's own)
  python -c 'import compileall, functools, os, sys; from importlib.util import cache_from_source as pyc
from concurrent.futures import ProcessPoolExecutor
todo = [os.path.join(r, f) for site in sys.argv[1:] for r, _, fs in os.walk(site) for f in fs if f.endswith(".py") and not os.path.exists(pyc(os.path.join(r, f)))]
if todo:
    with ProcessPoolExecutor() as pool:
        list(pool.map(functools.partial(compileall.compile_file, force=True, quiet=1), todo, chunksize=64))' "$SITE" ${TWIN:+"$TWIN_SITE"} >/dev/null
  phase compiled
fi
exit 0
