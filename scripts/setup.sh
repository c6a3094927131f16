#!/usr/bin/env bash
# Install everything repogenesis-bridge needs on a fresh Debian machine (idempotent).
# System: debootstrap (builds the scoring base image without a registry), git, chromium (HTML
# report screenshots in the tests), tmux (the human panel's terminal test), bubblewrap (the
# sandbox of `rgbridge run`). Python: the project and its test extras, editable, into the virtual
# environment `.venv` of the checkout (created here; the system's Python packages are never
# touched). The extras include the `agents` extra: Claude Code and the Codex CLI from PyPI, for
# the real-agent tests and `rgbridge run`.
#
# `--demo` (scripts/demo.sh): only what the demo uses. The system tools the base image build needs
# (debootstrap, git) and the project WITHOUT extras; the pip step is skipped when `.venv` was set
# up from this same pyproject.toml already (a stamp in .venv). Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=test
if [ "${1:-}" = "--demo" ]; then
  mode=demo
fi

step_start=$SECONDS
step() { echo "setup: $*" >&2; step_start=$SECONDS; }
done_step() { echo "setup:   done in $((SECONDS - step_start)) s" >&2; }

need_apt=()
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
if [ "$mode" = test ]; then
  command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
  command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
  if [ "${RGBRIDGE_SKIP_CHROMIUM:-0}" != "1" ]; then
    command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != "0" ]; then
    echo "setup: please install as root: apt-get install -y ${need_apt[*]}" >&2
    exit 1
  fi
  step "apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  done_step
fi

# The interpreter the venv is made from (PYTHON overrides); everything after uses .venv's.
BASE_PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  step "creating the virtual environment .venv"
  "$BASE_PY" -m venv .venv
  done_step
fi
PY=.venv/bin/python
stamp=.venv/rgbridge-setup.stamp
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $PWD"
if [ "$mode" = demo ]; then
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "setup: the project is installed in .venv already (pyproject.toml unchanged)" >&2
  else
    step "pip install -e . (the project and its runtime dependencies, no test extras)"
    "$PY" -m pip install -q --disable-pip-version-check -e .
    echo "$want" >"$stamp"
    done_step
  fi
else
  step "pip install -e .[test] (the project, its test extras and the agent CLIs)"
  "$PY" -m pip install -q --disable-pip-version-check -e ".[test]"
  echo "$want" >"$stamp"  # a superset of the demo's install
  done_step
fi

if ! docker info >/dev/null 2>&1 && ! "$PY" -c "import docker; docker.from_env().ping()" >/dev/null 2>&1; then
  echo "setup: warning: no Docker engine answers (scoring needs one; set DOCKER_HOST for a remote engine)" >&2
fi
