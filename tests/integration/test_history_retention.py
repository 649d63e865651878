"""History retention: finished history past its retention is pruned, in bounded batches,
by each owner's maintenance task (the path the dispatcher's partition 0 takes), and what
the audits and the API read is kept: each schedule's latest run and latest run per
trigger, a failure streak's runs, a delivered run whose links are open, the pause holding
a schedule paused, the events of kept runs, exports within their retention, and every
snapshot version but the rows of failed runs. A run being settled, or one another
transaction holds, is never pruned (two connections)."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from timekeeper.db.connection import connect
from timekeeper.db.retention import prune_failed_snapshot_rows, prune_owner_history
from timekeeper.edge.registries import HISTORY_RETENTION_TASK, assemble_work_kinds
from timekeeper.schedules import service
from timekeeper.schedules.settlement import settle_run
from timekeeper.schedules.work import run_maintenance
from timekeeper.topology import HistoryRetention

NOW = datetime(2027, 9, 1, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=200)
RECENT = NOW - timedelta(days=10)
OWNER = "accounting"
#: Runs and events kept 90 days, exports 35: the defaults' shape, small batches.
RETENTION = HistoryRetention(runs_days=90, events_days=90, exports_days=35, batch_rows=50, max_batches_per_pass=20)


@pytest.fixture
def world(conn):
    conn.execute("""TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, query_deliveries,
                    query_delivery_sources, query_delivery_attempts, query_delivery_outbox, exports, saved_queries,
                    saved_query_versions, snapshot_runs, snapshot_ar_aging, snapshot_selftest_rows,
                    snapshot_membership_counts, workspaces CASCADE""")
    return conn


def make_schedule(conn, *, owner: str = OWNER, kind: str = "reconciliation.sweep"):
    return service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=owner, work_kind=kind,
                                   recurrence={"cron": "0 3 * * *", "timezone": "UTC"}, actor="owner",
                                   now=OLD - timedelta(days=30))


def add_run(conn, schedule, at: datetime, *, state: str = "succeeded", trigger: str = "scheduled",
            finished: bool = True) -> uuid.UUID:
    """A run of ``schedule`` queued at ``at`` and (``finished``) settled ``state`` a minute later."""
    run_id = uuid.uuid4()
    key = at.isoformat() if trigger == "scheduled" else f"manual:{run_id}"
    conn.execute("""
        INSERT INTO schedule_runs (id, schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                                   occurrence_local, trigger, definition_version, state, queued_at, started_at,
                                   finished_at, outcome_code, attempts)
        VALUES (%(id)s, %(schedule)s, %(ws)s, %(owner)s, %(kind)s, %(key)s, %(at)s, %(local)s, %(trigger)s, 1,
                %(state)s, %(at)s, %(at)s, %(finished)s, %(outcome)s, 1)""",
                 {"id": run_id, "schedule": schedule.id, "ws": schedule.workspace_id, "owner": schedule.owner,
                  "kind": schedule.work_kind, "key": key, "at": at, "local": at.replace(tzinfo=None),
                  "trigger": trigger, "state": state if finished else "running",
                  "finished": at + timedelta(minutes=1) if finished else None,
                  "outcome": ("ok" if state != "failed" else "scripted_failure") if finished else None})
    conn.execute("""INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, at)
                    VALUES (%s, %s, %s, 'settled', 'consumer', %s)""",
                 (schedule.id, schedule.workspace_id, run_id, at + timedelta(minutes=1)))
    return run_id


def set_schedule(conn, schedule, **values) -> None:
    sets = ", ".join(f"{k} = %({k})s" for k in values)
    conn.execute(f"UPDATE schedules SET {sets} WHERE id = %(id)s", {**values, "id": schedule.id})


def existing(conn, ids) -> set[uuid.UUID]:
    return {r["id"] for r in conn.execute("SELECT id FROM schedule_runs WHERE id = ANY(%s)", (list(ids),))}


def retention_pass(conn, now: datetime = NOW, retention: HistoryRetention = RETENTION, owner: str = OWNER):
    """One pass of the owner's maintenance as the dispatcher runs it; returns the retention summary."""
    return run_maintenance(conn, assemble_work_kinds(retention), owner, now)[HISTORY_RETENTION_TASK]


