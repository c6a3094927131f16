#!/bin/bash
# rgbridge Java dependency layer: resolve what the project's poms need into /opt/m2/repository.
# Runs during the layer's image build, as uid 10001, in /tmp/rgbridge-build/project (the repo's
# pom.xml files plus a stub main class and test). Order: the local repository only (Debian's
# packaged repository + a user-prepared one); then, if that misses artifacts and online
# resolution is allowed, the repositories of Maven's configuration (or the user's settings.xml).
# Exit 0 = resolved; 10 = artifacts missing and no repository could provide them; 11 = a build
# failure that is not about resolution (a broken pom).
set -u
B=/tmp/rgbridge-build
REPO_LOCAL=/opt/m2/repository
if [ -f "$B/repo/maven-repo.tar" ]; then
  tar -xf "$B/repo/maven-repo.tar" -C "$REPO_LOCAL" || exit 11
fi
SETTINGS=()
if [ -f "$B/settings.xml" ]; then SETTINGS=(-s "$B/settings.xml"); fi
FORCED=(-DskipTests=false -Dmaven.test.skip=false -Dmaven.test.failure.ignore=true -DfailIfNoTests=false)
RESOLUTION='could not be resolved|Could not resolve|has not been downloaded from it before|Cannot access .* in offline mode|Could not find artifact|Could not transfer|Failed to read artifact descriptor|Non-resolvable'
cd "$B/project" || exit 11
touch "$B/.start"
forget_origins() {
  # Scoring runs offline with Maven's default repositories only: artifacts must not stay tied
  # to the repository id they came from (a mirror's, the cache's), nor keep cached failures.
  find "$REPO_LOCAL" \( -name _remote.repositories -o -name '*.lastUpdated' -o -name 'resolver-status.properties' \) \
       -type f -delete 2>/dev/null
}

mvn -B -o -Dmaven.repo.local="$REPO_LOCAL" "${FORCED[@]}" test > "$B/offline.log" 2>&1
if [ $? -eq 0 ]; then
  echo "RGBRIDGE_RESOLVED=local"
  exit 0
fi
tail -60 "$B/offline.log"
if ! grep -Eq "$RESOLUTION" "$B/offline.log"; then
  echo "RGBRIDGE_RESOLUTION=build_failed"
  exit 11
fi
if [ -f "$B/cache-settings.xml" ]; then
  # The host's shared cache of artifacts earlier layers downloaded (served for this build only).
  mvn -B -gs "$B/cache-settings.xml" "${FORCED[@]}" test > "$B/cache.log" 2>&1
  if [ $? -eq 0 ]; then
    forget_origins
    echo "RGBRIDGE_RESOLVED=cache"
    exit 0
  fi
fi
MISSING=$(grep -Eo '[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:(jar|pom|war|maven-plugin|test-jar)(:[A-Za-z0-9_.-]+)?:[A-Za-z0-9_.-]+' "$B/offline.log" | sort -u | tr '\n' ' ')
PLUGINS=$(grep -Eo 'Plugin [A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+ or one' "$B/offline.log" | awk '{print $2}' | sort -u | tr '\n' ' ')
if [ "${RGBRIDGE_MAVEN_ONLINE:-1}" = "0" ]; then
  echo "RGBRIDGE_MISSING=$MISSING $PLUGINS"
  echo "RGBRIDGE_RESOLUTION=unreachable (online resolution disabled)"
  exit 10
fi
mvn -B -Dmaven.repo.local="$REPO_LOCAL" "${SETTINGS[@]}" "${FORCED[@]}" \
    -Dmaven.wagon.http.retryHandler.count=1 -Dmaven.wagon.rto=30000 \
    -Daether.connector.connectTimeout=15000 -Daether.connector.requestTimeout=30000 \
    test > "$B/online.log" 2>&1
if [ $? -eq 0 ]; then
  forget_origins
  # What was downloaded goes to the host's shared cache after the build (mavencache.py).
  find "$REPO_LOCAL" -type f -newer "$B/.start" > /opt/m2/rgbridge-downloaded.txt 2>/dev/null
  echo "RGBRIDGE_RESOLVED=online"
  exit 0
fi
tail -40 "$B/online.log"
echo "RGBRIDGE_MISSING=$MISSING $PLUGINS"
if grep -Eq 'Could not transfer|Unknown host|UnknownHost|Connect(ion)? (timed out|refused)|Network is unreachable|No route to host|Temporary failure in name resolution|transfer failed' "$B/online.log"; then
  echo "RGBRIDGE_RESOLUTION=unreachable"
  exit 10
fi
if grep -Eq "$RESOLUTION" "$B/online.log"; then
  echo "RGBRIDGE_RESOLUTION=not_found"
else
  echo "RGBRIDGE_RESOLUTION=build_failed"
fi
exit 11
