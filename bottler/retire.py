"""`bottler retire`: remove what one capture left behind — its topics, their registry subjects,
the search indices built from them only, its replication slot and publications, and the offsets
views stored for its topics — after listing it and asking (docs/operations.md).

Which topics are the capture's: its control topics (`[prefix.]_bottler.*`), and the table
topics it records as its own in `[prefix.]_bottler.capture` (schemas/ownership.py). So an
empty prefix never takes a topic bottler did not write, nor another prefix's.

Without ownership records — a capture that predates them, or a second run after a first one
deleted the topics (the control topic with them) but not every registry subject — the table
topics are recognised as before the records existed: by their value schema, whose `pg.schema`
and `pg.table` name the table the topic is named after (schemas/avro_schema.py,
schemas/topics.py), or, under a non-empty prefix, by having no value schema (`--output-format
json`); `shop.orders` is only the empty prefix's if its schema says it is the table
`shop.orders`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from common.config import KafkaSettings, RegistrySettings, TopicPrefixSettings, env
from common.errors import BottlerError
from common.flags import Flag
from common.kafka import client_config
from common.redact import redact
from schemas import ownership
from schemas.topics import CONTROL, table_topic, table_topics, with_prefix


class RetireSettings(KafkaSettings, RegistrySettings, TopicPrefixSettings):
    postgres: Annotated[str, Flag("--postgres", "-d", help="Source database DSN")] = Field(
        validation_alias=env("BOTTLER_PG_DSN", "BOTTLER_POSTGRES"))
    slot: Annotated[str, Flag("--slot", "-s", help="The capture's replication slot")]
    search: Annotated[str | None, Flag(
        "--search", help="Elasticsearch or OpenSearch URL: also remove the search indices built "
        "from these topics")] = None
    # NoDecode: BOTTLER_TARGET_DSN is one DSN, as the replica reads it, not a JSON list
    target: Annotated[list[str], NoDecode, Flag(
        "--target", "-t", help="A replica's target database: remove its stored offsets of these "
        "topics (repeatable)")] = Field([], validation_alias=env("BOTTLER_TARGET_DSN"))
    yes: Annotated[bool, Flag("--yes", "-y", help="Do not ask for confirmation.")] = False
    dry_run: Annotated[bool, Flag(
        "--dry-run", help="List what would be removed, remove nothing.")] = False

    @field_validator("target", mode="before")
    @classmethod
    def _targets(cls, value: Any) -> Any:
        """One DSN (as the replica's `target:` key or BOTTLER_TARGET_DSN has it) or several."""
        return [value] if isinstance(value, str) else value


@dataclass
class SearchIndex:
    index: str  # the physical index
    alias: str | None
    removed: bool  # built from retired topics only: the index goes; else its offsets are trimmed


@dataclass
class Plan:
    prefix: str
    slot: str
    topics: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    slot_exists: bool = False
    slot_pid: int | None = None  # the process streaming from the slot: a capture running
    publications: list[str] = field(default_factory=list)
    indices: list[SearchIndex] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)  # target (redacted) -> rows
    other_slots: list[str] = field(default_factory=list)  # recorded in the same progress topic

    def lines(self) -> list[str]:
        shown = self.prefix or "(empty)"
        out = [f"retiring the capture of prefix {shown}, slot {self.slot}:"]
        out += [f"  topic {t}" for t in self.topics] or ["  no topics"]
        out += [f"  registry subject {s}" for s in self.subjects]
        out += [f"  search index {i.index}" + (f" (alias {i.alias})" if i.alias else "")
                if i.removed else f"  search index {i.index}: its offsets of these topics"
                " (it also holds other topics' documents: kept)" for i in self.indices]
        if self.slot_exists:
            out.append(f"  replication slot {self.slot}" + (
                f" (in use by process {self.slot_pid}: stop the capture first)"
                if self.slot_pid else ""))
        out += [f"  publication {p}" for p in self.publications]
        out += [f"  {n} stored offsets in {t} (bottler.offsets, bottler.seeds)"
                for t, n in self.offsets.items() if n]
        if self.other_slots:
            out.append(f"  note: the progress topic also records slot(s) "
                       f"{', '.join(self.other_slots)}, which share this prefix")
        return out

    @property
    def empty(self) -> bool:
        return not (self.topics or self.subjects or self.slot_exists or self.publications
                    or self.indices or any(self.offsets.values()))


# -- what there is --------------------------------------------------------------------------