def old_runs(conn, schedule, n: int, start: datetime = OLD, **kw) -> list[uuid.UUID]:
    return [add_run(conn, schedule, start + timedelta(hours=i), **kw) for i in range(n)]


# ---------------------------------------------------------------------- what is pruned


def test_finished_runs_past_retention_are_pruned_with_their_events_and_recent_ones_stay(world):
    """Given a schedule with old and recent finished runs (the latest recent), when the
    owner's retention pass runs, then the old runs and their events are gone and the recent
    ones stay; another owner's old runs are not this owner's pass's."""
    schedule = make_schedule(world)
    old = old_runs(world, schedule, 5)
    recent = [add_run(world, schedule, RECENT + timedelta(hours=i)) for i in range(3)]
    set_schedule(world, schedule, last_run_id=recent[-1])
    other = make_schedule(world, owner="queries", kind="queries.deliver")
    theirs = old_runs(world, other, 3)

    summary = retention_pass(world)

    assert existing(world, old + recent + theirs) == set(recent) | set(theirs)
    # the runs' settled events and the schedule's own old "created" event
    assert summary["runs"] == 5 and summary["events"] == 6 and summary["pruned"] == 11
    left = world.execute("SELECT count(*) AS n FROM schedule_events WHERE run_id = ANY(%s)", (old,)).fetchone()["n"]
    assert left == 0


def test_a_pass_is_bounded_and_the_next_pass_goes_on(world):
    """Given 130 prunable runs and a bound of 2 batches of 50, when passes run, then the
    first prunes 100 runs (and says more remain), the second the rest."""
    schedule = make_schedule(world)
    runs = old_runs(world, schedule, 131)
    set_schedule(world, schedule, last_run_id=runs[-1])
    bounded = HistoryRetention(batch_rows=50, max_batches_per_pass=2)

    first = retention_pass(world, retention=bounded)
    assert first["runs"] == 100 and first["more"] is True
    second = retention_pass(world, retention=bounded)
    assert second["runs"] == 30 and existing(world, runs) == {runs[-1]}


def test_the_time_budget_stops_a_pass_before_its_next_batch(world):
    """Given a clock past the budget after the first batch, the pass runs one batch."""
    schedule = make_schedule(world)
    runs = old_runs(world, schedule, 30)
    set_schedule(world, schedule, last_run_id=runs[-1])
    ticks = iter([0.0, 0.0, 10.0, 10.0, 10.0])

    pruned = prune_owner_history(world, owner=OWNER, now=NOW, runs_retention=timedelta(days=90),
                                 events_retention=timedelta(days=90), batch_rows=10,
                                 max_batches=10, time_budget_s=5.0, clock=lambda: next(ticks))

    assert pruned.rows["runs"] == 10 and pruned.batches == 1 and pruned.more


# ---------------------------------------------------------------------- what is kept


def test_the_schedules_latest_settled_run_is_kept(world):
    """Given a schedule whose latest settled run is old and a later run still queued, the
    settled one (schedules.last_run_id, what the schedule page shows) is kept."""
    schedule = make_schedule(world)
    runs = old_runs(world, schedule, 3)
    waiting = add_run(world, schedule, OLD + timedelta(days=100), finished=False)
    set_schedule(world, schedule, last_run_id=runs[-1])

    retention_pass(world)

    assert existing(world, runs + [waiting]) == {runs[-1], waiting}


def test_the_latest_run_of_each_trigger_is_kept(world):
    """Given an old Run now and later scheduled runs, the Run now stays (the latest manual
    run), and so does the latest scheduled run."""
    schedule = make_schedule(world)
    manual = add_run(world, schedule, OLD, trigger="manual")
    scheduled = old_runs(world, schedule, 3, start=OLD + timedelta(days=1))
    newest = add_run(world, schedule, RECENT, trigger="manual")
    set_schedule(world, schedule, last_run_id=newest)

    retention_pass(world)

    assert existing(world, [manual, *scheduled, newest]) == {scheduled[-1], newest}


