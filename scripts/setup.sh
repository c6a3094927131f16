#!/usr/bin/env bash
# Install everything repogenesis-bridge needs on a fresh Debian machine (idempotent).
# System: debootstrap (builds the scoring base image without a registry), git, chromium (HTML
# report screenshots in the tests), tmux (the human panel's terminal test), bubblewrap (the
# sandbox of `rgbridge run`). Python: the project and its test extras, editable, into the virtual
# environment `.venv` of the checkout (created here; the system's Python packages are never
# touched). The extras include the `agents` extra: Claude Code and the Codex CLI from PyPI, for
# the real-agent tests and `rgbridge run`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
if [ "${RGBRIDGE_SKIP_CHROMIUM:-0}" != "1" ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != "0" ]; then
    echo "setup: please install as root: apt-get install -y ${need_apt[*]}" >&2
    exit 1
  fi
  echo "setup: apt-get install ${need_apt[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# The interpreter the venv is made from (PYTHON overrides); everything after uses .venv's.
BASE_PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the virtual environment .venv" >&2
  "$BASE_PY" -m venv .venv
fi
PY=.venv/bin/python
"$PY" -m pip install -q --disable-pip-version-check -e ".[test]"

if ! docker info >/dev/null 2>&1 && ! "$PY" -c "import docker; docker.from_env().ping()" >/dev/null 2>&1; then
  echo "setup: warning: no Docker engine answers (scoring needs one; set DOCKER_HOST for a remote engine)" >&2
fi
