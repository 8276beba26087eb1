#!/usr/bin/env bash
# Fetches Apache Kafka's broker jars (org.apache.kafka:kafka_2.13 with its runtime
# dependencies) from Maven Central with Maven, once, into a cache outside the
# work tree: ${SQUALL_KAFKA_HOME:-~/.cache/squall/kafka-<version>}/libs.
# The tests start the broker from there (tests/servers.py, KafkaServer).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
version="${KAFKA_VERSION:-4.4.0}"
home="${SQUALL_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/squall/kafka-$version}"
[ -f "$home/.complete" ] && exit 0

command -v mvn >/dev/null 2>&1 || { echo "mvn is missing: run scripts/ensure-system-packages.sh" >&2; exit 1; }
echo "fetching Apache Kafka $version from Maven Central into $home"
rm -rf "$home/libs"
mkdir -p "$home/libs"
mvn -q -B -f "$here/kafka/pom.xml" -Dkafka.version="$version" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$home/libs"
ls "$home/libs/kafka_2.13-$version.jar" >/dev/null
touch "$home/.complete"
