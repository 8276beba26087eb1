#!/usr/bin/env bash
# Sets up the peer word count (benchmarks/peers/run.py), once; not part of `make setup` or the tests.
#
# - Apache Storm 2.8.3: storm-client and storm-server with their runtime dependencies, fetched from Maven Central
#   with Maven (pom.xml) into .cache/storm-<version>/lib, and storm/PeerWordCount.java compiled into
#   .cache/classes. Needs mvn and a JDK 17 (`apt-get install maven openjdk-17-jdk-headless` on Debian).
# - Bytewax 0.21.1: a venv of its own, .venv-bytewax, made with python3 (3.11 here), with `bytewax==0.21.1`
#   from PyPI. The project's venv is not touched.
#
# Both live in this directory and git ignores them (.gitignore). Run again after changing the Java file: the jars
# and the venv are kept, the class files are rebuilt.
#
#     bash benchmarks/peers/setup.sh
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
storm_version=2.8.3
bytewax_version=0.21.1
lib="$here/.cache/storm-$storm_version/lib"

command -v mvn >/dev/null 2>&1 || { echo "mvn is missing: apt-get install maven" >&2; exit 1; }
command -v javac >/dev/null 2>&1 || { echo "javac is missing: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }

if [ ! -f "$lib/.complete" ]; then
    echo "fetching Apache Storm $storm_version from Maven Central into $lib"
    rm -rf "$lib"
    mkdir -p "$lib"
    mvn -q -B -f "$here/pom.xml" -Dstorm.version="$storm_version" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib"
    ls "$lib/storm-client-$storm_version.jar" "$lib/storm-server-$storm_version.jar" >/dev/null
    touch "$lib/.complete"
fi

echo "compiling storm/PeerWordCount.java"
rm -rf "$here/.cache/classes"
mkdir -p "$here/.cache/classes"
javac -d "$here/.cache/classes" -cp "$lib/*" "$here/storm/PeerWordCount.java"

venv="$here/.venv-bytewax"
if [ ! -f "$venv/.complete" ]; then
    echo "making $venv with bytewax==$bytewax_version"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "bytewax==$bytewax_version"
    touch "$venv/.complete"
fi
echo "ready: python benchmarks/peers/run.py (from the repository's root, with the project's venv)"