def plan(s: RetireSettings) -> Plan:
    from confluent_kafka.admin import AdminClient

    from capture.source.slot import slot_status
    from common.registry_client import registry_client

    p = Plan(s.topic_prefix, s.slot)
    rows = slot_status(s.postgres, s.slot)
    p.slot_exists = bool(rows)
    p.slot_pid = rows[0].active_pid if rows else None
    if p.slot_pid and not s.dry_run:
        raise _in_use(s.slot, p.slot_pid)
    p.publications = _publications(s.postgres, s.slot)
    admin = AdminClient(client_config(s.kafka, log_level=2))
    existing = set(_list_topics(admin, s.broker))
    registry = registry_client(s.schema_registry)
    subjects = set(registry.get_subjects())
    recorded = _recorded(s, existing)
    p.other_slots = sorted(k for k, v in recorded.items()
                           if "/" not in k and k != s.slot and isinstance(v, dict))
    named = set(ownership.owned(recorded))
    control = with_prefix(s.topic_prefix, CONTROL)
    # Subjects of topics already gone count too, so a second run finishes what one began.
    named_by_subjects = {n.rsplit("-", 1)[0] for n in subjects if n.endswith(("-key", "-value"))}
    if named:  # the capture's own records
        owned = [t for t in sorted(existing | named_by_subjects)
                 if t.startswith(control) or t in named]
    else:  # a capture from before the records (see the module's doc)
        candidate = table_topics(s.topic_prefix)
        owned = [t for t in sorted(existing | named_by_subjects)
                 if t.startswith(control)
                 or (candidate(t) and _written_by(s.topic_prefix, t, registry, subjects))]
    p.topics = [t for t in owned if t in existing]
    p.subjects = [f"{t}-{part}" for t in owned for part in ("key", "value")
                  if f"{t}-{part}" in subjects]
    if s.search:
        p.indices = _search_indices(s.search, set(p.topics))
    p.offsets = {redact(t): _stored_offsets(t, p.topics, delete=False) for t in s.target}
    return p


def _in_use(slot: str, pid: int) -> BottlerError:
    return BottlerError(
        f"replication slot {slot} is in use by process {pid}: a capture is still running; "
        "nothing was removed", "stop the capture first, then run bottler retire again")


def _list_topics(admin, broker: str) -> list[str]:
    from confluent_kafka import KafkaException

    from capture.setup.topics import unreachable_broker

    try:
        return list(admin.list_topics(timeout=10).topics)
    except KafkaException as exc:
        raise unreachable_broker(exc.args[0].str(), broker) from None


def _recorded(s: RetireSettings, existing: set[str]) -> dict[str, Any]:
    """The capture's progress records (by slot, chunk…), if its progress topic exists."""
    from capture.setup.state import CaptureState

    state = CaptureState(s.broker, s.topic_prefix, s.kafka_config)
    return state.read_all() if state.topic in existing else {}


def _written_by(prefix: str, topic: str, registry, subjects: set[str]) -> bool:
    """Whether the capture of ``prefix`` wrote ``topic``: its value schema names the table the
    topic is named after; without a value schema, when the prefix is not empty and no part of
    the name after it is another capture's control namespace."""
    subject = f"{topic}-value"
    if subject not in subjects:
        rest = topic[len(prefix) + 1:] if prefix else ""
        return bool(prefix) and not any(part.startswith("_") for part in rest.split("."))
    import json

    schema = json.loads(registry.get_latest_version(subject).schema.schema_str)
    if not isinstance(schema, dict) or "pg.table" not in schema:
        return False
    return table_topic(prefix, schema.get("pg.schema", "public"), schema["pg.table"]) == topic


def _publications(dsn: str, slot: str) -> list[str]:
    from capture.source.publication import unkeyed_name
    from common.pg import connect

    with connect(dsn) as conn:  # the capture's managed publications: named after the slot
        rows = conn.execute("select pubname from pg_publication where pubname = any(%s) "
                            "order by pubname", ([slot, unkeyed_name(slot)],)).fetchall()
    return [r[0] for r in rows]


def _search_indices(url: str, topics: set[str]) -> list[SearchIndex]:
    """The physical indices whose offsets document names retired topics (bottler-offsets)."""
    from materializers.search.client import SearchClient
    from materializers.search.indices import OFFSETS_INDEX, created_by_bottler

    client = SearchClient(url)
    if not client.exists(OFFSETS_INDEX):
        return []
    client.refresh(OFFSETS_INDEX)
    answer = client.request("POST", f"/{OFFSETS_INDEX}/_search",
                            {"size": 10000, "query": {"match_all": {}}})
    found = []
    for hit in answer.get("hits", {}).get("hits", []):
        doc = hit["_source"]
        read = {t for t, _, _ in doc.get("offsets", [])}
        if read & topics:
            # an index of that name that bottler did not create (its offsets document is an
            # older index's) is never deleted: only the document's offsets go
            own = client.index_uuid(doc["index"]) is None or created_by_bottler(client,
                                                                                doc["index"])
            found.append(SearchIndex(doc["index"], doc.get("alias"), read <= topics and own))
    return found


