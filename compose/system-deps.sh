#!/bin/sh
# Install the Debian packages the embedded stack needs, only when they are missing:
# PostgreSQL's server binaries (initdb, pg_ctl, postgres), its client tools (psql,
# pg_recvlogical), a Java 17 JDK for Kafka, OpenSearch and PySpark (javac compiles the search
# engine's launcher), and Maven, which fetches their jars from Maven Central (compose/jars.py).
set -e
need=""
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$need postgresql postgresql-contrib"
command -v pg_recvlogical >/dev/null 2>&1 || need="$need postgresql-client"
java_major() { java -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -1; }
if [ -z "$JAVA_HOME" ] && { ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ] \
        || ! command -v javac >/dev/null 2>&1; }; then
    need="$need openjdk-17-jdk-headless"
fi
command -v mvn >/dev/null 2>&1 || need="$need maven"
[ -z "$need" ] && exit 0

echo "installing Debian packages:$need"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $need
