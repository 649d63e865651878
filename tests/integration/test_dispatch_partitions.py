"""Partitioned dispatch against the real database: each partition claims its own share of
an owner's schedules by their stable dispatch slot, the claim stays an index range whose
cost does not grow with the table, and dispatchers of different partition counts running
at once (a change of K while passes run) still give every occurrence exactly one run."""

from __future__ import annotations

import collections
import json
import threading
import uuid
from datetime import timedelta

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import (
    DISPATCH_SLOTS,
    SQL,
    WHOLE_OWNER,
    Partition,
    claim_batch,
    dispatch,
    dispatch_slot,
)

OWNER = "accounting"
EVERY_MINUTE = {"cron": "* * * * *", "timezone": "UTC"}


@pytest.fixture
def fresh(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers CASCADE")
    return conn


def make(conn, now, rule=EVERY_MINUTE):
    return service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="batch.roll",
                                   recurrence=rule, actor="tester", now=now)


def bulk(conn, *, count: int, next_due_at, owner: str = OWNER) -> None:
    """``count`` active every-minute schedules first due at ``next_due_at``, in one statement."""
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), gen_random_uuid(), %(owner)s, 'batch.roll', %(rule)s::jsonb, 'UTC', 'active',
               %(due)s, %(due)s, %(due)s
          FROM generate_series(1, %(count)s)""",
                 {"owner": owner, "rule": json.dumps(EVERY_MINUTE), "due": next_due_at, "count": count})


def test_the_slot_is_the_stable_hash_the_database_stores(fresh, utc):
    # Given schedules created through the service
    created = [make(fresh, utc(2027, 1, 4, 9, 30)) for _ in range(50)]
    # Then the database's slot of each is the documented hash, in range
    stored = {r["id"]: r["dispatch_slot"] for r in fresh.execute("SELECT id, dispatch_slot FROM schedules")}
    assert {s.id: dispatch_slot(s.id) for s in created} == stored
    assert all(0 <= slot < DISPATCH_SLOTS for slot in stored.values())
    # And a known id hashes to a known slot (md5("00000000-0000-0000-0000-000000000001") starts c965)
    assert dispatch_slot(uuid.UUID(int=1)) == 0xC965 >> 1


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 16])
def test_the_partitions_of_any_count_cover_every_slot_once(count):
    parts = [Partition(i, count) for i in range(count)]
    assert parts[0].slot_from == 0 and parts[-1].slot_to == DISPATCH_SLOTS
    assert all(a.slot_to == b.slot_from for a, b in zip(parts, parts[1:], strict=False))
    assert [p.owner_wide for p in parts] == [True] + [False] * (count - 1)


def test_a_partition_outside_its_count_is_refused():
    for index, count in ((1, 1), (-1, 2), (0, 0), (0, DISPATCH_SLOTS + 1)):
        with pytest.raises(ValueError, match="partition"):
            Partition(index, count)


def test_each_partition_claims_only_its_own_schedules(fresh, utc):
    # Given 400 due schedules
    schedules = [make(fresh, utc(2027, 1, 4, 9, 30)) for _ in range(400)]
    now = utc(2027, 1, 4, 9, 31, 5)
    claimed: dict[int, set] = {}
    # When each of four partitions runs a pass
    for index in range(4):
        publisher = ListPublisher()
        dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=publisher, partition=Partition(index, 4))
        claimed[index] = {m.schedule_id for m in publisher.sent}
    # Then each claimed exactly the schedules its slot range owns, and together all of them
    for index, ids in claimed.items():
        assert ids == {s.id for s in schedules if Partition(index, 4).owns(s.id)}
        assert ids, "a partition of 400 random schedules claimed none"
    assert set().union(*claimed.values()) == {s.id for s in schedules}


def test_only_partition_zero_offers_released_runs_again(fresh, utc):
    # Given a run whose publish was refused (released for the next pass)
    schedule = make(fresh, utc(2027, 1, 4, 9, 30))
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 9, 31), publisher=ListPublisher(refuse_all=True))
    later = utc(2027, 1, 4, 9, 31, 40)
    fresh.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (later + timedelta(hours=1), schedule.id))
    # When the partitions but the first run a pass, nothing is offered again
    for index in range(1, 4):
        publisher = ListPublisher()
        report = dispatch(fresh, dispatch_settings(OWNER), now=later,
                          publisher=publisher, partition=Partition(index, 4))
        assert (report.reoffered, publisher.sent) == (0, [])
    # Then partition 0 offers it
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=later, publisher=publisher, partition=Partition(0, 4))
    assert report.reoffered == 1 and [m.schedule_id for m in publisher.sent] == [schedule.id]


def test_concurrent_dispatchers_of_one_and_four_partitions_run_each_occurrence_once(db_url, fresh, utc):
    # Given 1,200 every-minute schedules, all due from 10:00
    start = utc(2027, 1, 4, 10, 0)
    bulk(fresh, count=1200, next_due_at=start)
    ids = {r["id"] for r in fresh.execute("SELECT id FROM schedules")}
    minutes = 4
    # And five dispatchers on their own connections: one of K=1 (the whole owner, as before
    # a change of K) and the four partitions of K=4 (after it), all running every minute
    dispatchers = [WHOLE_OWNER] + [Partition(i, 4) for i in range(4)]
    publishers = [ListPublisher() for _ in dispatchers]
    claimed = [0] * len(dispatchers)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(dispatchers))

    def run(slot: int) -> None:
        c = connect(db_url)
        try:
            for minute in range(minutes):
                now = start + timedelta(minutes=minute, seconds=5)
                barrier.wait(timeout=60)  # every pass of a minute starts together
                # small claims, so the five passes interleave many transactions
                report = dispatch(c, dispatch_settings(OWNER, claim_limit=25), now=now, publisher=publishers[slot],
                                  partition=dispatchers[slot])
                claimed[slot] += report.claimed
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
            barrier.abort()
        finally:
            c.close()

    # When they run four minutes, barrier-started each minute
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(dispatchers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    # Then every occurrence of every schedule has exactly one run
    runs = collections.Counter((r["schedule_id"], r["occurrence_at"]) for r in fresh.execute(
        "SELECT schedule_id, occurrence_at FROM schedule_runs"))
    expected = {(i, start + timedelta(minutes=m)) for i in ids for m in range(minutes)}
    assert set(runs) == expected
    assert [key for key, n in runs.items() if n != 1] == []
    # And no schedule was claimed by two passes (the claim's row locks and its re-check of
    # next_due_at, not only the runs' unique key, keep them apart): one claim per run
    assert sum(claimed) == len(expected)
    # And each run was published once, by one dispatcher
    published = collections.Counter(m.run_id for p in publishers for m in p.sent)
    assert len(published) == len(expected) and max(published.values()) == 1
    # And the passes did share the work: both the K=1 dispatcher and the partitions claimed
    assert publishers[0].sent and sum(len(p.sent) for p in publishers[1:])
    # And nothing is left due
    assert fresh.execute("SELECT count(*) AS n FROM schedules WHERE next_due_at <= %s",
                         (start + timedelta(minutes=minutes - 1, seconds=5),)).fetchone()["n"] == 0


def claim_plan(conn, *, now, partition: Partition) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim statement inside a transaction rolled back
    (its row locks are released, nothing is claimed)."""
    conn.execute("BEGIN")
    try:
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + SQL["claim_due_schedules"],
            {"owner": OWNER, "now": now, "limit": 200, "slot_from": partition.slot_from,
             "slot_to": partition.slot_to}, prepare=False).fetchone()
    finally:
        conn.execute("ROLLBACK")
    [plan] = next(iter(row.values()))
    return plan


