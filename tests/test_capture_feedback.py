"""The stream's feedback to the server (capture/stream/feedback.py): only a position Kafka
acknowledged everything up to is confirmed, and an idle slot advances to the end of the WAL the
server sent only between transactions."""

from capture.publish.acks import AckTracker
from capture.stream.feedback import Feedback, Positions


class Cursor:
    """What Feedback uses of psycopg2's replication cursor."""

    def __init__(self, wal_end: int = 0):
        self.wal_end = wal_end
        self.sent: list[int | None] = []

    def send_feedback(self, flush_lsn=None, write_lsn=None, force=False):
        self.sent.append(flush_lsn)


def feedback(wal_end: int = 0):
    cursor, tracker, positions, heard = Cursor(wal_end), AckTracker(), Positions(), []
    return Feedback(cursor, tracker, positions, heard.append), cursor, tracker, positions, heard


def test_a_position_is_confirmed_once_kafka_acknowledged_its_batch():
    fb, cursor, tracker, positions, heard = feedback()
    batch = tracker.open()
    batch.pending = 1
    tracker.seal(batch, 100)
    fb.send(between_transactions=False, force=True)
    assert cursor.sent == [] and positions.confirmed == 0  # not acknowledged yet
    batch.pending = 0
    fb.send(between_transactions=False, force=True)
    assert cursor.sent == [100] and heard == [100]
    assert positions.acknowledged == positions.confirmed == 100


def test_an_idle_slot_advances_to_the_servers_wal_end_only_between_transactions():
    fb, cursor, _, positions, _ = feedback(wal_end=500)
    fb.send(between_transactions=False, force=True)
    assert positions.confirmed == 0
    fb.send(between_transactions=True, force=True)
    assert cursor.sent == [500] and positions.confirmed == 500


def test_feedback_waits_for_its_interval_unless_forced():
    fb, cursor, _, _, _ = feedback(wal_end=10)
    fb.send(between_transactions=True)
    cursor.wal_end = 20
    fb.send(between_transactions=True)  # within FEEDBACK_INTERVAL of the first
    assert cursor.sent == [10]
    fb.send(between_transactions=True, force=True)
    assert cursor.sent == [10, 20]
