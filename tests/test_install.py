"""Installs that fit the job (issue 15, point 5): the distribution `bottler-cdc`, a core install
of the capture, the replica, the translators and the registry, and the search, warehouse and
stack parts as extras. The core commands import nothing of an extra; a command whose extra is
missing says which to install, in one line; and a fresh venv with the core install alone runs
`bottler capture` and `bottler materialize postgres` end to end against the session's stack."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import psycopg
import pytest

from common.extras import DISTRIBUTION, EXTRAS
from schemas.topics import table_topic
from tests.support.databases import fresh_database, rows
from tests.support.topics import topic_state
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
# What a core process must never load: the extras' libraries and theirs (py4j is pyspark's), and
# the official search client (the search view speaks HTTP itself).
OPTIONAL = sorted({m for modules in EXTRAS.values() for m in modules} - {"urllib3"}
                  | {"py4j", "elasticsearch", "elastic_transport"})
# The packages of the core install; the search and warehouse views are their extras' own.
EXTRA_PACKAGES = ("materializers.search", "materializers.warehouse")


def requirement_name(requirement: str) -> str:
    """The normalized distribution name of a PEP 508 requirement."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd=ROOT):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env)


# -- the package's metadata ---------------------------------------------------------------------

def test_the_distribution_and_its_extras():
    project = PYPROJECT["project"]
    assert project["name"] == DISTRIBUTION == "bottler-cdc"
    assert project["scripts"] == {"bottler": "bottler.cli:main"}
    extras = project["optional-dependencies"]
    assert set(EXTRAS) | {"all", "dev"} == set(extras)
    assert extras["all"] == [f"{DISTRIBUTION}[{','.join(sorted(EXTRAS))}]"]
    assert f"{DISTRIBUTION}[all]" in extras["dev"], "make up and make test install everything"
    core = {requirement_name(r) for r in project["dependencies"]}
    # Which distribution provides each module, from the venv the tests run in (make installs
    # every extra into it).
    providers = metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        declared = {requirement_name(r) for r in extras[extra]}
        for module in modules:
            provided_by = {requirement_name(d) for d in providers.get(module, [])}
            assert provided_by & declared, f"{module} is not installed by the {extra} extra"
            if extra != "search":  # urllib3 also comes with the core's requests
                assert not provided_by & core, f"the core install pulls {module}"
    assert not {"pyspark", "delta-spark", "deltalake"} & core