def _stored_offsets(dsn: str, topics: list[str], delete: bool) -> int:
    """Rows of ``topics`` in the target's bottler.offsets and bottler.seeds (counted, or
    deleted): every consumer group's, since the topics are gone for all of them."""
    from common.pg import connect

    n = 0
    with connect(dsn) as conn:
        for table in ("bottler.offsets", "bottler.seeds"):
            if not conn.execute("select to_regclass(%s) is not null", (table,)).fetchone()[0]:
                continue
            verb = "delete" if delete else "select count(*)"
            cur = conn.execute(f"{verb} from {table} where topic = any(%s)", (topics,))
            n += cur.rowcount if delete else cur.fetchone()[0]
        conn.commit()
    return n


# -- removing it ----------------------------------------------------------------------------


def remove(s: RetireSettings, p: Plan) -> list[str]:
    """Remove what ``p`` lists; what was done, one line each. The slot goes first: a capture
    that starts meanwhile then finds nothing to resume, rather than topics gone under it."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from capture.source.slot import drop_slot
    from common.pg import connect
    from common.registry_client import registry_client

    done = []
    if p.slot_exists:
        drop_slot(s.postgres, s.slot)
        done.append(f"dropped replication slot {s.slot}")
    if p.publications:
        import psycopg
        from psycopg import sql

        with connect(s.postgres) as conn:
            try:
                for name in p.publications:
                    conn.execute(sql.SQL("drop publication if exists {}").format(
                        sql.Identifier(name)))
                conn.commit()
            except psycopg.Error as exc:
                raise BottlerError(
                    f"could not drop publication(s) {', '.join(p.publications)}: "
                    f"{redact(str(exc).strip().splitlines()[0])}",
                    "drop them as their owner or a superuser (DROP PUBLICATION), or run "
                    "bottler retire again as one") from None
        done.append(f"dropped publication(s) {', '.join(p.publications)}")
    for target in s.target:
        n = _stored_offsets(target, p.topics, delete=True)
        done.append(f"deleted {n} stored offsets in {redact(target)}")
    if p.indices:
        done += _remove_search(s.search, p)
    if p.topics:
        admin = AdminClient(client_config(s.kafka, log_level=2))
        failed = []
        for topic, future in admin.delete_topics(p.topics, operation_timeout=30).items():
            try:
                future.result(timeout=60)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    failed.append(f"{topic} ({exc.args[0].str()})")
        if failed:
            raise BottlerError(f"could not delete topic(s) {', '.join(failed)}",
                               "check the broker's ACLs (DeleteTopic), then run bottler retire "
                               "again: it removes what is left")
        done.append(f"deleted {len(p.topics)} topic(s)")
    if p.subjects:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        registry = registry_client(s.schema_registry)
        for subject in p.subjects:
            try:
                registry.delete_subject(subject)
                registry.delete_subject(subject, permanent=True)
            except SchemaRegistryError as exc:
                raise BottlerError(
                    f"could not delete registry subject {subject}: HTTP "
                    f"{exc.http_status_code} {redact(str(exc.error_message))}",
                    "check the registry credentials' permissions (-R basic.auth.user.info), "
                    "then run bottler retire again: it removes what is left") from None
        done.append(f"deleted {len(p.subjects)} registry subject(s)")
    return done


def _remove_search(url: str, p: Plan) -> list[str]:
    from materializers.search.client import SearchClient
    from materializers.search.indices import OffsetStore, delete_index

    client = SearchClient(url)
    store = OffsetStore(client)
    topics = set(p.topics)
    done = []
    for index in p.indices:
        if index.removed:
            delete_index(client, index.index)  # its alias goes with it
            done.append(f"deleted search index {index.index}")
            continue
        doc = store.get(index.index)
        if doc is not None:
            kept = {(t, int(q)): int(o) for t, q, o in doc.get("offsets", []) if t not in topics}
            store.save(index.index, doc["index_uuid"], doc.get("alias"), kept,
                       released=bool(doc.get("released")))
            done.append(f"removed the retired topics' offsets of search index {index.index}")
    return done


# -- the command ----------------------------------------------------------------------------


def retire(s: RetireSettings, echo) -> None:
    import typer

    p = plan(s)
    if p.empty:
        echo(f"nothing to retire for prefix {s.topic_prefix or '(empty)'} and slot {s.slot}")
        return
    for line in p.lines():
        echo(line)
    echo("not removed: the views' own data (replica tables, search documents in indices that "
         "also hold other topics, Delta tables and their txn versions)")
    if s.dry_run:
        echo("dry run: nothing removed")
        return
    if not s.yes:
        if not sys.stdin.isatty():
            raise BottlerError("bottler retire asks before removing anything, and there is no "
                               "terminal to ask on", "pass --yes to remove without asking")
        typer.confirm("Remove all of the above?", abort=True)
    for line in remove(s, p):
        echo(line)