def test_a_paused_schedules_failure_streak_is_kept(world):
    """Given a schedule paused after two scheduled failures (its streak) that followed a
    success, all old, with a later Run now as the latest run: the streak's runs stay, the
    success before them is pruned."""
    schedule = make_schedule(world)
    earlier = old_runs(world, schedule, 2)
    streak = [add_run(world, schedule, OLD + timedelta(days=5 + i), state="failed") for i in range(2)]
    later_manual = add_run(world, schedule, RECENT, trigger="manual")
    set_schedule(world, schedule, status="paused", pause_reason="consecutive_failures", next_due_at=None,
                 consecutive_failures=2, last_run_id=later_manual)
    world.execute("""INSERT INTO schedule_events (schedule_id, workspace_id, kind, actor, reason, at)
                     VALUES (%s, %s, 'paused', 'consumer', 'consecutive_failures', %s)""",
                  (schedule.id, schedule.workspace_id, OLD + timedelta(days=6)))

    retention_pass(world)

    assert existing(world, earlier + streak + [later_manual]) == {*streak, later_manual}
    kinds = [r["kind"] for r in world.execute(
        "SELECT kind FROM schedule_events WHERE schedule_id = %s AND run_id IS NULL", (schedule.id,))]
    assert kinds == ["paused"], "the pause holding the schedule paused is kept"


def test_a_created_event_past_retention_is_pruned_but_a_kept_runs_events_stay(world):
    schedule = make_schedule(world)
    runs = old_runs(world, schedule, 2)
    set_schedule(world, schedule, last_run_id=runs[-1])

    retention_pass(world)

    events = world.execute("SELECT kind, run_id FROM schedule_events WHERE schedule_id = %s", (schedule.id,)).fetchall()
    assert events == [{"kind": "settled", "run_id": runs[-1]}]


def add_delivery(conn, schedule, run_id: uuid.UUID, *, link_expires_at: datetime) -> None:
    """The delivery rows of a run: its source, one recipient sent, its attempt and outbox row."""
    conn.execute("""INSERT INTO query_delivery_sources (run_id, workspace_id, schedule_id, source_kind, format,
                                                        object_key, byte_size, sha256, acted_for, created_at)
                    VALUES (%s, %s, %s, 'query', 'csv', 'deliveries/x.csv', 10, 'ab', 'u1', %s)""",
                 (run_id, schedule.workspace_id, schedule.id, OLD))
    conn.execute("""INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status,
                                                  provider_message_id, link_expires_at, attempt, updated_at)
                    VALUES (%s, 'u1', %s, %s, 'sent', 'm-1', %s, 1, %s)""",
                 (run_id, schedule.workspace_id, schedule.id, link_expires_at, OLD))
    conn.execute("""INSERT INTO query_delivery_attempts (run_id, user_id, attempt, workspace_id, status,
                                                         provider_message_id, at)
                    VALUES (%s, 'u1', 1, %s, 'sent', 'm-1', %s)""", (run_id, schedule.workspace_id, OLD))
    conn.execute("""INSERT INTO query_delivery_outbox (communication_key, run_id, user_id, workspace_id,
                                                       claimed_attempt, claimed_at, provider_message_id)
                    VALUES (%s, %s, 'u1', %s, 1, %s, 'm-1')""",
                 (f"{run_id}:u1", run_id, schedule.workspace_id, OLD))


