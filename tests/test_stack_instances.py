"""The embedded stack runs a view as several instances (`bottler stack up --instances
replica=2`): each its own supervised process in the view's consumer group, under its name;
`bottler status` and `bottler stack status` list them; one killed is restarted under its name
and takes its partitions back; the replica ends equal to the source."""

from __future__ import annotations

import os
import signal

import pytest

from bottler.migrate.verify import verify
from bottler.status.groups import GroupReader
from common.errors import BottlerError
from compose.stack import REPLICA_DB, isolated_stack
from tests.support.cli import bottler, row_of
from tests.support.own_stack import Tracker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.stack  # a stack of its own


def held(stack) -> dict[str, list[int]]:
    """Instance -> the partitions of the orders topic it holds, as the broker says."""
    return {i.name: i.partitions.get("orders", [])
            for i in GroupReader(stack.endpoints.kafka).read() if i.group == "bottler-postgres"}


@pytest.mark.timeout(400)
def test_the_stack_runs_two_replica_instances_that_share_the_partitions():
    with isolated_stack() as stack, Tracker(stack.root) as tracker:
        at = ("--dir", str(stack.root))
        stack.up(apps=("capture", "replica"), demo=True, instances={"replica": 2})
        assert stack.processes() == ["capture", "replica", "replica-2"]
        assert all(stack.status()[name] for name in ("replica", "replica-2"))

        def shared():
            h = held(stack)
            return set(h) == {"replica", "replica-2"} and all(h.values()) and h
        first = wait_for(shared, 90, "both instances to hold partitions of orders")
        assert sorted(first["replica"] + first["replica-2"]) == [0, 1]  # 2 partitions: 2 views

        listing = bottler("stack", "status", *at, clean=False)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        assert row_of(listing.stdout, "replica-2 metrics")[1:3] == ["replica-2", "running"]
        view = bottler("status", "--once", *at, clean=False).stdout
        assert "View instances" in view and "replica-2" in view, view

        # a running view keeps its count: changing it is refused with what to do
        with pytest.raises(BottlerError, match="replica is running as 2 instance"):
            stack.up(instances={"replica": 3})

        # one instance killed: its supervisor starts it again under its name, and it takes
        # its partitions back
        killed = stack.supervision()["replica-2"]
        os.kill(killed.pid, signal.SIGKILL)
        wait_for(lambda: (s := stack.supervision().get("replica-2")) and s.restarts == 1
                 and s.state == "running", 60, "replica-2 to be restarted")
        wait_for(lambda: held(stack) == first, 60, "replica-2 to hold its partitions again")

        source, target = stack.endpoints.pg_dsn, stack.postgres.dsn(REPLICA_DB)
        wait_for(lambda: (tables := verify(source, target).tables) and len(tables) == 4
                 and all(t.identical for t in tables), 120, "the replica to equal the source")

        stack.down()
        assert tracker.alive() == []