def _nodes(node: dict, *, skip_subplans: bool = False):
    yield node
    for child in node.get("Plans", []):
        if not (skip_subplans and child.get("Parent Relationship") == "SubPlan"):
            yield from _nodes(child, skip_subplans=skip_subplans)


def test_a_partitions_claim_is_an_index_range_whose_cost_does_not_grow_with_the_table(fresh, utc):
    # Given 2,000 due schedules and 10,000 that are not due yet
    now = utc(2027, 1, 4, 10, 0, 5)
    bulk(fresh, count=2000, next_due_at=utc(2027, 1, 4, 10, 0))
    bulk(fresh, count=10_000, next_due_at=utc(2027, 1, 5, 10, 0))
    fresh.execute("ANALYZE schedules")
    partition = Partition(2, 4)
    small = claim_plan(fresh, now=now, partition=partition)
    # When the table grows tenfold with schedules that are not due
    bulk(fresh, count=100_000, next_due_at=utc(2027, 1, 5, 10, 0))
    fresh.execute("ANALYZE schedules")
    large = claim_plan(fresh, now=now, partition=partition)
    for plan in (small, large):
        nodes = list(_nodes(plan["Plan"]))
        # Then the claim reads the claim index alone, in its order (no sort), with the slot
        # bounds tested on the index entries (an Index Cond, not a filter on table rows; the
        # partial index's own predicate stays a filter: a locking read rechecks it)
        # (the business-day rules' closures subquery is a subplan, run only for a
        # business-day rule: none here, so never)
        subplans = [n for n in nodes if n.get("Parent Relationship") == "SubPlan"]
        assert all(n["Actual Loops"] == 0 for n in subplans)
        nodes = list(_nodes(plan["Plan"], skip_subplans=True))
        [scan] = [n for n in nodes if n["Node Type"] in ("Index Scan", "Bitmap Index Scan", "Seq Scan",
                                                          "Index Only Scan")]
        assert scan["Node Type"] == "Index Scan" and scan["Index Name"] == "schedules_claim_idx"
        assert "dispatch_slot" in scan["Index Cond"] and "dispatch_slot" not in scan.get("Filter", "")
        assert not [n for n in nodes if n["Node Type"] == "Sort"]
        # And it returns a full batch of its own schedules
        assert scan["Actual Rows"] == 200
    # And the claim touches about the same pages at 112,000 schedules as at 12,000 (about
    # 400: a heap page per row and the index's; a deeper index, rows placed on other pages by
    # the bulk insert and what the server's own background work left in them add a few or a
    # few dozen, a read that grew with the table would add thousands): half as many again at most
    def buffers(plan):
        return plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
    assert buffers(large) <= buffers(small) * 1.5, (buffers(small), buffers(large))


def test_claim_batch_takes_the_partition_too(fresh, utc):
    # Given 100 due schedules
    schedules = [make(fresh, utc(2027, 1, 4, 9, 30)) for _ in range(100)]
    partition = Partition(1, 2)
    # When one claim transaction of partition 1 of 2 runs
    with fresh.transaction():
        messages, report = claim_batch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 9, 31), partition=partition)
    # Then it claimed the schedules of that half only
    assert {m.schedule_id for m in messages} == {s.id for s in schedules if partition.owns(s.id)}
    assert report.claimed == len(messages)
