#!/usr/bin/env bash
# Install everything repogenesis-bridge needs on a fresh Debian machine (idempotent).
# System: debootstrap (builds the scoring base image without a registry), git, chromium (HTML
# report screenshots in the tests). Python: the project and its test extras, editable (they
# include the `agents` extra: Claude Code and the Codex CLI from PyPI, for tests/test_agent_clis.py).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
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

PY="${PYTHON:-python3}"
"$PY" -m pip install -q --disable-pip-version-check -e ".[test]"

if ! docker info >/dev/null 2>&1 && ! "$PY" -c "import docker; docker.from_env().ping()" >/dev/null 2>&1; then
  echo "setup: warning: no Docker engine answers (scoring needs one; set DOCKER_HOST for a remote engine)" >&2
fi
