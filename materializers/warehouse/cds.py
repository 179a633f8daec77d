"""A class-data archive (AppCDS) of the classes the spark route's driver JVM loads: Spark's,
Scala's, Hadoop's, and those of the Kafka source, spark-avro and delta-spark. The JVM maps them
from the archive, already parsed and verified, instead of reading and checking some 13,600
classes from their jars at every start (docs/warehouse.md, "The spark route's start").

Built once per Java, pyspark and jar set, into the cache beside the jars
(``~/.cache/bottler/cds/<key>.jsa``): by a child process (cds_dump.py) whose session loads the
route's classes (a Kafka stream's plan, ``from_avro``, a Delta append and MERGE in a scratch
table) with ``-XX:ArchiveClassesAtExit``, the archive written as its JVM exits. It is never a
failure: a build that fails or is under way in another process leaves the session without an
archive (``-Xshare:auto``, as before), and the JVM itself checks the archive against its class
path, ignoring one that does not match.

    python -m materializers.warehouse.cds   # build it now (if missing); print its options

`make deps` runs that; a session without the archive starts as before (it never builds one).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.children import die_with_parent

log = logging.getLogger(__name__)

BUILD_TIMEOUT = 900.0  # seconds the build may take: a JVM start, the classes' use, the dump
EXIT_GRACE = 600.0  # seconds the build's JVM has to exit, writing the archive (~190 MB)
MODULE = "materializers.warehouse.cds_dump"  # the build's child
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # the dump's notes on classes it skips


def directory() -> Path:
    from compose.jars import jars_home

    return jars_home().parent / "cds"


def archive(jars: list[str]) -> Path:
    """Where the archive of this Java, this pyspark and the route's ``jars`` is (or goes): its
    name is a digest of them, so an upgrade of any makes a new one."""
    import pyspark

    digest = hashlib.sha256(pyspark.__version__.encode())
    java = _java()
    for path in sorted(os.path.realpath(p) for p in (Path(pyspark.__file__).parent / "jars",
                                                     *jars)) + [java]:
        stat = os.stat(path)  # real paths: a virtualenv reached through a link is the same
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return directory() / f"spark-{digest.hexdigest()[:16]}.jsa"


def _java() -> str:
    """The java pyspark's launcher runs: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java") or "java"
    return os.path.realpath(found)


def java_options(jars: list[str]) -> str:
    """The JVM options that map the archive; empty when there is none. A start never waits
    for a build (about a minute and a half): `make deps` builds it, or ``python -m
    materializers.warehouse.cds``."""
    try:
        path = archive(jars)
    except OSError as exc:  # no java to stat: no archive
        log.info("warehouse: no class-data archive (%s)", exc)
        return ""
    if not path.exists():
        log.info("warehouse: no class-data archive of Spark's classes (`python -m "
                 "materializers.warehouse.cds` builds one, once: the spark route's JVM then "
                 "starts in about half the CPU)")
        return ""
    return _mapped(path)


def _mapped(path: Path) -> str:
    """The JVM options that map the archive at ``path``."""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build(path: Path) -> None:
    """The archive at ``path``, by a child process (cds_dump.py), unless another process is
    building it; written under a temporary name, renamed into place once its JVM exited."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".building")
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if time.time() - lock.stat().st_mtime < BUILD_TIMEOUT:
            log.info("warehouse: the class-data archive is being built elsewhere; not used now")
            return
        lock.unlink(missing_ok=True)  # a build that died: its lock is old
        return build(path)
    os.close(fd)
    partial = Path(tempfile.mkdtemp(prefix="build-", dir=path.parent)) / path.name
    started = time.monotonic()
    log.info("warehouse: building a class-data archive of Spark's classes for faster starts "
             "(once, into %s)", path.parent)
    try:
        parent = os.getpid()
        done = subprocess.run([sys.executable, "-m", MODULE, str(partial)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=BUILD_TIMEOUT, check=False,
                              preexec_fn=lambda: die_with_parent(parent))  # and its JVM
        if done.returncode == 0 and partial.exists():
            partial.replace(path)
            for old in path.parent.glob("spark-*.jsa"):  # those of an earlier Java or jar set
                if old != path:
                    old.unlink(missing_ok=True)
            log.info("warehouse: class-data archive built in %.0f s", time.monotonic() - started)
        else:
            log.info("warehouse: no class-data archive (its build ended with status %s: %s)",
                     done.returncode, done.stdout.decode(errors="replace").strip()[-300:])
    except subprocess.TimeoutExpired:
        log.info("warehouse: no class-data archive (its build took over %.0f s)", BUILD_TIMEOUT)
    finally:
        shutil.rmtree(partial.parent, ignore_errors=True)
        lock.unlink(missing_ok=True)


def ensure(jars: list[str]) -> str:
    """:func:`java_options`, the archive built first if missing (`make deps`, the bench)."""
    try:
        path = archive(jars)
        if not path.exists():
            build(path)
    except OSError as exc:  # a cache that cannot be written: no archive, never a failure
        log.info("warehouse: no class-data archive (%s)", exc)
        return ""
    return _mapped(path) if path.exists() else ""  # a failed build said why


def main() -> None:
    from materializers.warehouse.jars import spark_jars

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(ensure(spark_jars()) or "no archive")


if __name__ == "__main__":
    main()
