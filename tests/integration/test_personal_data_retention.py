"""Personal-data retention: recipients' addresses in delivery rows last written before the
personal-data retention are erased by the queries owner's history-retention pass (the
path the dispatcher's partition 0 takes), in bounded batches; the rows stay with their
outcomes, so counts and the delivery history read the same. A row of a run in flight, or
of a run another transaction holds, is never touched (the latter not waited for)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.integration.test_history_retention import NOW, RECENT, add_run, make_schedule, retention_pass, set_schedule
from timekeeper.db.connection import connect
from timekeeper.reporting import delivery_store
from timekeeper.topology import HISTORY, HistoryRetention

#: Runs kept 90 days, addresses 35 (the defaults' shape), small batches.
RETENTION = HistoryRetention(runs_days=90, events_days=90, personal_data_days=35, batch_rows=2,
                             max_batches_per_pass=20)
#: Past the personal-data retention, within the runs' retention: the run and its rows stay.
AGED = NOW - timedelta(days=40)


@pytest.fixture
def world(conn):
    conn.execute("""TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, query_deliveries,
                    query_delivery_sources, query_delivery_attempts, query_delivery_outbox, workspaces CASCADE""")
    return conn


def add_recipients(conn, schedule, run_id: uuid.UUID, at) -> None:
    """Three recipients' outcomes of a run written at ``at``: sent, failed (both with an
    address) and skipped (none)."""
    for user, status, address, extra in (("u1", "sent", "one@example.com", "m-1"),
                                         ("u2", "failed", "two@example.com", None),
                                         ("u3", "skipped", None, None)):
        conn.execute("""INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, skip_reason,
                                                      address, provider_message_id, error_code, attempt, updated_at)
                        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1, %s)""",
                     (run_id, user, schedule.workspace_id, schedule.id, status,
                      "no_address" if status == "skipped" else None, address,
                      f"{extra}-{run_id}" if extra else None, "rejected" if status == "failed" else None, at))


def rows(conn, run_id: uuid.UUID) -> list[dict]:
    return conn.execute("""SELECT user_id, status, skip_reason, error_code, provider_message_id, attempt, updated_at,
                                  address, address_erased_at
                             FROM query_deliveries WHERE run_id = %s ORDER BY user_id""", (run_id,)).fetchall()


def test_the_default_is_the_delivered_files_expiry():
    assert HISTORY.personal_data_days == 35


def test_addresses_past_retention_are_erased_and_the_rows_and_counts_stay(world):
    """Given three finished delivery runs, two written 40 days ago and one 10 days ago,
    with the personal-data retention at 35 days: the old runs' addresses are erased
    (address_erased_at the pass's instant), every other column and the per-status counts
    are unchanged, the delivery history reads the same rows, and the recent run keeps its
    addresses. The runs themselves stay (their own retention is 90 days)."""
    schedule = make_schedule(world, owner="queries", kind="queries.deliver")
    old = [add_run(world, schedule, AGED + timedelta(hours=i)) for i in range(2)]
    recent = add_run(world, schedule, RECENT)
    set_schedule(world, schedule, last_run_id=recent)
    for run_id in old:
        add_recipients(world, schedule, run_id, AGED)
    add_recipients(world, schedule, recent, RECENT)
    before = {run_id: rows(world, run_id) for run_id in old + [recent]}
    counts = "SELECT status, count(*) AS n FROM query_deliveries GROUP BY status ORDER BY status"
    counts_before = world.execute(counts).fetchall()

    summary = retention_pass(world, retention=RETENTION, owner="queries")

    assert summary["addresses_erased"] == 4 and summary["batches"] >= 2
    assert summary.get("runs", 0) == 0 and summary.get("delivery_rows", 0) == 0
    assert world.execute(counts).fetchall() == counts_before
    for run_id in old:
        after = rows(world, run_id)
        assert [r["address"] for r in after] == [None, None, None]
        assert [r["address_erased_at"] for r in after] == [NOW, NOW, None], "a skipped row never had an address"
        keep = lambda r: {k: v for k, v in r.items() if k not in ("address", "address_erased_at")}  # noqa: E731
        assert [keep(r) for r in after] == [keep(r) for r in before[run_id]]
        listed = delivery_store.list_deliveries(world, workspace_id=schedule.workspace_id, run_id=run_id)
        assert [(d.user_id, d.status) for d in listed] == [("u1", "sent"), ("u2", "failed"), ("u3", "skipped")]
    assert rows(world, recent) == before[recent]

    again = retention_pass(world, retention=RETENTION, owner="queries")
    assert again is None or not again.get("addresses_erased"), "erasing is done once"


def test_the_rows_of_a_run_in_flight_keep_their_addresses(world, db_url):
    """Given a run still running whose delivery rows were written 40 days ago (a long
    retry), and a finished run another connection holds (being settled): a pass erases
    neither, does not wait for the held one, and erases the held one's once released."""
    schedule = make_schedule(world, owner="queries", kind="queries.deliver")
    running = add_run(world, schedule, AGED, finished=False)
    held = add_run(world, schedule, AGED + timedelta(hours=1))
    latest = add_run(world, schedule, RECENT)
    set_schedule(world, schedule, last_run_id=latest)
    add_recipients(world, schedule, running, AGED)
    add_recipients(world, schedule, held, AGED)
    holder = connect(db_url)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT id FROM schedule_runs WHERE id = %s FOR UPDATE", (held,))
        world.execute("SET lock_timeout = '1s'")
        try:
            summary = retention_pass(world, retention=RETENTION, owner="queries")
        finally:
            world.execute("RESET lock_timeout")
        assert summary is None or not summary.get("addresses_erased")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert [r["address"] for r in rows(world, running)] == ["one@example.com", "two@example.com", None]
    assert [r["address"] for r in rows(world, held)] == ["one@example.com", "two@example.com", None]

    summary = retention_pass(world, retention=RETENTION, owner="queries")

    assert summary["addresses_erased"] == 2
    assert [r["address"] for r in rows(world, held)] == [None, None, None]
    assert [r["address"] for r in rows(world, running)] == ["one@example.com", "two@example.com", None]
