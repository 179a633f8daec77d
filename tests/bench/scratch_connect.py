"""Scratch measurement, not part of the product or of `make bench` (issue 27; the figures are in
docs/warehouse.md, "A JVM that stays: measured"): the spark route's load from a fresh client
process against a Spark session that stays (Spark Connect), and in one local session that
stays. Each step is a process of its own; WORK is a scratch directory:

    python -m tests.bench.scratch_connect stack WORK    # a stack of its own, the bench's
        # 1,050,000-row topic (prefix bench_wh) and the demo shop's four topics
        # (bench_wh_shop); endpoints in WORK/env.json; runs until killed
    python -m tests.bench.scratch_connect server WORK   # the spark route's session (its jars,
        # settings, the tiered JIT: it stays) serving Spark Connect; port in WORK/server.json
    python -m tests.bench.scratch_connect client WORK PREFIX WAREHOUSE  # one --once load
        # through the server from this fresh process; prints its wall time from process
        # start, its CPU, the server JVM's CPU and the load average
    python -m tests.bench.scratch_connect local WORK PREFIX N   # N loads in one local session
        # (the route as it ships), each into a fresh warehouse: the warm batch without Connect
    python -m tests.bench.scratch_connect repeat WORK TOPIC N [--poison]  # the topic's first
        # N messages produced again (the next load MERGEs them), and two poison messages

The client needs Spark Connect's Python dependencies, which the project does not install:
``pip install --target DIR grpcio grpcio-status googleapis-common-protos zstandard 'pandas<3'
pytz`` and DIR on PYTHONPATH (the server too, for foreachBatch's Python process).

The client runs the route's own batch (native.SparkRoute.batch: from_avro with the registry's
schemas, the poison search, the repeated-key check, the append or MERGE, the txn identifiers)
on a *batch* read of Spark's Kafka source, from the offsets Delta recorded to the watermarks:
over Connect a foreachBatch function runs in a Python process of the server, whose effects
(the job's positions, totals, failure) never reach the client, and the route's closure does not
pickle. delta-spark's DeltaTable needs Delta Connect's server plugin, which Maven Central does
not serve here, so the MERGE is Delta's SQL ``MERGE INTO`` on a temporary view.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

from materializers.warehouse.native import RouteResult, SparkRoute
from materializers.warehouse.spark_merge import TopicWrite

LOAD_PREFIX, SHOP_PREFIX, TABLE, ROWS = "bench_wh", "bench_wh_shop", "bench_snapshot", 1_050_000
CORES = "2"  # the server's local[2]: a Spark partition per core, as the streaming query has


def stack(work: Path) -> None:
    from compose.demo import TABLES, seed
    from compose.stack import isolated_stack
    from tests.bench.__main__ import _snapshot_table
    from tests.bench.warehouse_load import _snapshot

    work.mkdir(parents=True, exist_ok=True)
    with isolated_stack() as s:
        ep = s.endpoints
        env = {"BOTTLER_PG_DSN": ep.pg_dsn, "BOTTLER_KAFKA": ep.kafka,
               "BOTTLER_REGISTRY": ep.registry}
        _snapshot_table(ep.pg_dsn, TABLE, ROWS)
        _snapshot(env, LOAD_PREFIX, [TABLE])
        seed(ep.pg_dsn)
        _snapshot(env, SHOP_PREFIX, list(TABLES))
        (work / "env.json").write_text(json.dumps(env))
        print(f"stack up, topics in: {work / 'env.json'}", flush=True)
        while True:
            time.sleep(3600)


def env_of(work: Path) -> dict[str, str]:
    env = json.loads((work / "env.json").read_text())
    os.environ.update(env)
    return env


def server(work: Path) -> None:
    """The spark route's session (job.spark_session: its jars, Delta's extension, its settings)
    with Spark Connect's plugin (pyspark's own spark-connect jar), which serves it over gRPC."""
    from compose.procs import free_port

    port = free_port()
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        "--conf spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin "
        f"--conf spark.connect.grpc.binding.port={port} "
        "--conf spark.connect.grpc.binding.address=127.0.0.1 pyspark-shell")
    from materializers.warehouse.job import spark_session

    spark = spark_session(route="spark")
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    (work / "server.json").write_text(json.dumps({"port": port, "jvm": jvm_pid}))
    print(f"Spark Connect on sc://127.0.0.1:{port}, JVM pid {jvm_pid}", flush=True)
    while True:
        time.sleep(3600)


def client(work: Path, prefix: str, warehouse: str) -> None:
    from common.logs import setup_logging

    setup_logging()
    env = env_of(work)
    found = json.loads((work / "server.json").read_text())
    server_cpu, load = cpu_of(found["jvm"]), os.getloadavg()[0]
    from pyspark.sql import SparkSession

    from materializers.warehouse.job import SPARK_ROUTE_CONF

    TopicWrite._merge = _sql_merge
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{found['port']}").getOrCreate()
    for name, value in SPARK_ROUTE_CONF.items():  # the static ones are the server's
        if not name.startswith(("spark.sql.extensions", "spark.sql.catalog")):
            spark.conf.set(name, value)
    session_at = since_start()
    total = _load(spark, env, prefix, Path(warehouse))
    used = os.times()
    print(json.dumps({
        "messages": total.messages, "changes": total.changes, "commits": total.commits,
        "dead_letters": total.dead_letters, "session_at_s": round(session_at, 2),
        "wall_from_process_start_s": round(since_start(), 2),
        "client_cpu_s": round(used.user + used.system, 2),
        "server_jvm_cpu_s": round(cpu_of(found["jvm"]) - server_cpu, 2),
        "load": f"{load:.2f} -> {os.getloadavg()[0]:.2f}"}), flush=True)


def _load(spark, env: dict[str, str], prefix: str, warehouse: Path, connect: bool = True):
    from materializers.warehouse.job import prefix_root

    route = (ConnectRoute if connect else SparkRoute)(
        spark, prefix_root(warehouse, prefix), bootstrap=env["BOTTLER_KAFKA"],
        registry=env["BOTTLER_REGISTRY"], prefix=prefix)
    try:
        return route.run_until_caught_up()
    finally:
        route.close()


def local(work: Path, prefix: str, loads: int) -> None:
    """``loads`` loads in one local session (the route as it ships: the streaming query,
    foreachBatch, DeltaTable.merge), each into a fresh warehouse: the first pays the JIT's
    warm-up, the others show the warm batch."""
    env = env_of(work)
    from materializers.warehouse import jvm
    from materializers.warehouse.job import spark_session

    spark = spark_session(route="spark")
    pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    print(f"session at {since_start():.1f} s from process start", flush=True)
    try:
        for n in range(loads):
            at, cpu, load = time.monotonic(), cpu_of(pid), os.getloadavg()[0]
            total = _load(spark, env, prefix, work / f"local-{os.getpid()}-{n}", connect=False)
            print(f"load {n + 1}: {total.messages} messages, {total.changes} changes in "
                  f"{time.monotonic() - at:.1f} s, JVM {cpu_of(pid) - cpu:.1f} CPU s, load "
                  f"{load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        jvm.stop(spark)


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def since_start() -> float:
    """Seconds since this process started (the kernel's start time, so imports count)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


def repeat(work: Path, topic: str, count: int, poison: bool) -> None:
    """Produce the first ``count`` messages of ``topic`` (partition 0) again at its end: the
    same keys and bytes, which the next load MERGEs. With ``poison``, two messages that do not
    decode: a body of 0xff bytes after a valid header, and the same without Confluent's header."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    env = env_of(work)
    consumer = Consumer({"bootstrap.servers": env["BOTTLER_KAFKA"], "group.id": "scratch",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": env["BOTTLER_KAFKA"]})
    wanted, done, key, value = max(count, 1), 0, None, b""
    while done < wanted:
        for m in consumer.consume(10_000, timeout=5):
            if done >= wanted or m.error():
                break
            key, value = m.key(), m.value()
            if count:
                producer.produce(topic, value, key, partition=0)
                producer.poll(0)
            done += 1
    if poison:
        producer.produce(topic, value[:5] + b"\xff\xff\xff\xff", key, partition=0)
        producer.produce(topic, b"\x01" + value[1:], key, partition=0)
    producer.flush()
    consumer.close()
    print(f"{count} messages produced again into {topic}" + (", two poison ones" * poison))


# -- the route over Connect ----------------------------------------------------------------


class ConnectRoute(SparkRoute):
    """The route's batch on a batch read of the Kafka source (the module docstring)."""

    def run_until_caught_up(self) -> RouteResult:
        from confluent_kafka import Consumer, TopicPartition

        from common.kafka import reader_config

        partitions = self._partitions()
        if not partitions:
            return RouteResult()
        begins = {tp: 0 for tp in partitions} | self.sink.stored_offsets(partitions)
        consumer = Consumer(reader_config(self.bootstrap, "warehouse-planner"))
        try:
            ends = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=30)[1]
                    for tp in partitions}
        finally:
            consumer.close()
        moved = {tp: e for tp, e in ends.items() if e > begins[tp]}
        if not moved:
            return RouteResult()
        return self.batch(self._read({tp: (begins[tp], e) for tp, e in moved.items()},
                                     split=True), ends, begins)

    def _read(self, ranges, split: bool = False):
        """SparkRoute._read; ``split``: a Spark partition per core (``minPartitions``; the
        session's sparkContext, where the route reads the parallelism, is not reachable)."""
        reader = self._range_reader(ranges)
        if split:
            reader = reader.option("minPartitions", CORES)
        return reader.load()