def test_a_delivered_run_is_kept_while_its_link_is_open_and_pruned_with_its_rows_after(world):
    """Given two old delivery runs, one whose link is still open (a long link after a
    late retry) and one whose links expired: the first and its rows stay; the second goes
    with its source, recipient outcome, attempt and outbox rows."""
    schedule = make_schedule(world, owner="queries", kind="queries.deliver")
    open_run, expired_run, latest = old_runs(world, schedule, 3)
    add_delivery(world, schedule, open_run, link_expires_at=NOW + timedelta(hours=1))
    add_delivery(world, schedule, expired_run, link_expires_at=OLD + timedelta(days=7))
    set_schedule(world, schedule, last_run_id=latest)

    summary = retention_pass(world, owner="queries")

    assert existing(world, [open_run, expired_run, latest]) == {open_run, latest}
    assert summary["delivery_rows"] == 4
    for table in ("query_delivery_sources", "query_deliveries", "query_delivery_attempts", "query_delivery_outbox"):
        runs = {r["run_id"] for r in world.execute(f"SELECT run_id FROM {table}")}
        assert runs == {open_run}, table


def add_export(conn, workspace_id: uuid.UUID, query_id: uuid.UUID, finished_at: datetime | None) -> uuid.UUID:
    export_id = uuid.uuid4()
    conn.execute("""INSERT INTO exports (id, workspace_id, query_id, query_version, format, requested_by, state,
                                         object_key, row_count, byte_size, sha256, created_at, finished_at)
                    VALUES (%s, %s, %s, 1, 'csv', 'u1', %s, %s, %s, %s, %s, %s, %s)""",
                 (export_id, workspace_id, query_id, "succeeded" if finished_at else "queued",
                  "exports/x.csv" if finished_at else None, 1 if finished_at else None, 10 if finished_at else None,
                  "ab" if finished_at else None, (finished_at or NOW) - timedelta(minutes=1), finished_at))
    return export_id


def test_exports_are_kept_while_their_file_may_be_downloaded_and_pruned_after(world):
    """Given exports finished 40 and 20 days ago and one still queued from long ago, with
    the export retention at 35 days (beyond the files' 30-day expiry): only the 40-day-old
    one is pruned, by the queries owner's pass."""
    workspace_id, query_id = uuid.uuid4(), uuid.uuid4()
    world.execute("INSERT INTO workspaces (id, name, timezone, created_at) VALUES (%s, 'w', 'UTC', %s)",
                  (workspace_id, OLD))
    world.execute("""INSERT INTO saved_queries (id, workspace_id, name, current_version, created_by, created_at,
                                                updated_at) VALUES (%s, %s, 'q', 1, 'u1', %s, %s)""",
                  (query_id, workspace_id, OLD, OLD))
    world.execute("""INSERT INTO saved_query_versions (workspace_id, query_id, version, definition, created_by,
                                                       created_at) VALUES (%s, %s, 1, %s, 'u1', %s)""",
                  (workspace_id, query_id, json.dumps({"entity": "members", "columns": ["id"]}), OLD))
    add_export(world, workspace_id, query_id, NOW - timedelta(days=40))
    downloadable = add_export(world, workspace_id, query_id, NOW - timedelta(days=20))
    waiting = add_export(world, workspace_id, query_id, None)

    summary = retention_pass(world, owner="queries")

    left = {r["id"] for r in world.execute("SELECT id FROM exports")}
    assert left == {downloadable, waiting} and summary["exports"] == 1
    assert OWNER != "queries" and retention_pass(world) is None, "only the queries owner's pass prunes exports"


def add_snapshot_run(conn, workspace_id: uuid.UUID, period: date, version: int, *, state: str, rows: int,
                     updated_at: datetime, current: bool = False, protection: str | None = None) -> uuid.UUID:
    """A self-test snapshot run with ``rows`` generated rows (written while it ran)."""
    run_id = uuid.uuid4()
    conn.execute("""INSERT INTO snapshot_runs (id, owner, snapshot_type, workspace_id, period, version, mode, reason,
                                               requested_by, state, rows_written, created_at, updated_at)
                    VALUES (%s, 'platform', 'selftest', %s, %s, %s, 'manual', 'test', 'staff', 'running', %s, %s,
                            %s)""",
                 (run_id, workspace_id, period, version, rows, updated_at, updated_at))
    conn.execute("""INSERT INTO snapshot_selftest_rows (run_id, workspace_id, n)
                    SELECT %s, %s, n FROM generate_series(1, %s) AS n""", (run_id, workspace_id, rows))
    conn.execute("""UPDATE snapshot_runs SET state = %s, is_current = %s, protection = %s,
                           published_at = CASE WHEN %s = 'published' THEN %s END,
                           failure_code = CASE WHEN %s = 'failed' THEN 'validation_failed' END, updated_at = %s
                     WHERE id = %s""",
                 (state, current, protection, state, updated_at, state, updated_at, run_id))
    return run_id


