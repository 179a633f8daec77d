"""The spark route in a session that stays (materializers/warehouse/connect.py): `bottler
warehouse serve` serves the route's Spark session over Spark Connect, and `bottler materialize
warehouse --route spark --spark-remote sc://…` runs as its client, on a real capture: loads,
MERGEs (small batches: on the driver), a truncate, the continuous job, a client killed with
`kill -9` mid-load, the server killed under a client (one line, then the next run resumes),
each checked against the source with delta-rs (the independent reader); and what is wrong
with the address said in one line. The conformance suite runs through Connect too
(tests/test_conformance.py, ``spark-connect``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compose.procs import free_port
from materializers.warehouse.delta import open_table
from tests.support.cli import ROOT, assert_clear_error, bottler, clean_env
from tests.support.databases import execute
from tests.support.spark_shop import LOAD, QUERIES, SHOP, delta_rows, source_rows
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.stack


def serve(log: Path) -> tuple[subprocess.Popen, str]:
    """`bottler warehouse serve` on a free port, serving; the process and its address."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bottler", "warehouse", "serve",
                                 "--port", str(port)], cwd=ROOT, env=clean_env(),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "serving the spark route's session" in log.read_text()
                 or proc.poll() is not None, 600, "the Spark Connect server's start")
        assert proc.poll() is None, log.read_text()
    except BaseException:
        proc.kill()
        raise
    return proc, f"sc://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """:func:`serve`, for the module; its address."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    proc, address = serve(log)
    try:
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]


def job_args(stack, server: str, path: Path, prefix: str) -> list[str]:
    """`bottler`'s arguments for the route as a client of ``server``, loading ``path``."""
    return ["materialize", "warehouse", "--route", "spark", "--spark-remote", server,
            "--path", str(path), "--topic-prefix", prefix, "--broker", stack.kafka,
            "--schema-registry", stack.registry_url]


def client(stack, server: str, path: Path, prefix: str, *args: str, **kwargs):
    return bottler(*job_args(stack, server, path, prefix), *args, **kwargs)


