"""The replica's seed, its initial copy from the source itself (``--seed-from``): each captured
table COPYed from a snapshot of the source straight into the target, in parallel page ranges, at
``pg_dump`` speed; the topics then take over where the snapshot ends (:mod:`.handover` says why
nothing is applied twice or missed).

Steps, once per target and consumer group (a target with offsets stored already is not seeded):

1. **Plan.** Wait until the capture has made its slot and its topics (its progress record in
   ``_bottler.capture``), then record in ``bottler.seeds`` every table topic to seed (state
   ``copying``) or not (``not seeded``, with the reason: unkeyed, the target table holds rows).
   The set is fixed here: tables that join the capture later are read from their topics.
2. **Snapshot.** The topics' end offsets, then the source's WAL insert position B, then a
   temporary logical slot exporting a snapshot (consistent point S ≥ B), imported by every
   worker; the slot goes as soon as they hold the snapshot.
3. **Copy.** Per table: the source's columns in the snapshot checked against the topic's value
   schema of that moment, the target table made by the replica's own rules (created, or adopted
   when empty), emptied (rows of an earlier, unfinished attempt), then its pages cut into
   ranges that the workers pipe ``COPY (SELECT … WHERE ctid …) TO STDOUT`` → ``COPY … FROM
   STDIN`` through two ``psql`` processes (:mod:`materializers.postgres.relay`), a transaction
   per range. The range that completes a table also marks it ``done`` with B, S and the
   offsets, in its own transaction.

A crash or a stop leaves some tables ``copying``: the next start empties them and copies them
again under a new snapshot; ``done`` tables keep theirs.

The rooms: :mod:`.seeder` runs the steps above, :mod:`.capture_watch` waits for the capture
(step 1), :mod:`.tables` knows the tables it copies and their keys, :mod:`.progress`
counts their ranges and marks them done, :mod:`.handover` is what the seed leaves in
``bottler.seeds`` and how the topics take over from it.
"""


class Stopped(Exception):  # noqa: N818 - a stop request, not an error
    """A stop was requested during the seed: unfinished tables are copied again next time."""
