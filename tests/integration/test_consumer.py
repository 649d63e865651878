"""Consumer semantics against the real database."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest

from tests.support import ListNotifier, ListPublisher, dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.observability import MetricsRecorder
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, RetryLater, process_run
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.notifications import flush_notifications
from timekeeper.schedules.settlement import settle_run
from timekeeper.schedules.work import Refused, Skipped, Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)
HOURLY = {"cron": "0 * * * *", "timezone": "UTC"}


class Kinds:
    """A registry of test work kinds whose behaviour each test sets."""

    def __init__(self, leased: bool = False) -> None:
        self.registry = WorkKindRegistry()
        self.calls: list[uuid.UUID] = []
        self.behaviour = "succeed"
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.registry.register(OWNER, "test.work", self.handle, leased=leased)

    def handle(self, ctx):
        """Idempotency: test kind; writes one marker row per call so effects can be counted."""
        self.calls.append(ctx.run_id)
        ctx.conn.execute("INSERT INTO test_effects (run_id) VALUES (%s)", (ctx.run_id,))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(60)
        if self.behaviour == "succeed":
            return Succeeded({"ok": True})
        if self.behaviour == "skip":
            return Skipped("nothing_to_do")
        if self.behaviour == "refuse":
            return Refused("not_allowed", "refused by the owner")
        if self.behaviour == "refuse_access":
            return Refused("source_access_lost", "owner lost access", pause_reason="source_access_lost")
        raise RuntimeError("boom")


@pytest.fixture
def world(conn):
    conn.execute("CREATE TABLE IF NOT EXISTS test_effects (run_id uuid NOT NULL)")
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, test_effects CASCADE")
    return conn


@pytest.fixture(params=["transactional", "leased"])
def kinds(request):
    """The test work kind, once as a transactional kind (the batch's shared transaction) and
    once as a leased kind (a transaction of its own): both paths must behave the same."""
    return Kinds(leased=request.param == "leased")


def due_run(conn, now, kind="test.work", rule=HOURLY, schedule=None):
    """Create (or reuse) a schedule and dispatch it at ``now``; return (schedule, message)."""
    if schedule is None:
        schedule = service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind=kind,
                                           recurrence=rule, actor="owner-1", now=now - timedelta(minutes=30))
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings(OWNER), now=now, publisher=publisher)
    (message,) = [m for m in publisher.sent if m.schedule_id == schedule.id]
    return schedule, message


def run_row(conn, run_id):
    return conn.execute("SELECT * FROM schedule_runs WHERE id = %s", (run_id,)).fetchone()


def schedule_row(conn, schedule_id):
    return conn.execute("SELECT * FROM schedules WHERE id = %s", (schedule_id,)).fetchone()


def effects(conn, run_id):
    return conn.execute("SELECT count(*) AS n FROM test_effects WHERE run_id = %s", (run_id,)).fetchone()["n"]


def test_success_settles_once_and_a_duplicate_does_nothing(world, kinds, utc):
    # Given a dispatched run
    now = utc(2027, 1, 4, 10, 0)
    _, message = due_run(world, now)
    metrics = MetricsRecorder()
    # When it is delivered twice
    first = process_run(world, message, receive_count=1, now=now, registry=kinds.registry, settings=SETTINGS,
                        metrics=metrics)
    second = process_run(world, message, receive_count=1, now=now, registry=kinds.registry, settings=SETTINGS)
    # Then it ran once and is recorded succeeded once
    assert (first.action, second.action) == ("settled", "ignored")
    run = run_row(world, message.run_id)
    assert (run["state"], run["outcome_code"], run["detail"], run["attempts"]) == ("succeeded", "succeeded",
                                                                                    {"ok": True}, 1)
    assert effects(world, message.run_id) == 1 and metrics.get("RunSucceeded") == 1


def test_an_absent_run_is_acknowledged_without_work(world, kinds, utc):
    _, message = due_run(world, utc(2027, 1, 4, 10, 0))
    ghost = message.model_copy(update={"run_id": uuid.uuid4()})
    result = process_run(world, ghost, receive_count=1, now=utc(2027, 1, 4, 10, 0), registry=kinds.registry,
                         settings=SETTINGS)
    assert result.action == "ignored" and kinds.calls == []


def test_a_duplicate_under_a_live_lease_is_not_executed_concurrently(db_url, world, kinds, utc):
    # Given a run whose handler is in progress on another consumer
    now = utc(2027, 1, 4, 10, 0)
    _, message = due_run(world, now)
    kinds.gate = threading.Event()
    outcome: dict = {}

    def first_consumer():
        c = connect(db_url)
        try:
            outcome["first"] = process_run(c, message, receive_count=1, now=now, registry=kinds.registry,
                                           settings=SETTINGS)
        finally:
            c.close()

    thread = threading.Thread(target=first_consumer)
    thread.start()
    assert kinds.entered.wait(60)
    # When a duplicate message arrives while the lease is live
    with pytest.raises(RetryLater):
        process_run(world, message, receive_count=1, now=now + timedelta(seconds=30), registry=kinds.registry,
                    settings=SETTINGS)
    kinds.gate.set()
    thread.join(60)
    # Then the handler ran once, and the run settled once
    assert kinds.calls == [message.run_id]
    assert outcome["first"].action == "settled"
    assert run_row(world, message.run_id)["state"] == "succeeded"


def test_an_expired_lease_is_taken_over_and_the_old_holder_is_fenced(db_url, world, kinds, utc):
    # Given a run started by a consumer that then stalls past its lease
    now = utc(2027, 1, 4, 10, 0)
    _, message = due_run(world, now)
    kinds.gate = threading.Event()
    outcome: dict = {}

    def stalled_consumer():
        c = connect(db_url)
        try:
            outcome["stalled"] = process_run(c, message, receive_count=1, now=now, registry=kinds.registry,
                                             settings=SETTINGS)
        finally:
            c.close()

    thread = threading.Thread(target=stalled_consumer)
    thread.start()
    assert kinds.entered.wait(60)
    # When the redelivery arrives after the lease expired, it takes the run over
    kinds_second = Kinds()
    later = now + SETTINGS.lease + timedelta(seconds=1)
    taken = process_run(world, message, receive_count=2, now=later, registry=kinds_second.registry,
                        settings=SETTINGS)
    kinds.gate.set()
    thread.join(60)
    # Then the second attempt settles the run and the stalled holder's settle is fenced off
    assert taken.action == "settled" and outcome["stalled"].action == "fenced"
    run = run_row(world, message.run_id)
    assert run["state"] == "succeeded" and run["attempts"] == 2
    # and only the winner's effects were committed
    assert effects(world, message.run_id) == 1


def test_an_unknown_work_kind_settles_failed_without_retry(world, kinds, utc):
    _, message = due_run(world, utc(2027, 1, 4, 10, 0), kind="test.nobody")
    result = process_run(world, message, receive_count=1, now=utc(2027, 1, 4, 10, 0), registry=kinds.registry,
                         settings=SETTINGS)
    run = run_row(world, message.run_id)
    assert result.action == "settled"
    assert (run["state"], run["outcome_code"]) == ("failed", "unknown_work_kind")


def test_an_unexpected_exception_retries_and_settles_failed_on_the_final_receive(world, kinds, utc):
    # Given a work kind that always raises
    kinds.behaviour = "raise"
    now = utc(2027, 1, 4, 10, 0)
    _, message = due_run(world, now)
    # When it is received four times: each asks for redelivery and commits nothing of the handler
    for receive in range(1, 5):
        with pytest.raises(RetryLater):
            process_run(world, message, receive_count=receive, now=now + timedelta(minutes=receive),
                        registry=kinds.registry, settings=SETTINGS)
        run = run_row(world, message.run_id)
        assert run["state"] == "running" and "boom" in run["error"]
    assert effects(world, message.run_id) == 0
    # Then the fifth (final) receive records the failure and acknowledges
    result = process_run(world, message, receive_count=5, now=now + timedelta(minutes=5),
                         registry=kinds.registry, settings=SETTINGS)
    run = run_row(world, message.run_id)
    assert result.action == "settled"
    assert (run["state"], run["outcome_code"], run["attempts"]) == ("failed", "unexpected_error", 5)


def test_a_refusal_settles_failed_at_once(world, kinds, utc):
    kinds.behaviour = "refuse"
    _, message = due_run(world, utc(2027, 1, 4, 10, 0))
    process_run(world, message, receive_count=1, now=utc(2027, 1, 4, 10, 0), registry=kinds.registry,
                settings=SETTINGS)
    run = run_row(world, message.run_id)
    assert (run["state"], run["outcome_code"], run["error"]) == ("failed", "not_allowed", "refused by the owner")
    assert schedule_row(world, run["schedule_id"])["consecutive_failures"] == 1


def fail_hours(world, kinds, schedule, start, hours, behaviour="refuse"):
    kinds.behaviour = behaviour
    for h in range(hours):
        now = start + timedelta(hours=h)
        schedule, message = due_run(world, now, schedule=schedule)
        process_run(world, message, receive_count=1, now=now, registry=kinds.registry, settings=SETTINGS,
                    metrics=None)
    return schedule


def test_five_consecutive_failures_pause_and_a_success_in_between_resets(world, kinds, utc):
    # Given an hourly schedule that fails four times, succeeds once, then fails four times
    start = utc(2027, 1, 4, 10, 0)
    schedule = fail_hours(world, kinds, None, start, 4)
    assert schedule_row(world, schedule.id)["consecutive_failures"] == 4
    fail_hours(world, kinds, schedule, start + timedelta(hours=4), 1, behaviour="succeed")
    assert schedule_row(world, schedule.id)["consecutive_failures"] == 0
    fail_hours(world, kinds, schedule, start + timedelta(hours=5), 4)
    row = schedule_row(world, schedule.id)
    assert (row["status"], row["consecutive_failures"]) == ("active", 4)
    # When the fifth failure in a row is recorded
    metrics = MetricsRecorder()
    kinds.behaviour = "refuse"
    now = start + timedelta(hours=9)
    _, message = due_run(world, now, schedule=schedule)
    process_run(world, message, receive_count=1, now=now, registry=kinds.registry, settings=SETTINGS,
                metrics=metrics)
    # Then the schedule is paused with the reason, an event, a metric and a notice
    row = schedule_row(world, schedule.id)
    assert (row["status"], row["pause_reason"], row["next_due_at"]) == ("paused", "consecutive_failures", None)
    assert metrics.get("ScheduleAutoPaused") == 1
    paused = world.execute("SELECT * FROM schedule_events WHERE schedule_id = %s AND kind = 'paused'",
                           (schedule.id,)).fetchall()
    assert len(paused) == 1 and paused[0]["reason"] == "consecutive_failures"
    notifier = ListNotifier()
    notifier.failing = True
    assert flush_notifications(world, owner=OWNER, notifier=notifier, now=now) == 0
    notifier.failing = False
    assert flush_notifications(world, owner=OWNER, notifier=notifier, now=now) == 1
    assert notifier.notices[0]["payload"]["reason"] == "consecutive_failures"
    assert flush_notifications(world, owner=OWNER, notifier=notifier, now=now) == 0


def test_manual_failures_neither_count_nor_pause_and_manual_success_resets(world, kinds, utc):
    # Given a schedule with four scheduled failures in a row
    start = utc(2027, 1, 4, 10, 0)
    schedule = fail_hours(world, kinds, None, start, 4)
    now = start + timedelta(hours=3, minutes=30)
    # When "Run now" fails twice
    for i in range(2):
        publisher = ListPublisher()
        run_id, _ = service.run_now(world, workspace_id=schedule.workspace_id, schedule_id=schedule.id,
                                    actor="clicker", now=now + timedelta(minutes=i), publisher=publisher)
        process_run(world, publisher.sent[0], receive_count=1, now=now, registry=kinds.registry, settings=SETTINGS)
        assert run_row(world, run_id)["state"] == "failed"
    # Then the streak is unchanged and the schedule still active
    row = schedule_row(world, schedule.id)
    assert (row["status"], row["consecutive_failures"]) == ("active", 4)
    # And a manual success resets the streak
    kinds.behaviour = "succeed"
    publisher = ListPublisher()
    service.run_now(world, workspace_id=schedule.workspace_id, schedule_id=schedule.id, actor="clicker",
                    now=now, publisher=publisher)
    process_run(world, publisher.sent[0], receive_count=1, now=now, registry=kinds.registry, settings=SETTINGS)
    assert schedule_row(world, schedule.id)["consecutive_failures"] == 0


def test_an_automatic_refusal_with_a_pause_reason_pauses_at_once(world, kinds, utc):
    kinds.behaviour = "refuse_access"
    schedule = fail_hours(world, kinds, None, utc(2027, 1, 4, 10, 0), 1, behaviour="refuse_access")
    row = schedule_row(world, schedule.id)
    assert (row["status"], row["pause_reason"]) == ("paused", "source_access_lost")


def test_resume_does_not_flood_the_backlog(world, kinds, utc):
    # Given a schedule paused by five failures at 14:00
    start = utc(2027, 1, 4, 10, 0)
    schedule = fail_hours(world, kinds, None, start, 5)
    assert schedule_row(world, schedule.id)["status"] == "paused"
    # When the owner resumes it two days later at 09:10
    resumed_at = utc(2027, 1, 6, 9, 10)
    row = service.resume_schedule(world, workspace_id=schedule.workspace_id, schedule_id=schedule.id,
                                  actor="owner-1", now=resumed_at)
    # Then the streak resets and the next due instant is the next occurrence after now
    assert (row.status, row.consecutive_failures, row.next_due_at) == ("active", 0, utc(2027, 1, 6, 10))
    publisher = ListPublisher()
    report = dispatch(world, dispatch_settings(OWNER), now=resumed_at + timedelta(minutes=1), publisher=publisher)
    assert report.claimed == 0 and publisher.sent == []
    dispatch(world, dispatch_settings(OWNER), now=utc(2027, 1, 6, 10, 0), publisher=publisher)
    run = world.execute("SELECT skipped_backlog FROM schedule_runs WHERE id = %s",
                        (publisher.sent[0].run_id,)).fetchone()
    assert run["skipped_backlog"] == 0


def test_concurrent_settlements_of_one_schedule_never_lose_a_failure(db_url, world, kinds, utc):
    # Given two unfinished scheduled runs of one schedule
    start = utc(2027, 1, 4, 10, 0)
    schedule, first = due_run(world, start)
    dispatch(world, dispatch_settings(OWNER), now=start + timedelta(minutes=5, hours=1), publisher=ListPublisher())
    second = world.execute("SELECT id AS run_id FROM schedule_runs WHERE schedule_id = %s AND id <> %s",
                           (schedule.id, first.run_id)).fetchone()
    other = connect(db_url)
    done = threading.Event()
    # When both settle failed at the same time (the second waits on the first's lock)
    try:
        with world.transaction():
            settle_run(world, run_id=first.run_id, state="failed", outcome_code="x", now=start, failure_threshold=5)

            def settle_second():
                with other.transaction():
                    settle_run(other, run_id=second["run_id"], state="failed", outcome_code="x", now=start,
                               failure_threshold=5)
                done.set()

            thread = threading.Thread(target=settle_second)
            thread.start()
            assert not done.wait(0.5)  # blocked behind the first settlement's row lock
        thread.join(60)
    finally:
        other.close()
    # Then the streak counts both
    assert done.is_set()
    assert schedule_row(world, schedule.id)["consecutive_failures"] == 2


def _schedule_updates(conn, *, at_least: int = 0) -> tuple[int, int]:
    """(updates, heap-only updates) of ``schedules`` so far, as the statistics report them,
    waiting (up to 40 s) for the updates to reach ``at_least``: a backend flushes its
    counters as it goes idle, at most once a second, else within ten (behind a pooler the
    updating backend may not be this connection's), and a busy machine runs it late."""
    deadline = time.monotonic() + 40
    while True:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'schedules'"
                           ).fetchone()
        if row["n_tup_upd"] >= at_least or time.monotonic() > deadline:
            return row["n_tup_upd"], row["n_tup_hot_upd"]
        time.sleep(0.2)


def test_a_healthy_schedules_settlement_is_a_heap_only_update(world, kinds, utc):
    """A successful run of a schedule with no failure streak writes the schedule's
    last_run_at, last_outcome and updated_at: no index of schedules may cover those columns
    (nor the claim's), or every settlement inserts a new entry into every index of the
    table, the claim index included (an index of updated_at for the operations overview
    once did, at a quarter of the consumer's server CPU per run)."""
    now = utc(2027, 1, 4, 10, 0)
    schedule, message = due_run(world, now)
    world.commit()
    before = _schedule_updates(world)
    # (a minute after the dispatch, whose advance wrote updated_at = now)
    process_run(world, message, receive_count=1, now=now + timedelta(minutes=1), registry=kinds.registry,
                settings=SETTINGS)
    after = _schedule_updates(world, at_least=before[0] + 1)
    assert schedule_row(world, schedule.id)["last_outcome"] is not None
    updates, hot = after[0] - before[0], after[1] - before[1]
    assert updates >= 1 and hot == updates, (updates, hot)
