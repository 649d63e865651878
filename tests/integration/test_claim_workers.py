"""A dispatcher pass's two claim workers against the real database: after a full first
batch, the pass claims its batches on two connections at once (one on a thread of its
own); every due schedule still gets exactly one run, published once, and a worker that
dies stops the pass without losing an occurrence."""

from __future__ import annotations

import collections
import json
import threading
from datetime import timedelta

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper import faults
from timekeeper.db.connection import connect
from timekeeper.schedules.dispatcher import dispatch

OWNER = "accounting"
EVERY_MINUTE = {"cron": "* * * * *", "timezone": "UTC"}


@pytest.fixture
def fresh(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers CASCADE")
    return conn


@pytest.fixture
def second(db_url):
    """A second connection, opened on demand as the dispatcher's second worker asks; the
    list records each call (and is closed after the test)."""
    opened: list = []

    def open_second():
        opened.append(connect(db_url))
        return opened[-1]

    yield opened, open_second
    for c in opened:
        c.close()


class ThreadRecordingPublisher(ListPublisher):
    """Keeps each published message with the name of the thread that published it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: collections.Counter = collections.Counter()

    def publish(self, messages):
        self.threads[threading.current_thread().name] += len(messages)
        return super().publish(messages)


def bulk(conn, *, count: int, next_due_at) -> set:
    """``count`` active every-minute schedules first due at ``next_due_at``; their ids."""
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), gen_random_uuid(), %(owner)s, 'batch.roll', %(rule)s::jsonb, 'UTC', 'active',
               %(due)s, %(due)s, %(due)s
          FROM generate_series(1, %(count)s)""",
                 {"owner": OWNER, "rule": json.dumps(EVERY_MINUTE), "due": next_due_at, "count": count})
    return {r["id"] for r in conn.execute("SELECT id FROM schedules")}


def runs_per_schedule(conn) -> collections.Counter:
    return collections.Counter(r["schedule_id"] for r in conn.execute("SELECT schedule_id FROM schedule_runs"))


def test_two_workers_share_a_pass_and_run_each_due_schedule_once(fresh, second, utc):
    # Given 2,000 due schedules and a pass of batches of 50 with a second connection
    now = utc(2027, 1, 4, 10, 0, 5)
    ids = bulk(fresh, count=2000, next_due_at=now - timedelta(seconds=5))
    opened, open_second = second
    publisher = ThreadRecordingPublisher()
    # When the pass runs
    report = dispatch(fresh, dispatch_settings(OWNER, claim_limit=50), now=now, publisher=publisher, second=open_second)
    # Then every schedule has exactly one run, and each run was published once
    assert runs_per_schedule(fresh) == {i: 1 for i in ids}
    assert (report.claimed, report.runs_created, report.published) == (2000, 2000, 2000)
    assert len({m.run_id for m in publisher.sent}) == len(publisher.sent) == 2000
    # And both workers claimed and published batches: the pass's thread and the second worker's
    assert len(opened) == 1
    assert publisher.threads["timekeeper-claim-worker"] > 0 and publisher.threads[threading.current_thread().name] > 0
    # And the second connection is left idle, outside any transaction
    assert opened[0].info.transaction_status.name == "IDLE"
    # And nothing is left due
    assert fresh.execute("SELECT count(*) AS n FROM schedules WHERE next_due_at <= %s", (now,)).fetchone()["n"] == 0


def test_a_pass_whose_first_batch_is_not_full_opens_no_second_connection(fresh, second, utc):
    now = utc(2027, 1, 4, 10, 0, 5)
    ids = bulk(fresh, count=30, next_due_at=now - timedelta(seconds=5))
    opened, open_second = second
    report = dispatch(fresh, dispatch_settings(OWNER, claim_limit=50), now=now,
                      publisher=ListPublisher(), second=open_second)
    assert report.runs_created == 30 and runs_per_schedule(fresh) == {i: 1 for i in ids}
    assert opened == []


def test_a_worker_that_dies_stops_the_pass_and_the_next_pass_loses_no_occurrence(fresh, second, utc):
    # Given 2,000 due schedules, and the second worker's process dying after its second
    # claim committed, before its messages are sent
    now = utc(2027, 1, 4, 10, 0, 5)
    ids = bulk(fresh, count=2000, next_due_at=now - timedelta(seconds=5))
    opened, open_second = second
    commits = collections.Counter()

    def injector(point, _context):
        if point == "dispatcher.after_claim_commit" and threading.current_thread().name == "timekeeper-claim-worker":
            commits[point] += 1
            if commits[point] == 2:
                raise faults.InjectedCrash(point)

    first = ListPublisher()
    faults.install(injector)
    try:
        # When the pass runs, then it raises the worker's crash
        with pytest.raises(faults.InjectedCrash):
            dispatch(fresh, dispatch_settings(OWNER, claim_limit=50), now=now, publisher=first, second=open_second)
    finally:
        faults.install(None)
    # And it stopped early: schedules are still due, and the dead batch's runs were never sent
    runs = runs_per_schedule(fresh)
    assert 0 < len(runs) < 2000 and max(runs.values()) == 1
    assert len(first.sent) < len(runs)
    # And both connections are idle (every batch committed whole or rolled back)
    assert fresh.info.transaction_status.name == "IDLE" and opened[0].info.transaction_status.name == "IDLE"
    # When the next pass runs, after the re-offer delay of an unpublished run
    later = now + timedelta(minutes=16)
    again = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER, claim_limit=50), now=later, publisher=again, second=open_second)
    # Then every occurrence of 10:00 has exactly one run, and every one of them was published
    first_minute = collections.Counter(r["schedule_id"] for r in fresh.execute(
        "SELECT schedule_id FROM schedule_runs WHERE occurrence_at = %s", (now - timedelta(seconds=5),)))
    late = collections.Counter(r["schedule_id"] for r in fresh.execute(
        "SELECT schedule_id FROM schedule_runs WHERE occurrence_at > %s", (now,)))
    assert set(first_minute) | set(late) == ids
    assert max(first_minute.values()) == 1 and max(late.values()) == 1
    published = {m.run_id for m in first.sent} | {m.run_id for m in again.sent}
    unpublished = fresh.execute("SELECT count(*) AS n FROM schedule_runs WHERE NOT (id = ANY(%s))",
                                (list(published),)).fetchone()["n"]
    assert unpublished == 0
