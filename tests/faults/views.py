"""Each view of the appliance compared with the source database, and the topics' duplicates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg

from bottler.migrate.verify import DIFFERENT, EXTRA, MISSING, verify
from compose.stack import REPLICA_DB, Stack
from tests.support.topics import Decoder, read_topic


@dataclass
class ViewCheck:
    view: str
    missing: int = 0  # rows of the source the view lacks: losses
    different: int = 0  # rows the view holds with another value (stale or wrong)
    extra: int = 0  # rows the view holds that the source does not (a missed delete)
    detail: str = ""
    keys: list[tuple[str, str]] = field(default_factory=list)  # (table, "id=5") that differ

    @property
    def equal(self) -> bool:
        return not (self.missing or self.different or self.extra)


def replica(stack: Stack) -> ViewCheck:
    report = verify(stack.endpoints.pg_dsn, stack.postgres.dsn(REPLICA_DB))
    check = ViewCheck("replica")
    for table in report.tables:
        counts = table.difference_counts
        check.missing += counts[MISSING] + (0 if table.exists_in_target else table.source_rows)
        check.different += counts[DIFFERENT]
        check.extra += counts[EXTRA]
        if not table.identical:
            check.detail += f"{table.qualified}: {dict(counts)} {table.problems}; "
            if not (counts or table.problems):  # checksums differ, no key listed
                check.different += 1
            check.keys += [(table.table, d.key) for d in table.differences]
    return check


# Per shop table: its key columns, then the columns compared in the views that are not a
# PostgreSQL copy (types differ there: JSON as text, and so on).
SHOP = {
    "customers": (("id",), ("email", "country")),
    "products": (("id",), ("sku", "price", "in_stock")),
    "orders": (("id",), ("status", "total", "customer_id")),
    "order_items": (("order_id", "line_no"), ("product_id", "quantity", "unit_price")),
}


def source_rows(stack: Stack, table: str) -> dict[tuple, tuple]:
    key, cols = SHOP[table]
    with psycopg.connect(stack.endpoints.pg_dsn) as conn:
        return {row[:len(key)]: row[len(key):] for row in conn.execute(
            f"select {', '.join(key + cols)} from {table}")}


def compare(view: str, expected: dict[str, dict], actual: dict[str, dict]) -> ViewCheck:
    check = ViewCheck(view)
    for table, rows in expected.items():
        got = actual.get(table, {})
        for key, row in rows.items():
            if key not in got:
                check.missing += 1
                check.keys.append((table, _key_text(table, key)))
            elif got[key] != row:
                check.different += 1
                check.keys.append((table, _key_text(table, key)))
        check.extra += len(got.keys() - rows.keys())
    return check


def _key_text(table: str, key: tuple) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(SHOP[table][0], key, strict=True))


def warehouse(stack: Stack) -> ViewCheck:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    actual = {}
    for table, (key, cols) in SHOP.items():
        try:
            delta = DeltaTable(str(stack.root / "warehouse" / "public" / table))
        except TableNotFoundError:
            continue
        actual[table] = {tuple(r[c] for c in key): tuple(r[c] for c in cols)
                         for r in delta.to_pyarrow_table(columns=[*key, *cols]).to_pylist()}
    return compare("warehouse", {t: source_rows(stack, t) for t in SHOP}, actual)


# The tables the stack's search view indexes (compose/services.py `search`).
SEARCHED = ("products", "orders")


def search(stack: Stack) -> ViewCheck:
    """The documents the search alias ``shop`` serves (refreshed first), against the source's
    rows: exactly, a decimal read back from the JSON number the view writes with its digits."""
    import httpx

    from materializers.search.documents import TABLE_FIELD

    url = stack.endpoints.search
    httpx.post(f"{url}/shop/_refresh", timeout=60).raise_for_status()
    actual: dict[str, dict] = {}
    for doc in _documents(url, "shop"):
        table = doc[TABLE_FIELD].rsplit(".", 1)[-1]
        key, cols = SHOP[table]
        actual.setdefault(table, {})[tuple(doc[c] for c in key)] = tuple(
            Decimal(repr(v)) if isinstance(v, float) else v for c in cols
            for v in [doc.get(c)])
    return compare("search", {t: source_rows(stack, t) for t in SEARCHED}, actual)


def _documents(url: str, alias: str):
    """Every document's source, through a scroll."""
    import httpx

    answer = httpx.post(f"{url}/{alias}/_search", params={"scroll": "1m"}, timeout=60,
                        json={"size": 5000, "sort": ["_doc"]}).raise_for_status().json()
    while hits := answer["hits"]["hits"]:
        yield from (hit["_source"] for hit in hits)
        answer = httpx.post(f"{url}/_search/scroll", timeout=60, json={
            "scroll": "1m", "scroll_id": answer["_scroll_id"]}).raise_for_status().json()


def translator(stack: Stack) -> ViewCheck:
    """The business events a read_committed consumer sees, order by order, against those the
    source's final order statuses imply: one of each, in order (a second one is 'different')."""
    from tests.support.stack import RunningStack
    from tests.support.translate import Events, expected_lifecycles

    expected = expected_lifecycles(stack.endpoints.pg_dsn)
    seen = Events(RunningStack(stack), "order-events").by_order()
    check = ViewCheck("translator")
    for order_id, events in expected.items():
        if order_id not in seen or set(events) - set(seen[order_id]):
            check.missing += 1
            check.keys.append(("orders", f"id={order_id}"))
        elif seen[order_id] != events:
            check.different += 1
            check.detail += f"order {order_id}: {seen[order_id]}; "
    return check


VIEWS: dict[str, Callable[[Stack], ViewCheck]] = {
    "replica": replica, "search": search, "warehouse": warehouse, "translator": translator}


def duplicates(stack: Stack, topics: list[str]) -> int:
    """Messages that repeat the previous message of their key byte for byte: replays of the
    at-least-once path (a row updated to the same value counts too: an upper bound)."""
    count = 0
    for topic in topics:
        last: dict[bytes | None, bytes | None] = {}
        for msg in read_topic(stack.endpoints.kafka, topic):
            key = msg.key()
            if key in last and last[key] == msg.value():
                count += 1
            last[key] = msg.value()
    return count


def whereabouts(stack: Stack, check: ViewCheck) -> str:
    """Where the differing rows are in their topics (for a diagnosis): the last message of each
    key, or that the topic never had it (then the capture lost it, not the view)."""
    decoder = Decoder(stack.endpoints.registry)
    notes = []
    for table in sorted({t for t, _ in check.keys}):
        wanted = {k for t, k in check.keys if t == table}
        last: dict[str, str] = {}
        for msg in read_topic(stack.endpoints.kafka, table):
            key = ", ".join(f"{c}={v}" for c, v in decoder.key(msg).items())
            if key in wanted:
                value = decoder.value(msg) if msg.value() is not None else None
                last[key] = f"@{msg.offset()} {'tombstone' if value is None else value}"
        notes += [f"{table} {k}: {last.get(k, 'never in the topic')}" for k in sorted(wanted)]
    return " | " + "; ".join(notes)
