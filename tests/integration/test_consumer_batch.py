"""The batch path of the consumer (one transaction per SQS batch)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from datetime import timedelta

import pytest

from tests.support import dispatch_settings, due_messages
from timekeeper.db.connection import connect
from timekeeper.schedules.consumer import (
    ConsumerSettings,
    Delivery,
    MisroutedMessage,
    ProcessResult,
    RetryLater,
    process_batch,
)
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)


class Crash(BaseException):
    """The process died here."""


class Kinds:
    def __init__(self) -> None:
        self.registry = WorkKindRegistry()
        self.calls: list[tuple[uuid.UUID, str]] = []
        self.fail: set[uuid.UUID] = set()
        self.crash_on: uuid.UUID | None = None
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.registry.register(OWNER, "batch.work", self.handle)
        self.registry.register(OWNER, "leased.work", self.handle, leased=True)

    def handle(self, ctx):
        """Idempotency: writes one effect row; it commits with the settlement."""
        tenant = ctx.conn.execute("SELECT current_setting('app.workspace_id', true) AS t").fetchone()["t"]
        self.calls.append((ctx.run_id, tenant))
        ctx.conn.execute("INSERT INTO batch_effects (run_id, workspace_id) VALUES (%s, %s)",
                         (ctx.run_id, ctx.workspace_id))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(60)
        if ctx.run_id == self.crash_on:
            raise Crash()
        if ctx.run_id in self.fail:
            raise RuntimeError("transient")
        return Succeeded({"ok": True})


@pytest.fixture
def world(conn):
    conn.execute("CREATE TABLE IF NOT EXISTS batch_effects (run_id uuid NOT NULL, workspace_id uuid NOT NULL)")
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, batch_effects CASCADE")
    return conn


def deliveries(conn, now, count, kind="batch.work"):
    return [Delivery(f"m{i}", m, 1) for i, m in enumerate(due_messages(conn, owner=OWNER, kind=kind, now=now,
                                                                        count=count))]


def effects(conn):
    return conn.execute("SELECT run_id, workspace_id FROM batch_effects").fetchall()


def states(conn):
    return {r["id"]: r["state"] for r in conn.execute("SELECT id, state FROM schedule_runs").fetchall()}


def test_a_batch_settles_every_run_each_in_its_own_tenant(world, utc):
    # Given five runs of five workspaces in one batch, one of them delivered twice
    kinds = Kinds()
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 5)
    batch.append(Delivery("dup", batch[0].message, 1))
    # When the batch is processed
    results = process_batch(world, batch, now=now, registry=kinds.registry, settings=SETTINGS)
    # Then each run ran once, in its own workspace, and settled; the duplicate was ignored
    assert [r.action for r in results] == ["settled"] * 5 + ["ignored"]
    assert sorted(str(d.message.workspace_id) for d in batch[:5]) == sorted(t for _, t in kinds.calls)
    assert set(states(world).values()) == {"succeeded"}
    assert len(effects(world)) == 5


def test_a_retryable_fault_fails_only_its_item_and_rolls_back_only_its_effects(world, utc):
    kinds = Kinds()
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 3)
    kinds.fail = {batch[1].message.run_id}
    results = process_batch(world, batch, now=now, registry=kinds.registry, settings=SETTINGS)
    assert isinstance(results[1], RetryLater)
    assert [results[0].action, results[2].action] == ["settled", "settled"]
    assert {e["run_id"] for e in effects(world)} == {batch[0].message.run_id, batch[2].message.run_id}
    row = world.execute("SELECT state, error, lease_until FROM schedule_runs WHERE id = %s",
                        (batch[1].message.run_id,)).fetchone()
    assert row["state"] == "running" and "transient" in row["error"] and row["lease_until"] == now


def test_a_crash_mid_batch_keeps_only_the_attempts_and_the_redelivery_completes_it(world, utc):
    kinds = Kinds()
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 4)
    kinds.crash_on = batch[2].message.run_id
    with pytest.raises(Crash):
        process_batch(world, batch, now=now, registry=kinds.registry, settings=SETTINGS)
    # Then no effect committed, but every started attempt did (it counts towards the limit)
    assert effects(world) == [] and set(states(world).values()) == {"running"}
    assert {r["attempts"] for r in world.execute("SELECT attempts FROM schedule_runs").fetchall()} == {1}
    kinds.crash_on = None
    redelivered = [Delivery(d.key, d.message, 2) for d in batch]
    results = process_batch(world, redelivered, now=now + timedelta(minutes=12), registry=kinds.registry,
                            settings=SETTINGS)
    assert {r.action for r in results} == {"settled"} and len(effects(world)) == 4


@contextlib.contextmanager
def _held_by_another_consumer(db_url, batch, now):
    """A consumer thread of its own connection processing ``batch``, held inside its first
    handler until the block ends; yields the dict that receives its results (``first``)."""
    kinds = Kinds()
    kinds.gate = threading.Event()
    outcome = {}

    def first_consumer():
        other = connect(db_url)
        try:
            outcome["first"] = process_batch(other, batch, now=now, registry=kinds.registry, settings=SETTINGS)
        finally:
            other.close()

    thread = threading.Thread(target=first_consumer)
    thread.start()
    try:
        assert kinds.entered.wait(60)
        yield outcome
    finally:
        kinds.gate.set()
        thread.join(60)


def test_a_run_held_by_another_consumers_open_batch_is_redelivered_not_run(db_url, world, utc):
    # Given a batch in progress on another consumer
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 2)
    with _held_by_another_consumer(db_url, batch, now) as outcome:
        # When duplicates of its messages arrive at this consumer
        second = process_batch(world, batch, now=now, registry=Kinds().registry, settings=SETTINGS)
    # Then they are not executed here but redelivered later; the first consumer settles both
    assert all(isinstance(r, RetryLater) for r in second)
    assert [r.action for r in outcome["first"]] == ["settled", "settled"]
    assert len(effects(world)) == 2


def test_a_run_held_elsewhere_on_its_messages_final_receive_is_acknowledged_not_dead_lettered(db_url, world, utc):
    # Given a batch in progress on another consumer
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 2)
    with _held_by_another_consumer(db_url, batch, now) as outcome:
        # When copies of its messages arrive here, one on its final receive, one earlier
        copies = [Delivery("copy-0", batch[0].message, SETTINGS.max_receive_count),
                  Delivery("copy-1", batch[1].message, SETTINGS.max_receive_count - 1)]
        second = process_batch(world, copies, now=now, registry=Kinds().registry, settings=SETTINGS)
    # Then the final one is acknowledged (failing it would only dead-letter a duplicate),
    # the earlier one comes back later, and the holder settles both runs
    assert isinstance(second[0], ProcessResult) and second[0].action == "ignored"
    assert isinstance(second[1], RetryLater)
    assert [r.action for r in outcome["first"]] == ["settled", "settled"]
    assert len(effects(world)) == 2


class OutsideKinds:
    """A work kind whose handler never uses the database (its effect is elsewhere); the
    handler of ``hold`` waits at ``gate`` once it started."""

    def __init__(self, hold: uuid.UUID | None = None) -> None:
        self.registry = WorkKindRegistry()
        self.registry.register(OWNER, "batch.work", self.handle)
        self.hold = hold
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[uuid.UUID] = []

    def handle(self, ctx):
        """Idempotency: records the call in memory only."""
        self.calls.append(ctx.run_id)
        if ctx.run_id == self.hold:
            self.entered.set()
            self.gate.wait(60)
        return Succeeded()


def test_a_batch_that_never_used_the_database_keeps_its_other_settlements_when_one_run_is_taken_over(
        db_url, world, utc):
    # Given a batch of three runs whose handlers never touch the database, the first one
    # stalling in its handler past its lease
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 3)
    stalled = OutsideKinds(hold=batch[0].message.run_id)
    outcome = {}

    def first_consumer():
        other = connect(db_url)
        try:
            outcome["first"] = process_batch(other, batch, now=now, registry=stalled.registry, settings=SETTINGS)
        finally:
            other.close()

    thread = threading.Thread(target=first_consumer)
    thread.start()
    try:
        assert stalled.entered.wait(60)
        # When the stalled run's redelivery takes it over after its lease expired and settles it
        later = now + SETTINGS.lease + timedelta(seconds=1)
        taken = process_batch(world, [Delivery("again", batch[0].message, 2)], now=later,
                              registry=OutsideKinds().registry, settings=SETTINGS)
    finally:
        stalled.gate.set()
        thread.join(60)
    # Then the stalled holder is fenced off that run only: with no effect to roll back, its
    # batch-mates' settlements stand (acknowledged, not redelivered to run again)
    assert taken[0].action == "settled"
    assert [r.action for r in outcome["first"]] == ["fenced", "settled", "settled"]
    assert set(states(world).values()) == {"succeeded"}
    attempts = {r["id"]: r["attempts"] for r in world.execute("SELECT id, attempts FROM schedule_runs").fetchall()}
    assert attempts == {batch[0].message.run_id: 2, batch[1].message.run_id: 1, batch[2].message.run_id: 1}


def test_leased_kinds_commit_their_start_first_and_misrouted_messages_fail(world, utc):
    kinds = Kinds()
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 2, kind="leased.work")
    stranger = Delivery("x", batch[0].message.model_copy(update={"owner": "queries"}), 1)
    results = process_batch(world, [*batch, stranger], now=now, registry=kinds.registry, settings=SETTINGS)
    assert [r.action for r in results[:2]] == ["settled", "settled"]
    assert isinstance(results[2], MisroutedMessage)


def test_outcome_metrics_are_counted_once_per_batch_and_work_kind(world, utc):
    from timekeeper.observability import MetricsRecorder

    kinds = Kinds()
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 4)
    metrics = MetricsRecorder()
    process_batch(world, batch, now=now, registry=kinds.registry, settings=SETTINGS, metrics=metrics)
    assert metrics.detailed == {("RunSucceeded", (("work_kind", "batch.work"),)): 4}
    assert metrics.calls == 1


def test_a_handler_s_log_lines_carry_its_run_and_no_later_line_does(world, utc):
    # Given two runs whose handler writes a log line, and the product's log handler writing to a buffer
    import io
    import json

    from timekeeper import observability as obs

    written = io.StringIO()
    previous = obs.logger.registered_handler.setStream(written)

    registry = WorkKindRegistry()

    def logging_handler(ctx):
        obs.logger.info("handler says hello")
        return Succeeded()

    registry.register(OWNER, "batch.work", logging_handler)
    now = utc(2027, 1, 4, 10, 0)
    batch = deliveries(world, now, 2)
    # When the batch is processed and a line is logged afterwards
    try:
        process_batch(world, batch, now=now, registry=registry, settings=SETTINGS)
        obs.logger.info("after the batch")
    finally:
        obs.logger.registered_handler.setStream(previous)
    # Then each handler's line names its own run, schedule and workspace, and the later one none
    lines = [json.loads(line) for line in written.getvalue().splitlines()]
    hello = [line for line in lines if line["message"] == "handler says hello"]
    assert sorted(line["run_id"] for line in hello) == sorted(str(d.message.run_id) for d in batch)
    for line in hello:
        message = next(d.message for d in batch if str(d.message.run_id) == line["run_id"])
        assert line["schedule_id"] == str(message.schedule_id)
        assert line["workspace_id"] == str(message.workspace_id)
    (after,) = [line for line in lines if line["message"] == "after the batch"]
    assert "run_id" not in after and "schedule_id" not in after


def test_two_runs_of_one_schedule_in_one_batch_leave_the_later_occurrence_as_its_last_run(world, utc):
    # Given one hourly schedule whose 10:00 and 11:00 runs reach the consumer in one batch
    from tests.support import ListPublisher
    from timekeeper.schedules.dispatcher import dispatch

    kinds = Kinds()
    first = deliveries(world, utc(2027, 1, 4, 10, 0), 1)
    publisher = ListPublisher()
    dispatch(world, dispatch_settings(OWNER), now=utc(2027, 1, 4, 11, 0), publisher=publisher)
    # (the 10:00 run, published an hour ago and never started, is offered again too)
    (second,) = [m for m in publisher.sent if m.run_id != first[0].message.run_id]
    assert second.schedule_id == first[0].message.schedule_id
    # When the batch names the later run first
    batch = [Delivery("b", second, 1), first[0]]
    results = process_batch(world, batch, now=utc(2027, 1, 4, 11, 1), registry=kinds.registry, settings=SETTINGS)
    # Then both settled and the schedule's last run is the 11:00 one
    assert [r.action for r in results] == ["settled", "settled"]
    row = world.execute("SELECT last_run_id, last_outcome, consecutive_failures FROM schedules WHERE id = %s",
                        (second.schedule_id,)).fetchone()
    assert row["last_run_id"] == second.run_id
    assert row["consecutive_failures"] == 0