def test_only_the_rows_of_failed_snapshot_runs_past_retention_are_pruned(world):
    """Given, all old, a failed run, the published current version of a period, a captured
    earlier version, and a recent failed run: only the old failed run loses its rows (its
    ledger row stays, marked); the published, current and captured versions keep theirs."""
    workspace_id = uuid.uuid4()
    world.execute("INSERT INTO workspaces (id, name, timezone, created_at) VALUES (%s, 'w', 'UTC', %s)",
                  (workspace_id, OLD - timedelta(days=400)))
    failed = add_snapshot_run(world, workspace_id, date(2027, 1, 1), 1, state="failed", rows=7, updated_at=OLD)
    captured = add_snapshot_run(world, workspace_id, date(2027, 2, 1), 1, state="published", rows=5,
                                updated_at=OLD, protection="captured")
    current = add_snapshot_run(world, workspace_id, date(2027, 2, 1), 2, state="published", rows=6,
                               updated_at=OLD, current=True)
    recent = add_snapshot_run(world, workspace_id, date(2027, 3, 1), 1, state="failed", rows=3, updated_at=RECENT)

    pruned = prune_failed_snapshot_rows(world, now=NOW, days=14, max_batches=5, time_budget_s=5)

    counts = {r["run_id"]: r["n"] for r in world.execute(
        "SELECT run_id, count(*) AS n FROM snapshot_selftest_rows GROUP BY run_id")}
    assert counts == {captured: 5, current: 6, recent: 3}
    assert pruned.rows == {"snapshot_runs": 1, "snapshot_rows": 7}
    marked = world.execute("SELECT id, rows_pruned_at FROM snapshot_runs WHERE rows_pruned_at IS NOT NULL").fetchall()
    assert marked == [{"id": failed, "rows_pruned_at": NOW}]
    assert prune_failed_snapshot_rows(world, now=NOW, days=14, max_batches=5, time_budget_s=5).total == 0


# ---------------------------------------------------------------------- concurrency


def test_a_run_being_settled_is_never_pruned(world, db_url):
    """Given a run queued past retention and still running (a leased kind's handler at
    work: no lock held), when a retention pass runs, then the run is not pruned; and when
    it is settled on another connection at an instant past retention, its transaction
    open, a pass beside it neither prunes it nor waits for it, and the settlement commits."""
    schedule = make_schedule(world)
    runs = old_runs(world, schedule, 3)
    running = add_run(world, schedule, OLD + timedelta(days=50), finished=False)
    recent = add_run(world, schedule, RECENT)
    set_schedule(world, schedule, last_run_id=recent)
    retention_pass(world)
    assert existing(world, [running]) == {running}
    settler = connect(db_url)
    try:
        settler.execute("BEGIN")
        assert settle_run(settler, run_id=running, state="succeeded", outcome_code="ok", now=OLD + timedelta(days=51),
                          failure_threshold=5)

        world.execute("SET lock_timeout = '2s'")
        retention_pass(world)
        world.execute("RESET lock_timeout")

        settler.execute("COMMIT")
    finally:
        settler.close()
    assert existing(world, runs + [running, recent]) == {running, recent}
    row = world.execute("SELECT state FROM schedule_runs WHERE id = %s", (running,)).fetchone()
    assert row["state"] == "succeeded"
    assert world.execute("SELECT last_run_id FROM schedules WHERE id = %s",
                         (schedule.id,)).fetchone()["last_run_id"] == running


