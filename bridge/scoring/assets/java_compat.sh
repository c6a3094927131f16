#!/bin/bash
# rgbridge compat for Java: the build steps of upstream's Dockerfile.java, then the shared
# upstream entrypoint (compat_entrypoint.sh) with REPO_LANG=java. The Java 11 -> 17 pom edit and
# the golden src/test replacement were applied to /repo before it was copied in.
# Upstream swallows both Maven steps' errors (`|| true`, `2>/dev/null`); so do we. Their output
# is kept in $RESULTS_DIR/compat-build.log (upstream's went to the docker build log), never in
# the graded container log.
cd "${REPO_DIR:-/repo}" || exit 2
RESULTS_DIR="${RESULTS_DIR:-/results}"
mkdir -p "$RESULTS_DIR" 2>/dev/null
{
  echo ">>> mvn dependency:go-offline -q"
  if [ -f pom.xml ]; then mvn dependency:go-offline -q || true; fi
  echo ">>> mvn clean compile -DskipTests -q"
  if [ -f pom.xml ]; then mvn clean compile -DskipTests -q || true; fi
} > "$RESULTS_DIR/compat-build.log" 2>&1
exec bash "$(dirname "$0")/compat_entrypoint.sh"
