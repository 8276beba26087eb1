#!/usr/bin/env bash
# Installs the Debian packages squall needs when they are missing:
# a Java runtime (17+) for Spark, and the servers the tests start
# (redis-server, rabbitmq-server, postgresql, zookeeper; Maven, which fetches
# Kafka's broker jars: scripts/ensure-kafka.sh), Chromium with its
# driver for the web page's browser test, and a C compiler with Python's headers
# and zlib's, for the per-tuple modules Cython compiles (setup.py).
# Run as root (or with sudo available).
set -euo pipefail

need=()
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
    need+=(openjdk-17-jre-headless)
fi

command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || need+=(rabbitmq-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
[ -f /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)  # the key hash links zlib
python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need+=(python3-dev)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the web page's browser test drives it headless
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)

if [ ${#need[@]} -gt 0 ]; then
    echo "installing Debian packages: ${need[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
