#!/bin/sh
# Install the Debian packages the embedded stack needs, only when they are missing:
# PostgreSQL's server binaries (initdb, pg_ctl, postgres), its client tools (psql,
# pg_recvlogical) and a Java runtime for PySpark.
set -e
need=""
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$need postgresql postgresql-contrib"
command -v pg_recvlogical >/dev/null 2>&1 || need="$need postgresql-client"
command -v java >/dev/null 2>&1 || need="$need openjdk-17-jre-headless"
[ -z "$need" ] && exit 0

echo "installing Debian packages:$need"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $need
