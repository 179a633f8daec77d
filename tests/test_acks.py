from capture.publish.acks import AckTracker


def send(batch, n=1):
    batch.pending += n  # what the publisher does per message


def ack(batch):
    batch.delivered(None, None)


def test_confirms_only_after_every_message_is_acked():
    t = AckTracker()
    b = t.open()
    send(b, 2)
    t.seal(b, 100)
    assert t.confirmed() == 0
    ack(b)
    assert t.confirmed() == 0
    ack(b)
    assert t.confirmed() == 100


def test_batches_release_in_commit_order_even_when_acks_are_not():
    t = AckTracker()
    first, second = t.open(), t.open()
    send(first)
    send(second)
    t.seal(first, 100)
    t.seal(second, 200)
    ack(second)  # a later transaction's partition answered first
    assert t.confirmed() == 0
    ack(first)
    assert t.confirmed() == 200


def test_unsealed_batch_holds_back_confirmation():
    t = AckTracker()
    b = t.open()
    send(b)
    ack(b)
    assert t.confirmed() == 0  # the transaction may still have messages coming
    t.seal(b, 50)
    assert t.confirmed() == 50


def test_a_failed_delivery_is_kept_and_never_confirmed():
    t = AckTracker()
    b = t.open()
    send(b)
    t.seal(b, 70)
    b.delivered("broker error", "msg")
    assert t.failures == [(b, "broker error", "msg")]
    assert t.confirmed() == 0


def test_empty_transaction_confirms_at_once_and_idle_position_advances():
    t = AckTracker(confirmed=10)
    t.seal(t.open(), 20)
    assert t.confirmed() == 20
    t.idle_at(30)
    assert t.confirmed() == 30
    b = t.open()
    send(b)
    t.idle_at(40)  # not idle: something is in flight
    assert t.confirmed() == 30
    assert t.in_flight == 1
