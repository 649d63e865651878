"""Runs whose handler kills the consumer (a Lambda timeout, an out-of-memory): every attempt
is counted durably, the run is settled ``attempts_exhausted`` once its attempts reach the
pipeline's limit, the failure counts in the streak, and the run is never offered forever."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, process_batch
from timekeeper.schedules.dispatcher import DispatchSettings, dispatch
from timekeeper.schedules.work import Refused, Succeeded, WorkKindRegistry
from timekeeper.topology import ACCOUNTING

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)
VISIBILITY = timedelta(minutes=12)
HOURLY = {"cron": "0 * * * *", "timezone": "UTC"}


class Killed(BaseException):
    """The process died inside the handler (nothing after this line of the consumer runs)."""


class Script:
    """Work kinds whose next outcome per run is scripted: ``S`` succeed, ``F`` refuse, ``K`` kill."""

    def __init__(self) -> None:
        self.registry = WorkKindRegistry()
        self.next = "S"
        self.calls = 0
        for name, leased in (("tx.work", False), ("leased.work", True)):
            self.registry.register(OWNER, name, self.handle, leased=leased)

    def handle(self, ctx):
        """Idempotency: writes nothing; the outcome is scripted."""
        self.calls += 1
        if self.next == "K":
            raise Killed()
        if self.next == "F":
            return Refused("scripted_failure", "failed as scripted")
        return Succeeded()


@pytest.fixture
def world(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    return conn


def schedule(conn, now, kind):
    return service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind=kind,
                                   recurrence=HOURLY, actor="owner", now=now - timedelta(minutes=30))


def deliver(conn, script, message, now, receive_count):
    """One SQS receive of ``message`` by a consumer whose process may be killed."""
    try:
        return process_batch(conn, [Delivery(f"m{receive_count}", message, receive_count)], now=now,
                             registry=script.registry, settings=SETTINGS)
    except Killed:
        return None


def killed_on_every_receive(conn, script, message, now):
    """The message is received maxReceiveCount times, the consumer killed each time; then
    SQS moves it to the dead-letter queue. Returns the instant after the last receive."""
    script.next = "K"
    for receive in range(1, SETTINGS.max_receive_count + 1):
        assert deliver(conn, script, message, now, receive) is None
        now += VISIBILITY
    return now


@pytest.mark.parametrize("kind", ["tx.work", "leased.work"])
def test_a_run_that_kills_its_consumer_on_every_receive_settles_attempts_exhausted(world, utc, kind):
    # Given a due run whose handler kills the consumer on every receive
    script = Script()
    now = utc(2027, 1, 4, 10, 0)
    owner_schedule = schedule(world, now, kind)
    publisher = ListPublisher()
    dispatch(world, dispatch_settings(OWNER), now=now, publisher=publisher)
    (message,) = publisher.sent
    later = killed_on_every_receive(world, script, message, now)
    # Then every attempt was counted although none committed an outcome
    run = world.execute("SELECT * FROM schedule_runs WHERE id = %s", (message.run_id,)).fetchone()
    assert (run["state"], run["attempts"]) == ("running", SETTINGS.max_receive_count)
    # When the dispatcher finds the abandoned run (its message is in the dead-letter queue)
    again = ListPublisher()
    report = dispatch(world, dispatch_settings(OWNER), now=later, publisher=again)
    # Then it is settled failed, not offered again, and the failure counts in the streak
    run = world.execute("SELECT * FROM schedule_runs WHERE id = %s", (message.run_id,)).fetchone()
    assert (run["state"], run["outcome_code"]) == ("failed", "attempts_exhausted")
    assert message.run_id not in {m.run_id for m in again.sent} and report.exhausted == 1
    streak = world.execute("SELECT consecutive_failures FROM schedules WHERE id = %s",
                           (owner_schedule.id,)).fetchone()["consecutive_failures"]
    assert streak == 1
    # And a late duplicate of its message changes nothing
    script.next = "S"
    calls = script.calls
    (result,) = deliver(world, script, message, later, 1)
    assert result.action == "ignored" and script.calls == calls


def test_a_receive_past_the_attempt_limit_settles_without_running_the_handler(world, utc):
    # Given a run whose attempts already reached the limit (every one killed)
    script = Script()
    now = utc(2027, 1, 4, 10, 0)
    schedule(world, now, "tx.work")
    publisher = ListPublisher()
    dispatch(world, dispatch_settings(OWNER), now=now, publisher=publisher)
    (message,) = publisher.sent
    later = killed_on_every_receive(world, script, message, now)
    calls = script.calls
    # When one more copy of its message arrives (a re-offer, or a duplicate delivery)
    script.next = "S"
    (result,) = deliver(world, script, message, later, 1)
    # Then it settles failed attempts_exhausted and the handler is not called again
    assert result.action == "settled" and result.settlement.outcome_code == "attempts_exhausted"
    assert script.calls == calls


def test_kills_count_in_the_failure_streak_and_pause_the_schedule(world, utc):
    # Given an hourly schedule whose occurrences fail, succeed, and kill the consumer:
    # F F F S F F K F F (the kill is the seventh occurrence)
    script = Script()
    now = utc(2027, 1, 4, 10, 0)
    owner_schedule = schedule(world, now, "tx.work")
    for outcome in "FFFSFFKFF":
        publisher = ListPublisher()
        dispatch(world, dispatch_settings(OWNER), now=now, publisher=publisher)
        fresh = [m for m in publisher.sent if m.schedule_id == owner_schedule.id]
        message = next(m for m in fresh if world.execute(
            "SELECT state FROM schedule_runs WHERE id = %s", (m.run_id,)).fetchone()["state"] == "queued")
        if outcome == "K":
            killed_on_every_receive(world, script, message, now)
        else:
            script.next = outcome
            deliver(world, script, message, now, 1)
        now += timedelta(hours=1)
    # When the next pass runs
    dispatch(world, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
    # Then the killed run counted as a failure: five in a row since the success paused the schedule
    row = world.execute("SELECT status, pause_reason, consecutive_failures FROM schedules WHERE id = %s",
                        (owner_schedule.id,)).fetchone()
    assert (row["status"], row["pause_reason"], row["consecutive_failures"]) == (
        "paused", "consecutive_failures", 5)
    outcomes = [r["outcome_code"] for r in world.execute(
        "SELECT outcome_code FROM schedule_runs WHERE schedule_id = %s ORDER BY occurrence_at",
        (owner_schedule.id,)).fetchall()]
    assert outcomes.count("attempts_exhausted") == 1


def test_a_killed_batch_does_not_take_its_batch_mates_attempts_on_redelivery(world, utc):
    # Given a batch of four runs, one of which kills the consumer
    script = Script()
    now = utc(2027, 1, 4, 10, 0)
    for _ in range(4):
        schedule(world, now, "tx.work")
    publisher = ListPublisher()
    dispatch(world, dispatch_settings(OWNER), now=now, publisher=publisher)
    killer = publisher.sent[0].run_id

    def handle(ctx):
        """Idempotency: writes nothing."""
        if ctx.run_id == killer:
            raise Killed()
        return Succeeded()

    script.registry = WorkKindRegistry()
    script.registry.register(OWNER, "tx.work", handle)
    batch = [Delivery(f"m{i}", m, 1) for i, m in enumerate(publisher.sent)]
    with pytest.raises(Killed):
        process_batch(world, batch, now=now, registry=script.registry, settings=SETTINGS)
    # When the whole batch is redelivered together after the visibility timeout, the killer first
    later = now + VISIBILITY
    redelivered = [Delivery(d.key, d.message, 2) for d in batch]
    innocents = [d for d in redelivered if d.message.run_id != killer]
    killer_delivery = next(d for d in redelivered if d.message.run_id == killer)
    with pytest.raises(Killed):
        process_batch(world, [killer_delivery, *innocents], now=later, registry=script.registry,
                      settings=SETTINGS)
    # Then the runs of the killed batch start one by one: the killer's second attempt is
    # counted, its batch-mates were not started, so the kill did not take their attempts
    rows = {r["id"]: (r["state"], r["attempts"]) for r in world.execute(
        "SELECT id, state, attempts FROM schedule_runs").fetchall()}
    assert rows.pop(killer) == ("running", 2)
    assert set(rows.values()) == {("running", 1)}
    # And their next delivery completes them on their second attempt
    results = process_batch(world, [Delivery(d.key, d.message, 3) for d in innocents], now=later + VISIBILITY,
                            registry=script.registry, settings=SETTINGS)
    assert {r.action for r in results} == {"settled"}
    states = {(r["state"], r["attempts"]) for r in world.execute(
        "SELECT state, attempts FROM schedule_runs WHERE id <> %s", (killer,)).fetchall()}
    assert states == {("succeeded", 2)}


def test_an_attempts_exhausted_settlement_by_the_dispatcher_pauses_at_the_pipelines_threshold(world, utc):
    # Given a pipeline whose schedules pause at their first failure in a row
    pipeline = dataclasses.replace(ACCOUNTING, failure_pause_threshold=1)
    script = Script()
    now = utc(2027, 1, 4, 10, 0)
    owner_schedule = schedule(world, now, "tx.work")
    publisher = ListPublisher()
    dispatch(world, DispatchSettings.of(pipeline), now=now, publisher=publisher)
    (message,) = publisher.sent
    # And a run whose handler killed its consumer on every receive
    later = killed_on_every_receive(world, script, message, now)
    # When that pipeline's dispatcher settles the abandoned run
    report = dispatch(world, DispatchSettings.of(pipeline), now=later, publisher=ListPublisher())
    # Then the settlement counts against the pipeline's threshold: the schedule is paused
    run = world.execute("SELECT * FROM schedule_runs WHERE id = %s", (message.run_id,)).fetchone()
    assert (run["state"], run["outcome_code"]) == ("failed", "attempts_exhausted")
    assert (report.exhausted, report.paused_exhausted) == (1, 1)
    row = world.execute("SELECT status, consecutive_failures FROM schedules WHERE id = %s",
                        (owner_schedule.id,)).fetchone()
    assert (row["status"], row["consecutive_failures"]) == ("paused", 1)
