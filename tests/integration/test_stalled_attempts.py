"""A consumer process stalled past its lease, then resumed, never acts after losing it.

Each test's handler stalls in simulated time: on its first attempt, before it writes, a
second consumer (its own connection, the clock a second past the lease) receives the run
again and takes it over; then the stalled handler resumes and writes and settles under its
old attempt. The fences (the attempt number in every settlement and in every journal
write) must refuse all of it: the run's outcome and effects are the second attempt's only.
"""

from __future__ import annotations

import threading
import types
import uuid
from datetime import timedelta

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.reporting.delivery_journal import DeliveryJournal, Recipient, RunTakenOver, record_skips
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, RetryLater, process_batch
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)
HOURLY = {"cron": "0 * * * *", "timezone": "UTC"}


@pytest.fixture
def world(conn):
    conn.execute("CREATE TABLE IF NOT EXISTS test_effects (run_id uuid NOT NULL, attempt integer NOT NULL)")
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "query_deliveries, test_effects CASCADE")
    return conn


class StallingKind:
    """A work kind whose first attempt of ``stalled_run`` stalls past its lease: while it is
    frozen, ``take_over`` runs (the second consumer); then it resumes and writes."""

    def __init__(self, *, leased: bool) -> None:
        self.registry = WorkKindRegistry()
        self.registry.register(OWNER, "test.work", self.handle, leased=leased)
        self.stalled_run: uuid.UUID | None = None
        self.take_over = None
        self.resumed: dict = {}
        self.journal_url: str | None = None
        #: Set: a later attempt waits for it after entering its handler (it is still running
        #: when the stalled attempt resumes); ``entered`` tells it did.
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def handle(self, ctx):
        """Idempotency: test kind; one effect row per attempt that commits."""
        if ctx.run_id == self.stalled_run and ctx.attempt == 1:
            self.take_over()  # frozen here past the lease while another consumer takes the run
            self.resumed["at"] = ctx.now
        elif ctx.attempt > 1 and self.gate is not None:
            self.entered.set()
            assert self.gate.wait(30)
        if self.journal_url is not None:  # a journal write beside the run's transaction
            journal = connect(self.journal_url)
            try:
                schedule = types.SimpleNamespace(workspace_id=ctx.workspace_id, schedule_id=ctx.schedule_id)
                try:
                    record_skips(DeliveryJournal(ctx, journal, monotonic=lambda: 0.0), schedule,
                                 [Recipient(f"user-{ctx.attempt}", "no_address", "", None)])
                except RunTakenOver:
                    self.resumed["journal_refused"] = ctx.attempt
                    raise
            finally:
                journal.close()
        ctx.conn.execute("INSERT INTO test_effects (run_id, attempt) VALUES (%s, %s)", (ctx.run_id, ctx.attempt))
        return Succeeded({"attempt": ctx.attempt})


def due_runs(conn, now, count):
    """``count`` due hourly schedules dispatched at ``now``; their run messages."""
    for _ in range(count):
        service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="test.work",
                                recurrence=HOURLY, actor="owner-1", now=now - timedelta(minutes=30))
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings(OWNER), now=now, publisher=publisher)
    assert len(publisher.sent) == count
    return publisher.sent


def second_consumer(db_url, kind, message, now, taken: dict):
    """The take-over: a second consumer receives ``message`` at ``now`` on its own
    connection. With ``kind.gate`` it runs on a thread and returns once its handler is
    running (attempt 2 is in flight: ``taken["thread"]`` finishes it); without, at once."""
    def receive():
        second = connect(db_url)
        try:
            [taken["result"]] = process_batch(second, [Delivery("copy", message, 1)], now=now,
                                              registry=kind.registry, settings=SETTINGS)
        finally:
            second.close()

    if kind.gate is None:
        receive()
        return
    taken["thread"] = threading.Thread(target=receive)
    taken["thread"].start()
    assert kind.entered.wait(30)


def finish(kind, taken):
    """Let a takeover still in flight finish."""
    if kind.gate is not None:
        kind.gate.set()
        taken["thread"].join(30)


def run_row(conn, run_id):
    return conn.execute("SELECT * FROM schedule_runs WHERE id = %s", (run_id,)).fetchone()


