"""The warehouse sink's MERGE against Delta's own bulk path, on the same rows, in one run:

- raw ceiling: a plain Delta append (delta-rs ``write_deltalake``, mode append) of CHANGES rows,
  already in Arrow, into a table of ROWS rows;
- merge: CHANGES changes (80% updates of existing keys, 10% inserts, 10% deletes; the changed
  rows are the appended rows) through :class:`DeltaSink` ``write`` + ``flush`` into a copy of
  the same ROWS-row table: the Arrow conversion of the decoded changes and one MERGE commit
  recording the offsets, timed together (the split is in the notes).

Rows are the bench's usual ~100 B shape (id, name, qty, price numeric(10,2), created
timestamptz). Runs without the stack: ``python -m tests.bench.warehouse [--rows N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from materializers.core import Change, TableId
from materializers.warehouse.delta import app_id
from materializers.warehouse.sink import DeltaSink, table_path
from tests.bench.report import Figure, code_line, machine_line, print_report

ROWS = 1_000_000
CHANGES = 100_000
TOPIC = "bench_warehouse.bench"
TABLE = TableId("public", "bench")


def _field(name, avro, pg_type):
    return {"name": name, "type": ["null", avro], "default": None, "pg.name": name,
            "pg.type": pg_type}


VALUE = {"type": "record", "name": "bench", "namespace": "public", "pg.schema": "public",
         "pg.table": "bench", "fields": [
             _field("id", "int", "integer"), _field("name", "string", "text"),
             _field("qty", "int", "integer"),
             _field("price", [{"type": "bytes", "logicalType": "decimal", "precision": 10,
                               "scale": 2}, "string"], "numeric(10,2)"),
             _field("created", {"type": "long", "logicalType": "timestamp-micros"},
                    "timestamp with time zone")]}
KEY = {"type": "record", "name": "bench", "namespace": "public.key", "pg.schema": "public",
       "pg.table": "bench", "fields": [{"name": "id", "type": "int"}]}
T0 = 1_717_243_200_000_000  # 2024-06-01 in µs


def row(i: int, version: int = 0) -> dict:
    return {"id": i, "name": f"row {i} v{version} " + "x" * 40, "qty": i % 1000,
            "price": Decimal(i % 100_000) / 100, "created": T0 + i * 1_000_000}


def arrow(rows: list[dict]) -> pa.Table:
    return pa.table({
        "id": pa.array([r["id"] for r in rows], pa.int32()),
        "name": pa.array([r["name"] for r in rows], pa.string()),
        "qty": pa.array([r["qty"] for r in rows], pa.int32()),
        "price": pa.array([r["price"] for r in rows], pa.decimal128(10, 2)),
        "created": pa.array([r["created"] for r in rows], pa.timestamp("us", tz="UTC")),
    })


def base_table(path: Path, rows: int) -> None:
    """A ``rows``-row Delta table as the warehouse would have written it, with its transaction
    identifier for the topic: the sink writes only into Delta tables it wrote."""
    write_deltalake(str(path), arrow([row(i) for i in range(1, rows + 1)]),
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id((TOPIC, 0)), 0)]))


def changes(rows: int, count: int) -> list[Change]:
    """``count`` changes: updates of existing keys, then inserts past ``rows``, then deletes."""
    updates, inserts = count * 8 // 10, count // 10
    deletes = count - updates - inserts
    step = max(rows // updates, 1)
    out = []
    for n, i in enumerate(range(1, rows + 1, step)):
        if n == updates:
            break
        out.append(("upsert", row(i, 1)))
    out += [("upsert", row(rows + 1 + i, 1)) for i in range(inserts)]
    out += [("delete", {"id": 2 + i * step}) for i in range(deletes)]
    return [Change(TOPIC, TABLE, op, {"id": v["id"]}, v if op == "upsert" else None, 0, n,
                   1, 2 if op == "upsert" else None, KEY, VALUE if op == "upsert" else None)
            for n, (op, v) in enumerate(out)]


def warehouse(rows: int = ROWS, count: int = CHANGES, say=print) -> list[Figure]:
    work = Path(tempfile.mkdtemp(prefix="bench-warehouse-"))
    try:
        base = work / "base"
        say(f"warehouse: a {rows:,}-row Delta table")
        base_table(base, rows)
        batch = changes(rows, count)
        appended = arrow([c.value if c.value else row(c.key["id"], 1) for c in batch])

        say(f"warehouse: raw ceiling, append of {count:,} rows")
        append_copy = work / "append"
        shutil.copytree(base, append_copy)
        start = time.perf_counter()
        write_deltalake(str(append_copy), appended, mode="append")
        append_s = time.perf_counter() - start

        say(f"warehouse: MERGE of {count:,} changes")
        root = work / "merge"
        shutil.copytree(base, table_path(root, TABLE))
        sink = DeltaSink(root)
        sink.stored_offsets([(TOPIC, 0)])
        start = time.perf_counter()
        sink.write(batch, {(TOPIC, 0): count})
        staged = time.perf_counter()
        sink.flush()
        merge_s = time.perf_counter() - start
        delta = DeltaTable(str(table_path(root, TABLE)))
        expected = rows + count // 10 - (count - count * 8 // 10 - count // 10)
        if delta.count() != expected:
            raise RuntimeError(f"the merged table holds {delta.count():,} rows, not "
                               f"{expected:,}")
        metrics = delta.history(1)[0].get("operationMetrics", {})

        say(f"warehouse: staged route, MERGE of {count:,} changes from Parquet files")
        staged_root = work / "staged-merge"
        shutil.copytree(base, table_path(staged_root, TABLE))
        stage_start = time.perf_counter()
        stage(batch, work / "staging")
        stage_s = time.perf_counter() - stage_start
        staged_s = staged_merge(staged_root, work / "staging", count)
        if DeltaTable(str(table_path(staged_root, TABLE))).count() != expected:
            raise RuntimeError("the staged merge's row count differs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ceiling = Figure(
        f"delta: plain append of {count:,} rows (delta-rs)", count / append_s, "rows/s",
        notes=[f"{count:,} rows of ~100 B already in Arrow, appended to a {rows:,}-row table: "
               f"{append_s:.2f} s"])
    merge = Figure(
        f"warehouse: MERGE of {count:,} changes into a {rows:,}-row Delta table",
        count / merge_s, "changes/s", ceiling=ceiling,
        notes=[f"{merge_s:.2f} s for DeltaSink write + flush ({staged - start:.2f} s turning "
               f"the decoded changes into Arrow, {merge_s - (staged - start):.2f} s the MERGE "
               f"commit with its offsets); 80% updates, 10% inserts, 10% deletes; "
               f"{metrics.get('num_target_rows_copied', '?'):,} unchanged rows rewritten into "
               f"{metrics.get('num_target_files_added', '?')} new files; row count checked"])
    staged_fig = Figure(
        f"warehouse: staged MERGE of {count:,} changes (the job's route)", count / staged_s,
        "changes/s", ceiling=ceiling,
        notes=[f"{staged_s:.2f} s on the driver (footers, the files streamed into delta-rs's "
               f"MERGE); the executors' part, turning decoded changes into Parquet, took "
               f"{stage_s:.2f} s here in one process"])
    return [ceiling, merge, staged_fig]


def stage(batch: list[Change], directory: Path, per_file: int = 50_000) -> None:
    """``batch`` staged as the executors stage it (staging.py): Parquet files per kind."""
    import pyarrow.parquet as pq

    from materializers.warehouse.staging import META, _arrow, _kind

    directory.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[Change]] = {}
    for change in batch:
        groups.setdefault(_kind(change), []).append(change)
    for kind, group in groups.items():
        for n, i in enumerate(range(0, len(group), per_file)):
            part = group[i:i + per_file]
            meta = {"topic": TOPIC, "table": [TABLE.schema, TABLE.table], "kind": kind,
                    "schema_id": 1, "keys": ["id"],
                    "value_schema_id": part[-1].value_schema_id}
            data = _arrow(kind, part).replace_schema_metadata({META: json.dumps(meta).encode()})
            pq.write_table(data, directory / f"{kind}-{n}.parquet")


def staged_merge(root: Path, directory: Path, count: int) -> float:
    """The driver's side of a staged batch: footers read, the files merged as a stream."""
    from materializers.warehouse.staging import read

    class Schemas:  # the registry's answer for the one value schema
        def schema(self, _id):
            return type("S", (), {"schema": VALUE, "id": 2})

    sink = DeltaSink(root)
    sink.stored_offsets([(TOPIC, 0)])
    start = time.perf_counter()
    staged = read(directory, Schemas())
    sink.write([], {(TOPIC, 0): count}, staged.tables)
    sink.flush()
    return time.perf_counter() - start


