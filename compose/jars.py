"""The embedded stack's Java side: a Java runtime that is new enough, and the jars pinned in
``compose/jars/pom.xml``, fetched from Maven Central by Maven once and kept in a directory per
profile and pin set (a changed pin fetches anew; nothing is half-copied: Maven copies into a
temporary directory that is renamed into place when complete).

    python -m compose.jars kafka        # fetch the profile's jars if missing, print their path
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common.errors import BottlerError

POM = Path(__file__).parent / "jars" / "pom.xml"
JAVA_MIN = 17  # Kafka 4's broker needs Java 17
FETCH_TIMEOUT = 900.0  # seconds: a first fetch on a slow mirror


def jars_home() -> Path:
    """Where fetched jars live: ``BOTTLER_JARS_DIR``, or the user's cache."""
    if configured := os.environ.get("BOTTLER_JARS_DIR"):
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bottler" / "jars"


def java() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java``, else the one on PATH), once it is known to
    be Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    binary = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    install = "install a JDK 17 (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    if not binary or not Path(binary).exists():
        raise BottlerError(f"Java {JAVA_MIN} or newer is needed to run Kafka; none was found"
                           + (f" at JAVA_HOME={home}" if home else " on PATH"), install)
    try:
        shown = subprocess.run([binary, "-version"], capture_output=True, text=True,
                               timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BottlerError(f"{binary} does not run ({exc})", install) from None
    version = java_major(shown)
    if version is None or version < JAVA_MIN:
        raise BottlerError(f"{binary} is Java {version or 'of an unknown version'}; Kafka needs "
                           f"Java {JAVA_MIN} or newer", install)
    return binary


def java_major(version_output: str) -> int | None:
    """The major version in ``java -version``'s output: ``"17.0.15"`` → 17, ``"1.8.0"`` → 8."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not found:
        return None
    major, minor = int(found[1]), int(found[2] or 0)
    return minor if major == 1 else major


def profile_dir(profile: str) -> Path:
    """The directory of one profile's jars under the present pins."""
    pins = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return jars_home() / f"{profile}-{pins}"


def classpath(profile: str) -> str:
    """The JVM classpath of a profile's jars, fetching them first if they are missing."""
    return str(fetch(profile) / "*")


def fetch(profile: str) -> Path:
    """The profile's jars, copied from Maven Central (through the local Maven repository) when
    they are not here yet."""
    target = profile_dir(profile)
    if target.is_dir() and any(target.glob("*.jar")):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BottlerError(f"Maven is needed once to fetch the {profile} jars, and `mvn` is not "
                           "on PATH", "run `make deps` (it installs Maven with apt-get), or "
                           "apt-get install maven")
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"fetching the {profile} jars from Maven Central into {target}", file=sys.stderr)
    partial = Path(tempfile.mkdtemp(prefix=f".{profile}-", dir=target.parent))
    try:
        done = subprocess.run(
            [mvn, "-B", "-q", "--strict-checksums", "-f", str(POM), "-P", profile,
             "dependency:copy-dependencies", f"-DoutputDirectory={partial}"],
            capture_output=True, text=True, timeout=FETCH_TIMEOUT, cwd=target.parent)
        if done.returncode != 0 or not any(partial.glob("*.jar")):
            raise BottlerError(f"could not fetch the {profile} jars from Maven Central: "
                               f"{_maven_error(done.stdout + done.stderr)}",
                               "check that this machine reaches repo.maven.apache.org (or the "
                               "mirror in ~/.m2/settings.xml), then run `make deps` again")
        partial.rename(target)
    except subprocess.TimeoutExpired:
        raise BottlerError(f"fetching the {profile} jars took over {FETCH_TIMEOUT:.0f}s",
                           "check the connection to Maven Central, then try again") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _maven_error(output: str) -> str:
    """Maven's first error line, shortened (it prints dozens)."""
    for line in output.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        if line.startswith("[ERROR]") and len(line) > 8:
            return line[8:][:300]
    return (output.strip().splitlines() or ["no output"])[-1][:300]


if __name__ == "__main__":
    try:
        java()
        print(fetch(sys.argv[1] if len(sys.argv) > 1 else "kafka"))
    except BottlerError as exc:
        sys.exit(f"error: {exc}")