def _sql_merge(self: TopicWrite, source) -> None:
    """TopicWrite._merge as Delta's SQL MERGE INTO (DeltaTable needs Delta Connect)."""
    from pyspark.sql import functions as F  # noqa: N812

    from materializers.warehouse.batch import DELETE

    have = set(source.columns)
    for f in self.spark.read.format("delta").load(str(self.path)).schema.fields:
        if f.name not in have:
            source = source.withColumn(f.name, F.lit(None).cast(f.dataType))
    view = f"bottler_merge_{os.getpid()}"
    source.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self.keys)
    self.spark.sql(f"MERGE INTO delta.`{self.path}` t USING {view} s ON {on} "
                   f"WHEN MATCHED AND s.{DELETE} THEN DELETE "
                   f"WHEN MATCHED AND NOT s.{DELETE} THEN UPDATE SET * "
                   f"WHEN NOT MATCHED AND NOT s.{DELETE} THEN INSERT *")


def timed_steps() -> None:
    """Print the time of the batch's steps: the read, decode and cache (the poison search's
    job), the repeated-key check, each commit."""

    def timed(cls, name):
        original = getattr(cls, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            at = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                print(f"  {name} {time.monotonic() - at:.2f} s", flush=True)

        static = isinstance(cls.__dict__[name], staticmethod)
        setattr(cls, name, staticmethod(wrapper) if static else wrapper)

    timed(SparkRoute, "_dead_letters")
    timed(TopicWrite, "_repeated")
    timed(TopicWrite, "_commit")


if __name__ == "__main__":
    command, where = sys.argv[1], Path(sys.argv[2])
    if command == "stack":
        stack(where)
    elif command == "server":
        server(where)
    elif command == "client":
        timed_steps()
        client(where, sys.argv[3], sys.argv[4])
    elif command == "local":
        timed_steps()
        local(where, sys.argv[3], int(sys.argv[4]))
    elif command == "repeat":
        repeat(where, sys.argv[3], int(sys.argv[4]), "--poison" in sys.argv)
    else:
        sys.exit(__doc__)