def test_a_run_another_transaction_holds_is_skipped_not_waited_for(world, db_url):
    """Given old finished runs, one of them locked by another connection (a late duplicate
    of its message checking its state, a delivery row being written for it), when the
    retention pass runs with a short lock timeout, then it prunes the others without
    waiting and the held run stays; the next pass prunes it once released."""
    schedule = make_schedule(world)
    runs = old_runs(world, schedule, 4)
    set_schedule(world, schedule, last_run_id=runs[-1])
    holder = connect(db_url)
    held = threading.Event()
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT id FROM schedule_runs WHERE id = %s FOR UPDATE", (runs[1],))
        held.set()
        world.execute("SET lock_timeout = '1s'")
        try:
            summary = retention_pass(world)
        except psycopg.errors.LockNotAvailable:  # pragma: no cover - the failure this test guards against
            pytest.fail("the retention pass waited for a run another transaction holds")
        finally:
            world.execute("RESET lock_timeout")
        assert summary["runs"] == 2 and existing(world, runs) == {runs[1], runs[-1]}
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    retention_pass(world)
    assert existing(world, runs) == {runs[-1]}


# ---------------------------------------------------------------------- the plan


def _scans(node: dict) -> list[tuple[str, str]]:
    found = [(node["Node Type"], node.get("Relation Name", ""))] if "Scan" in node["Node Type"] else []
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


def test_a_batch_reads_the_retention_index_and_deletes_by_key_never_scanning_the_history(world):
    """Given 20,000 finished runs of 1,000 schedules, their events and delivery rows
    (analyzed), the runs and events batches and the erasure of old addresses are planned as
    index scans in the retention index's order with per-row keep checks, and their deletes
    and updates find their rows by key: no sequential scan of schedule_runs,
    schedule_events or query_deliveries, whose cost would grow with the table (benchmarks/retention.py measures
    the cost at 2 million)."""
    world.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT md5('s' || j)::uuid, md5('w' || j)::uuid, 'accounting', 'reconciliation.sweep',
               '{"cron": "0 3 * * *"}'::jsonb, 'UTC', 'active', %(now)s, %(old)s, %(old)s
          FROM generate_series(1, 1000) AS j""", {"now": NOW, "old": OLD})
    world.execute("""
        INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                                   occurrence_local, trigger, definition_version, state, queued_at, finished_at,
                                   outcome_code)
        SELECT md5('s' || (i %% 1000 + 1))::uuid, md5('w' || (i %% 1000 + 1))::uuid, 'accounting',
               'reconciliation.sweep', 'k' || i, t, t::timestamp, 'scheduled', 1, 'succeeded', t, t, 'ok'
          FROM generate_series(1, 20000) AS i, LATERAL (SELECT %(old)s + i * interval '5 minutes' AS t) AS at""",
                  {"old": OLD})
    world.execute("""INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, at)
                     SELECT schedule_id, workspace_id, id, 'settled', 'consumer', finished_at FROM schedule_runs""")
    world.execute("""INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, address,
                                                   provider_message_id, attempt, updated_at)
                     SELECT id, 'u1', workspace_id, schedule_id, 'sent', 'one@example.com', 'm-' || id, 1, finished_at
                       FROM schedule_runs""")
    world.execute("ANALYZE schedules, schedule_runs, schedule_events, query_deliveries")
    from timekeeper.db.retention import SQL

    tables = {"prune_runs": "schedule_runs", "prune_events": "schedule_events",
              "erase_old_addresses": "query_deliveries"}
    for name, params in (("prune_runs", {"owner": OWNER, "now": NOW, "cutoff": NOW - timedelta(days=90)}),
                         ("prune_events", {"owner": OWNER, "cutoff": NOW - timedelta(days=90)}),
                         ("erase_old_addresses", {"now": NOW, "cutoff": NOW - timedelta(days=35)})):
        world.execute("BEGIN")
        try:
            plan = world.execute("EXPLAIN (FORMAT JSON) " + SQL[name], {**params, "limit": 500}).fetchone()
        finally:
            world.execute("ROLLBACK")
        scans = _scans(plan["QUERY PLAN"][0]["Plan"])
        assert ("Index Scan", tables[name]) in scans, scans
        assert not [s for s in scans if s[0] == "Seq Scan" and s[1] in set(tables.values())], scans
