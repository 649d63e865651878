"""Crash injection at every step boundary, plus duplicate delivery.

A process crash is modelled by raising :class:`Crash` (a BaseException, so nothing in the
product catches it): the open transaction rolls back as a dropped connection would, and
the message is neither deleted nor released. Steps: after the claim commit and before
publish (the publisher crashes), mid-handler (after the handler wrote its effect; the
handler and its settlement share one transaction, so this is also "before settle"), after
the settlement commit but before the acknowledgement (an after-commit callback crashes),
and duplicate deliveries. After recovery every due occurrence has exactly one terminal
run and each succeeded run's effect was committed exactly once. This world runs one
consumer at a time (its random draws stay reproducible), so its executions are recorded in
the same :class:`~tests.faults.executions.ExecutionLog` as the concurrent-consumer tests
(test_concurrent_consumers.py), where several consumer threads compete for duplicated
deliveries and the log's overlap check can fire.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from tests.faults.executions import ExecutionLog
from tests.support import dispatch_settings
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, process_batch, process_run
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.recurrence import next_occurrences
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)
VISIBILITY = timedelta(minutes=12)
REOFFER_AFTER = timedelta(minutes=15)


class Crash(BaseException):
    """The process died here."""


@dataclass
class Message:
    body: RunMessage
    visible_at: datetime
    receives: int = 0


@dataclass
class FakeQueue:
    """An SQS stand-in with visibility timeout, receive counts, a DLQ and duplicate sends."""

    rng: random.Random
    duplicate_rate: float
    messages: list[Message] = field(default_factory=list)
    dead: list[Message] = field(default_factory=list)
    crash_next_publish: bool = False

    def publish(self, batch: list[RunMessage]) -> set:
        if self.crash_next_publish:
            self.crash_next_publish = False
            raise Crash("after claim commit, before publish")
        for body in batch:
            self.messages.append(Message(body, visible_at=self.now))
            if self.rng.random() < self.duplicate_rate:
                self.messages.append(Message(body, visible_at=self.now))  # at-least-once
        return set()

    def receive(self, now: datetime) -> list[Message]:
        got = []
        for message in list(self.messages):
            if message.visible_at > now:
                continue
            if message.receives >= SETTINGS.max_receive_count:
                self.messages.remove(message)
                self.dead.append(message)
                continue
            message.receives += 1
            message.visible_at = now + VISIBILITY
            got.append(message)
        return got


class World:
    """A work kind that records effects and executions and crashes on cue."""

    def __init__(self, conn, rng: random.Random, crash_rate: float, leased: bool = True):
        self.conn = conn
        self.rng = rng
        self.crash_rate = crash_rate
        self.faults_until = datetime.max.replace(tzinfo=UTC)
        self.calls = 0
        self.log = ExecutionLog()
        self.crashes = {"publish": 0, "mid_handler": 0, "after_settle": 0}
        self.registry = WorkKindRegistry()
        self.registry.register(OWNER, "fault.work", self.handle, leased=leased)

    def handle(self, ctx):
        """Idempotency: the effect row commits with the settlement, so exactly once per run."""
        with self.log.executing(ctx.run_id):
            ctx.conn.execute("INSERT INTO fault_effects (run_id) VALUES (%s)", (ctx.run_id,))
            self.calls += 1
            # the first two executions crash for sure (one of each kind); then at random
            roll = {1: 0.0, 2: self.crash_rate}.get(self.calls, self.rng.random())
            if ctx.now > self.faults_until:
                roll = 1.0
            if roll < self.crash_rate:
                self.crashes["mid_handler"] += 1
                raise Crash("mid-handler, before settle")
            if roll < 2 * self.crash_rate:
                def crash_after_commit():
                    self.crashes["after_settle"] += 1
                    raise Crash("after settle commit, before acknowledgement")
                ctx.after_commit(crash_after_commit)
            return Succeeded({"attempt": ctx.attempt})



@pytest.mark.parametrize("leased", [True, False], ids=["leased", "batch-transaction"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_due_occurrence_ends_with_exactly_one_terminal_run(fault_db, utc, seed, leased):
    # Given 6 schedules (every 20 minutes) and a world that crashes and duplicates at random
    rng = random.Random(seed)
    conn = fault_db
    start = utc(2027, 3, 14, 4, 0)  # 23:00 in New York; the window crosses the 02:00 spring gap
    schedules = [service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="fault.work",
                                         recurrence={"cron": f"{m} * * * *", "timezone": "America/New_York"},
                                         actor="tester", now=start)
                 for m in (0, 20, 40, 5, 25, 45)]
    world = World(conn, rng, crash_rate=0.08, leased=leased)
    queue = FakeQueue(rng, duplicate_rate=0.15)
    end = start + timedelta(hours=6)
    world.faults_until = end
    # When the minute dispatcher and the consumer run for 6 hours, then drain for an hour
    minute = 0
    while True:
        now = start + timedelta(minutes=minute)
        if now > end + timedelta(hours=1):
            break
        queue.now = now
        if now <= end and (minute == 0 or rng.random() < 0.05):
            queue.crash_next_publish = True  # faults only in the window; the last hour recovers
        try:
            dispatch(conn, dispatch_settings(OWNER, reoffer_after=REOFFER_AFTER), now=now, publisher=queue)
        except Crash:
            world.crashes["publish"] += 1
        received = queue.receive(now)
        for start_at in range(0, len(received), 10):  # SQS batches of 10, the whole production path
            batch = received[start_at:start_at + 10]
            try:
                results = process_batch(conn, [Delivery(str(i), m.body, m.receives) for i, m in enumerate(batch)],
                                        now=now, registry=world.registry, settings=SETTINGS)
            except Crash:
                continue  # nothing acknowledged: visible again after the visibility timeout
            for message, result in zip(batch, results, strict=True):
                if not isinstance(result, Exception):
                    queue.messages.remove(message)  # acknowledged
        minute += 1
    # Then every occurrence due in the window has exactly one run, and it is terminal
    for s in schedules:
        due = [o.at for o in next_occurrences(s.recurrence, start, 50) if o.at <= end]
        runs = conn.execute("SELECT occurrence_at, state FROM schedule_runs WHERE schedule_id = %s "
                            "AND occurrence_at <= %s ORDER BY occurrence_at", (s.id, end)).fetchall()
        assert [r["occurrence_at"] for r in runs] == due
        assert all(r["state"] in ("succeeded", "failed") for r in runs), runs
    assert len(due) == 6  # 6 hours, one of them shortened by the spring gap
    # And each succeeded run's effect committed exactly once; nothing ran concurrently
    dupes = conn.execute("SELECT run_id FROM fault_effects GROUP BY run_id HAVING count(*) > 1").fetchall()
    assert dupes == []
    missing = conn.execute("""SELECT r.id FROM schedule_runs r LEFT JOIN fault_effects e ON e.run_id = r.id
                               WHERE r.state = 'succeeded' AND e.run_id IS NULL""").fetchall()
    assert missing == []
    assert world.log.overlapping() == {}
    # And the faults really happened
    assert world.crashes["mid_handler"] > 0 and world.crashes["after_settle"] > 0
    assert world.crashes["publish"] > 0


def test_a_run_abandoned_mid_handler_whose_message_was_dead_lettered_is_reoffered(fault_db, utc):
    # Given a run that started, crashed, and whose message is gone (e.g. dead-lettered)
    conn = fault_db
    start = utc(2027, 3, 14, 0, 0)
    schedule = service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="fault.work",
                                       recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="t", now=start)
    rng = random.Random(0)
    world = World(conn, rng, crash_rate=1.0)
    queue = FakeQueue(rng, duplicate_rate=0)
    queue.now = utc(2027, 3, 14, 1, 0)
    dispatch(conn, dispatch_settings(OWNER), now=queue.now, publisher=queue)
    (message,) = queue.receive(queue.now)
    with pytest.raises(Crash):
        process_run(conn, message.body, receive_count=1, now=queue.now, registry=world.registry, settings=SETTINGS)
    queue.messages.clear()
    # When the dispatcher passes after the lease and reoffer_after have elapsed
    later = queue.now + SETTINGS.lease + REOFFER_AFTER
    queue.now = later
    report = dispatch(conn, dispatch_settings(OWNER, reoffer_after=REOFFER_AFTER), now=later, publisher=queue)
    # Then the run is offered again and completes
    assert report.reoffered == 1
    world.crash_rate = 0
    (again,) = [m for m in queue.receive(later) if m.body.run_id == message.body.run_id]
    result = process_run(conn, again.body, receive_count=1, now=later, registry=world.registry, settings=SETTINGS)
    assert result.action == "settled"
    row = conn.execute("SELECT state, attempts FROM schedule_runs WHERE id = %s", (message.body.run_id,)).fetchone()
    assert (row["state"], row["attempts"]) == ("succeeded", 2)
    assert schedule.id == message.body.schedule_id
