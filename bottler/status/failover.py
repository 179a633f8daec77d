"""What a failover would meet (PostgreSQL 17+ failover slots, docs/operations.md, high
availability): one line per missing setting, each saying what to set.

The primary shows its own settings and, through its physical slots, whether each standby
streams and sends hot_standby_feedback (the slot's xmin). A standby's settings and its copies of
the failover slots are seen only on the standby: status reads them from each --standby DSN."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

from psycopg.conninfo import conninfo_to_dict

from bottler.status.figures import Unavailable
from bottler.status.slots import SlotReader
from common.redact import redact

FAILOVER_SINCE = 170000  # server_version_num: failover slots came with PostgreSQL 17
RELOAD = "SELECT pg_reload_conf()"

PRIMARY = """
select pg_is_in_recovery(), current_setting('synchronized_standby_slots', true),
       (select coalesce(array_agg(slot_name order by slot_name), '{}') from pg_replication_slots
        where slot_type = 'logical' and failover and not temporary),
       (select coalesce(array_agg(slot_name order by slot_name), '{}') from pg_replication_slots
        where slot_type = 'logical' and not failover and not temporary)
"""
PHYSICAL = """
select slot_name, active, xmin is not null from pg_replication_slots
where slot_type = 'physical' order by slot_name
"""
STANDBY = """
select pg_is_in_recovery(), current_setting('sync_replication_slots', true),
       current_setting('hot_standby_feedback'), current_setting('wal_level'),
       current_setting('primary_slot_name')
"""
COPIES = """
select slot_name, synced and not temporary from pg_replication_slots where slot_type = 'logical'
"""


@dataclass
class Primary:
    listed: list[str]  # synchronized_standby_slots
    failover: list[str]  # its failover slots
    plain: list[str]  # its other logical slots
    unlisted: set[str]  # physical slots with a standby on them that the list lacks (said)
    no_feedback: dict[str, str]  # physical slot -> the line saying its standby sends none


def problems(primary: SlotReader | None, standbys: list[SlotReader]) -> list[str]:
    """Every problem found, one line each (a server that does not answer is one too)."""
    lines: list[str] = []
    seen = None
    if primary is not None:
        with suppress(Unavailable):  # the slots' own error says so
            seen = _primary(primary, lines)
    for standby in standbys:
        try:
            _standby(standby, seen, lines)
        except Unavailable as exc:
            lines.append(f"standby {_where(standby.dsn)}: cannot read it ({exc})")
    return lines


def _primary(reader: SlotReader, lines: list[str]) -> Primary | None:
    if reader.connection().info.server_version < FAILOVER_SINCE:
        return None
    ((standby, setting, failover, plain),) = reader.query(PRIMARY)
    if standby:  # a capture on a standby (its slots cannot be failover slots)
        return None
    seen = Primary(_names(setting), failover, plain, set(), {})
    physical = {name: (active, feedback) for name, active, feedback in reader.query(PHYSICAL)}
    if seen.listed:
        lines += [f"slot {name} is not a failover slot: a promotion loses it; with its capture "
                  f"stopped run ALTER_REPLICATION_SLOT {name} (FAILOVER true) over a replication "
                  "connection" for name in plain]
    if not failover:
        return seen
    if not seen.listed:
        lines.append(
            "synchronized_standby_slots is empty on the primary: the capture may publish "
            "changes a promoted standby never received; set it to the standbys' physical slots "
            f"(ALTER SYSTEM SET synchronized_standby_slots = 'standby1'; {RELOAD})")
    for name in seen.listed:
        if name not in physical:
            lines.append(f"synchronized_standby_slots names {name}, which is no physical slot "
                         "of the primary: the capture waits for it; create the standby's slot "
                         "or remove it from the list")
        elif not physical[name][0]:
            lines.append(f"no standby streams from slot {name} (in synchronized_standby_slots): "
                         "the capture waits for it; start the standby, or remove it from the "
                         "list while it is gone")
    for name, (active, feedback) in physical.items():
        if active and seen.listed and name not in seen.listed:  # (an empty list: said above)
            seen.unlisted.add(name)
            lines.append(
                f"the standby on physical slot {name} is not in synchronized_standby_slots: a "
                "promoted standby may lack changes the capture published; add it (ALTER "
                f"SYSTEM SET synchronized_standby_slots = '{_listed(seen.listed, name)}'; "
                f"{RELOAD})")
        if active and not feedback:
            seen.no_feedback[name] = (f"the standby on physical slot {name} sends no "
                                      "hot_standby_feedback: set hot_standby_feedback = on on "
                                      "it (slot sync needs it)")
            lines.append(seen.no_feedback[name])
    return seen


def _standby(reader: SlotReader, primary: Primary | None, lines: list[str]) -> None:
    at = f"standby {_where(reader.dsn)}"
    version = reader.connection().info.server_version
    if version < FAILOVER_SINCE:
        lines.append(f"{at} runs PostgreSQL {version // 10000}: failover slots need 17 or newer")
        return
    ((recovery, sync, feedback, wal_level, slot),) = reader.query(STANDBY)
    if not recovery:
        lines.append(f"{at} is not a standby (not in recovery): give --standby a standby's DSN")
        return
    set_on = f"; {RELOAD} on it"
    if sync != "on":
        lines.append(f"{at}: sync_replication_slots is off, it keeps no copy of the failover "
                     f"slots; ALTER SYSTEM SET sync_replication_slots = on{set_on}")
    if feedback != "on":
        if primary is not None and slot in primary.no_feedback:  # the same problem, said here
            lines.remove(primary.no_feedback[slot])
        lines.append(f"{at}: hot_standby_feedback is off (slot sync needs it); ALTER SYSTEM SET "
                     f"hot_standby_feedback = on{set_on}")
    if wal_level != "logical":
        lines.append(f"{at}: wal_level is {wal_level} (slot sync needs logical); ALTER SYSTEM "
                     "SET wal_level = logical, then restart it")
    if not slot:
        lines.append(f"{at}: no primary_slot_name (slot sync needs one); stream from a physical "
                     "slot of the primary (primary_slot_name = 'standby1') and name it in the "
                     "primary's synchronized_standby_slots")
    if primary is None:
        return
    # its slot missing from a list that names others (the primary said it if it streams now)
    if (slot and primary.failover and primary.listed and slot not in primary.listed
            and slot not in primary.unlisted):
        lines.append(f"{at} streams from slot {slot}, which the primary's "
                     "synchronized_standby_slots does not name; ALTER SYSTEM SET "
                     f"synchronized_standby_slots = '{_listed(primary.listed, slot)}'; "
                     f"{RELOAD} on the primary")
    copies = dict(reader.query(COPIES))
    for name in primary.failover:
        if not copies.get(name):
            state = "only a temporary copy" if name in copies else "no copy"
            lines.append(f"{at} has {state} of failover slot {name} yet: a promotion now would "
                         "lose it (the copy follows within seconds once the settings above are "
                         "right and the standby has caught up with the slot)")


def _names(setting: str | None) -> list[str]:
    """The slots a list setting names (`a, "b"`)."""
    return [n.strip().strip('"') for n in (setting or "").split(",") if n.strip()]


def _listed(listed: list[str], name: str) -> str:
    return ", ".join([*listed, name])


def _where(dsn: str) -> str:
    """host:port of a DSN, never its password."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - any DSN psycopg cannot parse: shown redacted
        return redact(dsn)
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}"