def rss_child(work: Path, count: int) -> None:
    """(child) merge the batches staged under ``work`` (``staged/``, or its subdirectories in
    order, ``count`` changes each) and print the process's peak RSS in MB: all this process
    does is the driver's side of the batches."""
    import resource

    batches = sorted(p for p in (work / "staged").iterdir() if p.is_dir()) or [work / "staged"]
    for n, directory in enumerate(batches, 1):
        staged_merge(work / "merge", directory, n * count)
    print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def warehouse_rss(count: int, sizes: tuple[int, ...] = (), say=print) -> list[Figure]:
    """The driver's peak RSS merging the same ``count`` changes into the same ``2 × count``-row
    table in batches of each of ``sizes`` (default: ``count`` and ``count / 10``), each run in a
    fresh process doing only the driver's side (staged files streamed into delta-rs's MERGE)."""
    import subprocess

    sizes = sizes or (count, count // 10)
    size = 2 * count  # the changes' keys are distinct below 2 × count
    work = Path(tempfile.mkdtemp(prefix="bench-warehouse-rss-"))
    figures = []
    try:
        say(f"warehouse: driver RSS, a {size:,}-row table, {count:,} changes")
        base = work / "base"
        base_table(base, size)
        batch = changes(size, count)
        for per in sizes:
            run = work / f"per-{per}"
            shutil.copytree(base, table_path(run / "merge", TABLE))
            for n, i in enumerate(range(0, count, per)):
                stage(batch[i:i + per], run / "staged" / f"{n:05d}")
            say(f"warehouse: driver RSS, {count:,} changes in batches of {per:,}")
            done = subprocess.run([sys.executable, "-m", "tests.bench.warehouse", "--rss-child",
                                   str(run), "--changes", str(per)],
                                  capture_output=True, text=True, check=True)
            shutil.rmtree(run, ignore_errors=True)
            peak = json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"]
            figures.append(Figure(
                f"warehouse driver: peak RSS merging {count:,} changes, batches of {per:,}",
                peak, "MB", notes=[f"into a {size:,}-row table, {-(-count // per)} MERGE "
                                   "commit(s) in one process doing only the driver's side"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.warehouse", description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"table rows [{ROWS:,}]")
    parser.add_argument("--changes", type=int, default=CHANGES,
                        help=f"changes to merge [{CHANGES:,}]")
    parser.add_argument("--rss-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        rss_child(args.rss_child, args.changes)
        return
    header = [code_line(), machine_line()]
    figures = warehouse(args.rows, args.changes,
                        say=lambda what: print(f"bench: {what}", file=sys.stderr, flush=True))
    figures += warehouse_rss(args.changes)
    print_report(figures, header)


if __name__ == "__main__":
    main()
