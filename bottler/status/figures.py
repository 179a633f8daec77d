"""What `bottler status` shows, as plain data: one snapshot of the slots, the topics and the
appliance's processes, each part with the error that kept it from being read."""

from __future__ import annotations

from dataclasses import dataclass, field

# States of a materializer (and of any app whose endpoint does not answer).
REBUILDING = "rebuilding"  # has not reached the end of its topics yet
CAUGHT_UP = "caught up"  # reached the end once; its lag says how far behind it is now
STARTING = "starting"  # answers, not at work yet: a view unassigned, a capture opening its stream
RUNNING = "running"  # the demo load: it has no topics to catch up on
DOWN = "down"  # the process is not running, or its endpoint does not answer


@dataclass
class Slot:
    name: str
    database: str | None
    active: bool
    retained_wal: int | None  # bytes of WAL the server keeps for the slot
    confirmed_lag: int | None  # bytes written since the slot's confirmed position
    wal_status: str | None  # reserved, extended, unreserved or lost
    failover: bool | None = None  # a failover slot (PostgreSQL 17+; None: older)
    synced: bool | None = None  # a standby's copy of the primary's failover slot (17+)


@dataclass
class Topic:
    name: str
    partitions: int
    messages: int  # the sum of the partitions' high watermarks: offsets written so far

    @property
    def control(self) -> bool:
        """A topic of the appliance's own (truncates, heartbeats, dead letters...)."""
        return self.name.startswith("_bottler.") or "._bottler." in self.name


@dataclass
class Instance:
    """One instance of a view in a consumer group and the partitions it holds."""

    group: str
    name: str  # its --instance-id, else its client id
    host: str
    partitions: dict[str, list[int]]  # topic -> partitions


@dataclass
class Capture:
    app: str
    snapshot_complete: bool
    snapshot_rows: int  # rows copied by this process's snapshot (0 when it resumed a slot)
    events: int  # change events streamed since the process started
    lag_bytes: int  # WAL the server sent that is not confirmed yet
    dead_letters: int = 0  # rows sent to the capture's dead-letter topic since it started
    streaming: bool = False  # its replication stream is open (the slot active)

    @property
    def state(self) -> str:
        if self.streaming:
            return "streaming"
        return STARTING if self.snapshot_complete else "snapshot"  # copied: opening the stream


@dataclass
class Materializer:
    name: str
    app: str
    caught_up: bool | None  # None: the process has not exported it yet
    lag: dict[str, int] = field(default_factory=dict)  # topic -> messages behind
    changes: int = 0
    dead_letters: int = 0

    @property
    def state(self) -> str:
        if self.caught_up is None:
            return STARTING
        return CAUGHT_UP if self.caught_up else REBUILDING

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())


@dataclass
class Restarts:
    """What a supervisor (the embedded stack's) says of its process."""

    count: int  # restarts since the stack started it
    last_exit: str | None = None  # how the last failed run ended ("exit code 2")
    last_error: str | None = None  # that run's last error line in its log
    failed_at: float | None = None  # when (epoch seconds)


@dataclass
class App:
    """One process of the appliance, as its Prometheus endpoint shows it."""

    name: str
    url: str
    error: str | None = None  # why it counts as down
    capture: Capture | None = None
    materializers: list[Materializer] = field(default_factory=list)
    load_transactions: int | None = None  # the demo load's commits (None: not the load)
    restarts: Restarts | None = None  # None: nothing supervises it (or nothing says)

    @property
    def down(self) -> bool:
        return self.error is not None


@dataclass
class Snapshot:
    title: str
    slots: list[Slot] | None = None  # None: no source database to ask
    slots_error: str | None = None
    failover: list[str] = field(default_factory=list)  # what a failover would meet, one a line
    topics: list[Topic] | None = None  # None: no broker to ask
    topics_error: str | None = None
    instances: list[Instance] | None = None  # views sharing a consumer group (--join-group)
    instances_error: str | None = None
    apps: list[App] = field(default_factory=list)

    @property
    def materializers(self) -> list[Materializer]:
        return [m for app in self.apps for m in app.materializers]

    @property
    def healthy(self) -> bool:
        """Every source read and every app answering."""
        return not (self.slots_error or self.topics_error or any(a.down for a in self.apps))


class Unavailable(Exception):
    """A source of figures could not be read; the message is safe to show."""
