"""The fair claim against the real database: a workspace with a flood of due schedules
cannot hold another's behind it, weights set the shares, one workspace alone still fills
the batch, and concurrent claims stay disjoint."""

from __future__ import annotations

import collections
import json
import threading
import uuid

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.schedules.dispatcher import DISPATCH_SLOTS, SQL, claim_batch, crowded, dispatch

OWNER = "accounting"
EVERY_MINUTE = {"cron": "* * * * *", "timezone": "UTC"}


@pytest.fixture
def fresh(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers CASCADE")
    return conn


def workspace(conn, *, weight: int | None = None) -> uuid.UUID:
    """A workspace row (its claim weight when given, else the default)."""
    wid = uuid.uuid4()
    conn.execute("INSERT INTO workspaces (id, name, timezone) VALUES (%s, 'w', 'UTC')", (wid,))
    if weight is not None:
        conn.execute("UPDATE workspaces SET claim_weight = %s WHERE id = %s", (weight, wid))
    return wid


def bulk(conn, wid: uuid.UUID, *, count: int, next_due_at) -> None:
    """``count`` active every-minute schedules of workspace ``wid`` due at ``next_due_at``."""
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), %(wid)s, %(owner)s, 'batch.roll', %(rule)s::jsonb, 'UTC', 'active',
               %(due)s, %(due)s, %(due)s
          FROM generate_series(1, %(count)s)""",
                 {"wid": wid, "owner": OWNER, "rule": json.dumps(EVERY_MINUTE), "due": next_due_at,
                  "count": count})


def one_batch(conn, now, limit: int = 200):
    with conn.transaction():
        messages, _ = claim_batch(conn, dispatch_settings(OWNER, claim_limit=limit), now=now)
    return messages


def test_a_quiet_workspace_is_in_the_first_batch_beside_a_flood(fresh, utc):
    # Given a workspace with 1,000 due schedules and a quiet one with 5 due half an hour later
    flood, quiet = workspace(fresh), workspace(fresh)
    bulk(fresh, flood, count=1000, next_due_at=utc(2027, 1, 4, 9, 0))
    bulk(fresh, quiet, count=5, next_due_at=utc(2027, 1, 4, 9, 30))
    # When one claim of 200 runs
    messages = one_batch(fresh, utc(2027, 1, 4, 9, 30, 5))
    # Then the quiet workspace's five are in it, published among the first (round robin),
    # and the flood fills the rest of the batch
    by_workspace = collections.Counter(m.workspace_id for m in messages)
    assert by_workspace == {quiet: 5, flood: 195}
    assert {m.workspace_id for m in messages[:10]} == {quiet, flood}
    assert max(i for i, m in enumerate(messages) if m.workspace_id == quiet) < 10
    # And each claimed schedule has exactly one run
    per_schedule = fresh.execute("SELECT count(*) AS n FROM schedule_runs GROUP BY schedule_id").fetchall()
    assert len(per_schedule) == 200 and all(r["n"] == 1 for r in per_schedule)


def test_weights_two_to_one_give_two_to_one_shares(fresh, utc):
    # Given two workspaces with more due than their share, weighted 2 and 1, the lighter
    # one's due first
    heavy, light = workspace(fresh, weight=2), workspace(fresh, weight=1)
    bulk(fresh, light, count=1000, next_due_at=utc(2027, 1, 4, 9, 0))
    bulk(fresh, heavy, count=1000, next_due_at=utc(2027, 1, 4, 9, 30))
    # When one claim of 300 runs
    messages = one_batch(fresh, utc(2027, 1, 4, 9, 30, 5), limit=300)
    # Then the heavy workspace gets two thirds of it, interleaved two to one
    assert collections.Counter(m.workspace_id for m in messages) == {heavy: 200, light: 100}
    assert collections.Counter(m.workspace_id for m in messages[:30]) == {heavy: 20, light: 10}


def test_one_workspace_alone_still_fills_the_batch(fresh, utc):
    # Given one workspace with 1,000 due schedules
    only = workspace(fresh)
    bulk(fresh, only, count=1000, next_due_at=utc(2027, 1, 4, 9, 0))
    # When a claim of 200 runs, then the batch is full of its schedules
    messages = one_batch(fresh, utc(2027, 1, 4, 9, 0, 5))
    assert len(messages) == 200 and {m.workspace_id for m in messages} == {only}


def test_a_crowded_batch_is_full_with_a_workspace_over_an_equal_share_among_one_more():
    a, b = uuid.uuid4(), uuid.uuid4()
    assert crowded([(1, a)] * 4, 4)  # one workspace alone: another may wait behind it
    assert not crowded([(1, a)] * 3 + [(1, b)], 5)  # not full: nothing else is due
    assert not crowded([(1, uuid.uuid4()) for _ in range(4)], 4)  # one each
    assert crowded([(1, a)] * 3 + [(1, b)], 4)
    assert not crowded([], 4)


def test_a_batch_of_a_few_rows_per_workspace_is_not_crowded():
    # Given a full batch of 200 spread over 191 workspaces, one holding 3 and another 8
    # (over an equal share among one more, 2, but not over a twentieth of the batch)
    many = [(1, uuid.uuid4()) for _ in range(189)]
    a, b = uuid.uuid4(), uuid.uuid4()
    # Then it is not crowded: the fair claim would move a waiting workspace by a few rows only
    assert not crowded(many + [(1, a)] * 3 + [(1, b)] * 8, 200)
    # And a workspace holding 11 of them makes it crowded
    assert crowded(many[:186] + [(1, a)] * 3 + [(1, b)] * 11, 200)


def test_two_concurrent_fair_claims_never_claim_an_occurrence_twice(db_url, fresh, utc):
    # Given a flood workspace and ten quiet ones, all due
    flood = workspace(fresh)
    quiet = [workspace(fresh) for _ in range(10)]
    bulk(fresh, flood, count=600, next_due_at=utc(2027, 1, 4, 9, 0))
    for wid in quiet:
        bulk(fresh, wid, count=3, next_due_at=utc(2027, 1, 4, 9, 30))
    now = utc(2027, 1, 4, 9, 30, 5)
    # When two claim transactions run at the same time on two connections
    results: list[list] = [[], []]
    barrier = threading.Barrier(2)

    def claim(slot: int) -> None:
        c = connect(db_url)
        try:
            with c.transaction():
                barrier.wait()
                messages, _ = claim_batch(c, dispatch_settings(OWNER), now=now)
                results[slot] = [m.schedule_id for m in messages]
                barrier.wait()  # both hold their locks before either commits
        finally:
            c.close()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then their claims are disjoint and each holds no duplicate
    assert set(results[0]).isdisjoint(results[1])
    assert all(len(r) == len(set(r)) for r in results) and all(results)
    # And after a pass takes the rest, every schedule has exactly one run
    dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
    per_schedule = fresh.execute("SELECT count(*) AS n FROM schedule_runs GROUP BY schedule_id").fetchall()
    assert len(per_schedule) == 630 and all(r["n"] == 1 for r in per_schedule)


def fair_claim_buffers(conn, now, limit: int) -> int:
    """Shared buffers the fair claim statement touches (EXPLAIN ANALYZE, rolled back)."""
    conn.execute("BEGIN")
    try:
        row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + SQL["claim_due_schedules_fairly"],
                           {"owner": OWNER, "now": now, "limit": limit, "slot_from": 0, "slot_to": DISPATCH_SLOTS,
                            "start": uuid.uuid4()}, prepare=False).fetchone()
    finally:
        conn.execute("ROLLBACK")
    [plan] = next(iter(row.values()))
    return plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]


def test_the_fair_claims_cost_does_not_grow_with_the_workspaces(fresh, utc):
    # Given a flood workspace and 200 workspaces whose schedules are not due
    now = utc(2027, 1, 4, 9, 0, 5)
    bulk(fresh, workspace(fresh), count=500, next_due_at=utc(2027, 1, 4, 9, 0))
    for _ in range(200):
        bulk(fresh, uuid.uuid4(), count=1, next_due_at=utc(2027, 1, 5, 9, 0))
    fresh.execute("ANALYZE schedules")
    small = fair_claim_buffers(fresh, now, limit=20)
    # When ten times as many workspaces hold schedules
    fresh.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), gen_random_uuid(), %(owner)s, 'batch.roll', %(rule)s::jsonb, 'UTC', 'active',
               %(due)s, %(due)s, %(due)s
          FROM generate_series(1, 1800)""",
                  {"owner": OWNER, "rule": json.dumps(EVERY_MINUTE), "due": utc(2027, 1, 5, 9, 0)})
    fresh.execute("ANALYZE schedules")
    large = fair_claim_buffers(fresh, now, limit=20)
    # Then the fair claim touches about as many pages (its walk stops at 2 x the batch's
    # workspaces), not ten times as many
    assert large <= small * 1.5 + 20, (small, large)