def effects(conn):
    return sorted((r["run_id"], r["attempt"]) for r in conn.execute("SELECT run_id, attempt FROM test_effects"))


#: While the stalled attempt resumes, the second attempt has settled (the run is finished)
#: or is still running (only the attempt number tells the two holders apart).
TAKEOVERS = ["settled", "in_flight"]


@pytest.mark.parametrize("takeover", TAKEOVERS)
def test_a_stalled_batch_member_is_taken_over_and_its_batchs_writes_and_settlements_are_refused(
        db_url, world, utc, takeover):
    # Given three runs received in one batch of a transactional work kind
    now = utc(2027, 1, 4, 10, 0)
    messages = due_runs(world, now, 3)
    kind = StallingKind(leased=False)
    kind.gate = threading.Event() if takeover == "in_flight" else None
    stalled = messages[0]
    kind.stalled_run = stalled.run_id
    later = now + SETTINGS.lease + timedelta(seconds=1)
    taken: dict = {}
    # While the first handler of the batch is frozen, the run is received again after its
    # lease expired, by a second consumer on its own connection
    kind.take_over = lambda: second_consumer(db_url, kind, stalled, later, taken)
    # When the stalled consumer resumes: its handlers write and it settles under attempt 1
    results = process_batch(world, [Delivery(str(m.run_id), m, 1) for m in messages], now=now,
                            registry=kind.registry, settings=SETTINGS)
    finish(kind, taken)
    # Then the second consumer settled the run under attempt 2
    assert kind.resumed["at"] == now
    assert taken["result"].action == "settled"
    run = run_row(world, stalled.run_id)
    assert (run["state"], run["attempts"], run["finished_at"]) == ("succeeded", 2, later)
    assert run["detail"] == {"attempt": 2}
    # And the stalled consumer's settlement was refused (fenced) and its batch rolled back:
    # no write of attempt 1 exists, of the stalled run or of its batch-mates
    assert results[0].action == "fenced"
    assert all(isinstance(r, RetryLater) for r in results[1:])
    assert effects(world) == [(stalled.run_id, 2)]
    for mate in messages[1:]:
        assert run_row(world, mate.run_id)["state"] == "running"
    # And the batch-mates, received again once their lease expired, settle once
    again = process_batch(world, [Delivery(str(m.run_id), m, 2) for m in messages[1:]], now=later,
                          registry=kind.registry, settings=SETTINGS)
    assert [r.action for r in again] == ["settled", "settled"]
    assert effects(world) == sorted([(stalled.run_id, 2)] + [(m.run_id, 2) for m in messages[1:]])


@pytest.mark.parametrize("takeover", TAKEOVERS)
def test_a_stalled_leased_run_is_refused_its_journal_write_and_its_settlement(db_url, world, utc, takeover):
    # Given a run of a leased work kind that writes a journal row beside its transaction
    now = utc(2027, 1, 4, 10, 0)
    [message] = due_runs(world, now, 1)
    kind = StallingKind(leased=True)
    kind.gate = threading.Event() if takeover == "in_flight" else None
    kind.stalled_run = message.run_id
    kind.journal_url = db_url
    later = now + SETTINGS.lease + timedelta(seconds=1)
    taken: dict = {}
    kind.take_over = lambda: second_consumer(db_url, kind, message, later, taken)
    # When the stalled attempt resumes and writes its journal row, then would settle
    [result] = process_batch(world, [Delivery(str(message.run_id), message, 1)], now=now,
                             registry=kind.registry, settings=SETTINGS)
    finish(kind, taken)
    # Then the journal refused the stalled attempt's write (nothing of attempt 1 written)
    assert kind.resumed["journal_refused"] == 1
    journal = world.execute("SELECT user_id, attempt FROM query_deliveries WHERE run_id = %s",
                            (message.run_id,)).fetchall()
    assert journal == [{"user_id": "user-2", "attempt": 2}]
    # And its settlement (the lease it would give back for a retry) was refused too: the
    # run is the second attempt's, succeeded, with the second attempt's effect only
    assert result.action == "fenced" and taken["result"].action == "settled"
    run = run_row(world, message.run_id)
    assert (run["state"], run["attempts"], run["finished_at"], run["error"]) == ("succeeded", 2, later, None)
    assert effects(world) == [(message.run_id, 2)]
