#!/bin/bash
# Build (offline) unless already compiled, then run the service in the foreground on 7080.
set -e
cd "$(dirname "$0")"
if [ ! -f target/classes/com/example/links/App.class ]; then
  mvn -o -q -DskipTests compile
fi
exec java -cp target/classes com.example.links.App