def converge(stack, server: str, path: Path, prefix: str, source: str) -> None:
    """``--once`` loads until the Delta tables hold what the source does; each load makes
    progress or the capture has not produced the rest yet (it streams)."""
    root = path / prefix
    for _ in range(60):
        proc = client(stack, server, path, prefix, "--once", timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if all(delta_rows(root, t) == source_rows(source, t) for t in QUERIES):
            return
        time.sleep(1)
    raise AssertionError("the Delta tables differ from the source")


def test_the_route_runs_as_a_client_of_the_server(stack, server, source, prefix, start,
                                                  tmp_path):
    execute(source, SHOP)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    path = tmp_path / "warehouse"
    root = path / prefix
    converge(stack, server, path, prefix, source)
    execute(source, *LOAD)
    converge(stack, server, path, prefix, source)  # from the offsets Delta recorded
    items = open_table(root / "public" / "items")
    # a small batch: merged on the driver by delta-rs, its rows collected over Connect (Delta's
    # SQL MERGE over Connect runs in the conformance suite's spark-connect adapter)
    assert items.history(1)[0]["operation"] == "MERGE"
    assert "delta-rs" in items.history(1)[0]["clientVersion"]
    assert "_bottler_delete" not in items.schema().to_arrow().names
    # the housekeeping's table properties, set by delta-rs (upkeep.py)
    assert items.metadata().configuration["delta.checkpointInterval"] == "10"
    versions = {t: open_table(root / "public" / t).version() for t in QUERIES}
    proc = client(stack, server, path, prefix, "--once", timeout=600)  # nothing new
    assert proc.returncode == 0, proc.stderr
    assert {t: open_table(root / "public" / t).version() for t in QUERIES} == versions
    execute(source, "truncate log", "insert into log values (1, 'after the truncate')")
    converge(stack, server, path, prefix, source)

    # the continuous job: a batch every interval, driven by the client, until SIGTERM
    log = tmp_path / "continuous.log"
    with log.open("w") as out:
        job = subprocess.Popen(
            [sys.executable, "-m", "bottler", *job_args(stack, server, path, prefix),
             "--interval", "1"], cwd=ROOT, env=clean_env(), stdout=out,
            stderr=subprocess.STDOUT)
    try:
        execute(source, "update items set name = 'continuous' where id = 4")
        wait_for(lambda: delta_rows(root, "items") == source_rows(source, "items")
                 or job.poll() is not None, 300, "the continuous job's merge")
        assert job.poll() is None, log.read_text()
    finally:
        job.send_signal(signal.SIGTERM)
        assert job.wait(120) == 0, log.read_text()[-3000:]


def test_a_client_killed_mid_load_loses_nothing(stack, server, source, prefix, start, tmp_path):
    execute(source, "create table big (id int primary key, body text)",
            "insert into big select g, repeat('x', 200) || g from generate_series(1, 200000) g")
    start()
    wait_streaming(source, prefix)
    path = tmp_path / "warehouse"
    args = [*job_args(stack, server, path, prefix), "--once", "--max-messages", "50000"]
    job = subprocess.Popen([sys.executable, "-m", "bottler", *args], cwd=ROOT, env=clean_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    table = path / prefix / "public" / "big"
    try:  # killed once its first batch is in, before its last
        wait_for(lambda: open_table(table) is not None or job.poll() is not None, 600,
                 "the first batch's commit")
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait(30)
    proc = bottler(*args, timeout=900)  # the next run resumes from where Delta stands
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = open_table(table).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(1, 200001))


def test_a_server_killed_mid_load_is_one_line_and_the_next_run_loses_nothing(
        stack, server, source, prefix, start, tmp_path):
    """The server killed with `kill -9` under a continuous client: the client ends with one
    line in about a minute (pyspark's own retries would wait ten, silently), and the next run,
    as a client of another server, loads every row."""
    execute(source, "create table big (id int primary key, body text)",
            "insert into big select g, repeat('x', 200) || g from generate_series(1, 200000) g")
    start()
    wait_streaming(source, prefix)
    doomed, address = serve(tmp_path / "doomed.log")
    path = tmp_path / "warehouse"
    args = [*job_args(stack, address, path, prefix), "--interval", "1", "--max-messages", "50000"]
    job = subprocess.Popen([sys.executable, "-m", "bottler", *args], cwd=ROOT, env=clean_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    table = path / prefix / "public" / "big"
    try:
        try:  # killed once the first batch is in, before the last
            wait_for(lambda: open_table(table) is not None or job.poll() is not None, 600,
                     "the first batch's commit")
        finally:
            doomed.kill()
            doomed.wait(60)
        out, err = job.communicate(timeout=600)  # the retries' minute, on a busy machine
    finally:
        job.kill()
    text = assert_clear_error(subprocess.CompletedProcess(args, job.returncode, out, err),
                              f"the Spark Connect server at {address} stopped answering",
                              "the next run resumes")
    assert "asking again" in err, err  # the retries said while they last
    proc = client(stack, server, path, prefix, "--once", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    ids = open_table(table).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(1, 200001))


def test_an_address_that_does_not_serve_is_one_line(stack, tmp_path):
    common = ["materialize", "warehouse", "--path", str(tmp_path / "w"), "--once",
              "--broker", stack.kafka, "--schema-registry", stack.registry_url]
    proc = bottler(*common, "--route", "spark", "--spark-remote", f"sc://127.0.0.1:{free_port()}",
                   timeout=120)
    assert_clear_error(proc, "no Spark Connect server answers at sc://127.0.0.1:",
                       "bottler warehouse serve")
    proc = bottler(*common, "--route", "spark", "--spark-remote", "127.0.0.1:15002", timeout=120)
    assert_clear_error(proc, "is not a Spark Connect address", "sc://host:port")
    proc = bottler(*common, "--spark-remote", "sc://127.0.0.1:15002", timeout=120)
    assert_clear_error(proc, "--spark-remote serves the spark route only", "--route spark")