def test_version():
    proc = run(sys.executable, "-m", "bottler", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"bottler ({DISTRIBUTION}) {VERSION}"


# -- the core imports nothing optional ------------------------------------------------------------

CORE_IMPORTS = f"""
import importlib, json, pkgutil, sys
import bottler.cli
for package in ("bottler", "common", "capture", "schemas", "materializers", "compose"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name.endswith("__main__") or info.name.startswith({EXTRA_PACKAGES!r}):
            continue
        importlib.import_module(info.name)
print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))
"""


def test_the_core_modules_import_nothing_of_an_extra():
    """Every module of the core install, the `bottler` command with all its commands included:
    the extras' libraries are imported only by the commands that need them."""
    proc = run(sys.executable, "-c", CORE_IMPORTS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"loaded by the core: {proc.stdout}"


# -- a missing extra is one line ------------------------------------------------------------------

MISSING_CASES = {
    # command line -> (the extra, the module hidden)
    "materialize warehouse": (["materialize", "warehouse", "--path", "{tmp}/wh"],
                              "warehouse", "pyspark"),
    "warehouse vacuum": (["warehouse", "vacuum", "--path", "{tmp}/wh"], "warehouse", "deltalake"),
    "materialize search": (["materialize", "search", "--index", "shop"], "search", "urllib3"),
    "reindex": (["reindex", "shop"], "search", "urllib3"),
    # the stack itself needs no extra (its services run from jars), its apps do
    "stack up": (["stack", "up", "--dir", "{tmp}/stack", "--all"], "warehouse", "pyspark"),
}


@pytest.mark.parametrize("case", sorted(MISSING_CASES))
def test_a_command_of_a_missing_extra_says_which_to_install(case, tmp_path):
    args, extra, hidden = MISSING_CASES[case]
    args = [a.format(tmp=tmp_path) for a in args]
    # None in sys.modules makes `import hidden` fail as if it were not installed.
    script = (f"import sys; sys.modules[{hidden!r}] = None; sys.argv = ['bottler', *{args!r}]; "
              "from bottler.cli import main; main()")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOTTLER_")}
    proc = run(sys.executable, "-c", script, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: `bottler {case}` needs the {extra} extra ({hidden} not installed): "
        f"pip install '{DISTRIBUTION}[{extra}]'"]
    assert list(tmp_path.iterdir()) == [], "the command stopped before it made anything"


# -- a fresh venv with the core install alone ---------------------------------------------

def copy_sources(into: Path) -> Path:
    """The sources the wheel is built from (as compose/Dockerfile copies them), away from the
    worktree: building in place would leave build/ and *.egg-info behind."""
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    into.mkdir()
    for name in ("pyproject.toml", PYPROJECT["project"]["readme"]):
        shutil.copy(ROOT / name, into / name)
    for package in {pattern.rstrip("*").rstrip(".") for pattern in include}:
        shutil.copytree(ROOT / package, into / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return into


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    """A new venv holding `pip install bottler-cdc` (no extra), from the package index."""
    where = tmp_path_factory.mktemp("core-venv")
    venv = where / "venv"
    run(sys.executable, "-m", "venv", str(venv), timeout=300).check_returncode()
    python = str(venv / "bin" / "python")
    probe = run(python, "-m", "pip", "index", "versions", "typer", timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"the package index is unreachable (pip index versions typer: "
                    f"{probe.stderr.strip().splitlines()[-1:]})")
    source = copy_sources(where / "src")
    proc = run(python, "-m", "pip", "install", "-q", str(source), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return venv


def core_env() -> dict[str, str]:
    """Nothing of the test session's settings, nor its PYTHONPATH: the venv's own install runs."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("BOTTLER_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.stack
@pytest.mark.timeout(1200)
def test_the_core_install_alone_runs_the_capture_and_the_replica(core_venv, stack, source,
                                                                 prefix, tmp_path):
    python, bottler = str(core_venv / "bin" / "python"), str(core_venv / "bin" / "bottler")
    env = core_env()
    for module in OPTIONAL:
        proc = run(python, "-c", f"import {module}", env=env, cwd=tmp_path)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, module
    where = run(python, "-c", "import bottler; print(bottler.__file__)", env=env, cwd=tmp_path)
    assert where.stdout.startswith(str(core_venv)), f"not the venv's own copy: {where.stdout}"
    version = run(bottler, "--version", env=env, cwd=tmp_path)
    assert version.stdout.strip() == f"bottler ({DISTRIBUTION}) {VERSION}", version.stderr
    no_spark = run(bottler, "materialize", "warehouse", "--path", str(tmp_path / "wh"), env=env,
                   cwd=tmp_path)
    assert no_spark.returncode == 2
    assert f"pip install '{DISTRIBUTION}[warehouse]'" in no_spark.stderr

    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("create table items (id int primary key, name text not null)")
        conn.execute("insert into items select g, 'item ' || g from generate_series(1, 20) g")
    capture = subprocess.Popen(
        [bottler, "capture", "-d", source, "-b", stack.kafka, "-r", stack.registry_url,
         "-s", prefix, "-p", prefix, "--tables", "public.items", "--heartbeat-interval", "1"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        topic = table_topic(prefix, "public", "items")
        topic_state(stack, topic, expected_keys=20)  # the snapshot
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("insert into items values (21, 'streamed')")
            conn.execute("update items set name = 'changed' where id = 1")
            conn.execute("delete from items where id = 2")
        expected = dict(rows(source, "select id, name from items"))
        wait_for(lambda: topic_rows(stack, topic) == expected, 60, "the streamed changes")

        with fresh_database(stack.pg_dsn) as target:
            replica = run(bottler, "materialize", "postgres", "-t", target, "-b", stack.kafka,
                          "-r", stack.registry_url, "-p", prefix, "-g", f"{prefix}-replica",
                          "--once", env=env, cwd=tmp_path, timeout=300)
            assert replica.returncode == 0, replica.stdout + replica.stderr
            query = "select id, name from items order by id"
            assert rows(target, query) == rows(source, query)
            assert len(rows(target, query)) == 20
    finally:
        capture.send_signal(signal.SIGTERM)
        try:
            output, _ = capture.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            capture.kill()
            output, _ = capture.communicate()
    assert capture.returncode == 0, output
    assert "Traceback" not in output


def topic_rows(stack, topic: str) -> dict[int, str]:
    """id -> name, as the topic describes the table."""
    return {dict(key)["id"]: value["name"] for key, value in topic_state(stack, topic).items()}
