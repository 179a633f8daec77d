"""The demo shop's orders as business events.

An order row (compose/demo_shop.sql: ``status`` is placed, paid, shipped or cancelled) becomes
``OrderPlaced``, ``OrderPaid``, ``OrderShipped`` and ``OrderCancelled`` events in the topic
``order-events``, keyed by the order id, so one order's events keep their order. The value
schema is a union of the four records: one topic holds every type.

Events come from comparing the new row with the previous one (the keyed state):

- an order seen for the first time is placed, then steps forward to its status: a new order
  that is already shipped gives ``OrderPlaced``, ``OrderPaid``, ``OrderShipped``;
- a status moving forward along placed → paid → shipped gives one event per step (``placed``
  straight to ``shipped`` also says ``OrderPaid``);
- entering ``cancelled`` from any status gives ``OrderCancelled``;
- anything else is technical noise and gives nothing: the same status (a note, the total, a
  replayed row), a status moving back or out of ``cancelled`` (a correction), a deleted row.

Because the events follow the difference between rows, replaying the topic from the start
gives the same events per order even after compaction dropped its intermediate rows, except
for a step that compaction hides entirely (paid, then cancelled, compacted to cancelled).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from materializers.translators.api import Event, Output, RowChange, Translator

TOPIC = "order-events"
NAMESPACE = "bottler.shop.events"
STEPS = ("placed", "paid", "shipped")  # the forward lifecycle; cancelled stands aside
CENT = Decimal("0.01")

_TIME = {"type": "long", "logicalType": "timestamp-micros"}
_MONEY = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}


def _record(name: str, doc: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record", "name": name, "namespace": NAMESPACE, "doc": doc,
        "fields": [
            {"name": "order_id", "type": "long"},
            {"name": "occurred_at", "type": _TIME,
             "doc": "the row's own time, else the source commit time, else the capture's"},
            *fields,
        ],
    }


KEY_SCHEMA = {"type": "record", "name": "OrderKey", "namespace": NAMESPACE,
              "fields": [{"name": "order_id", "type": "long"}]}
VALUE_SCHEMA = [
    _record("OrderPlaced", "A customer placed an order.",
            {"name": "customer_id", "type": "long"},
            {"name": "total", "type": _MONEY},
            {"name": "note", "type": ["null", "string"], "default": None}),
    _record("OrderPaid", "The order was paid.", {"name": "total", "type": _MONEY}),
    _record("OrderShipped", "The order left the warehouse."),
    _record("OrderCancelled", "The order was cancelled.",
            {"name": "previous_status", "type": "string"}),
]


def translate(change: RowChange) -> list[Event]:
    row = change.row
    if row is None:
        return []  # a deleted order is no business event
    status = row["status"]
    if status not in STEPS and status != "cancelled":
        raise ValueError(f"order {row['id']} has an unknown status {status!r}")
    before = change.before["status"] if change.before is not None else None
    events = []
    if before is None:
        events.append(_event("OrderPlaced", row, change, row["placed_at"],
                             customer_id=row["customer_id"], total=_money(row),
                             note=row["note"]))
    if status == "cancelled":
        if before != "cancelled":
            events.append(_event("OrderCancelled", row, change, None,
                                 previous_status=before or "placed"))
    elif before != "cancelled":
        done = STEPS.index(before) if before in STEPS else 0
        for step in STEPS[done + 1:STEPS.index(status) + 1]:
            if step == "paid":
                events.append(_event("OrderPaid", row, change, row["paid_at"],
                                     total=_money(row)))
            else:
                events.append(_event("OrderShipped", row, change, row["shipped_at"]))
    return events


def _event(kind: str, row: dict[str, Any], change: RowChange, at: int | None,
           **fields: Any) -> Event:
    if at is None:
        source = change.source
        at = source.commit_time
        if at is None:
            at = (source.timestamp or 0) * 1000  # milliseconds to microseconds
    return Event(TOPIC, {"order_id": row["id"]},
                 {"order_id": row["id"], "occurred_at": at, **fields}, type=kind)


def _money(row: dict[str, Any]) -> Decimal:
    total = row["total"]
    if not isinstance(total, Decimal):  # the string branch of a numeric: NaN
        raise ValueError(f"order {row['id']} has a total of {total!r}")
    return total.quantize(CENT)


translator = Translator(
    name="orders",
    inputs=["orders"],
    outputs=[Output(TOPIC, KEY_SCHEMA, VALUE_SCHEMA)],
    translate=translate,
    description="the demo shop's orders as OrderPlaced/Paid/Shipped/Cancelled events",
)
