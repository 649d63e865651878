"""The one outbox alone (the pipelines' uses run on PostgreSQL in tests/integration:
dispatcher, exports, snapshots)."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from timekeeper import faults
from timekeeper.db.outbox import Outbox, publish_committed


class Queue:
    def __init__(self, refuse: set[UUID] = frozenset(), error: Exception | None = None):
        self.refuse, self.error, self.sent = set(refuse), error, []

    def publish(self, messages: list[UUID]) -> set[UUID]:
        if self.error is not None:
            raise self.error
        self.sent.extend(messages)
        return self.refuse & set(messages)


def _recording(log: list) -> Outbox[UUID]:
    return Outbox(key=lambda m: m, record_accepted=lambda conn, ms: log.append(("accepted", ms)) or len(ms),
                  record_refused=lambda conn, ms: log.append(("refused", ms)) or len(ms),
                  after_accept="test.after_accept", before_refusal="test.before_refusal")


def test_accepted_are_recorded_then_the_send_is_closed_with_the_refused_ones():
    a, b, c = uuid4(), uuid4(), uuid4()
    log: list = []
    sent = publish_committed(None, Queue(refuse={b}), [a, b, c], _recording(log))
    assert (sent.accepted, sent.refused, sent.recorded, sent.released) == ([a, c], [b], 2, 1)
    assert log == [("accepted", [a, c]), ("refused", [b])]


def test_an_empty_send_still_closes_and_an_all_refused_one_records_no_acceptance():
    log: list = []
    assert publish_committed(None, Queue(), [], _recording(log)).released == 0
    a = uuid4()
    publish_committed(None, Queue(refuse={a}), [a], _recording(log))
    assert log == [("refused", []), ("refused", [a])]


def test_a_crash_after_the_send_leaves_the_acceptance_unrecorded():
    a = uuid4()
    log: list = []
    def injector(name, context):
        if name == "test.after_accept":
            raise faults.InjectedCrash(name)

    faults.install(injector)
    try:
        with pytest.raises(faults.InjectedCrash):
            publish_committed(None, Queue(), [a], _recording(log))
    finally:
        faults.install(None)
    assert log == []


def test_a_raising_publisher_propagates_unless_the_outbox_contains_it():
    a = uuid4()
    with pytest.raises(RuntimeError):
        publish_committed(None, Queue(error=RuntimeError("down")), [a], Outbox(key=lambda m: m))
    log: list = []
    contained = Outbox(key=lambda m: m, record_refused=lambda conn, ms: log.extend(ms), contain=True)
    assert publish_committed(None, Queue(error=RuntimeError("down")), [a], contained).refused == [a]
    assert log == [a]
