"""The snapshot ledger on a real PostgreSQL: planning, admission, chunked resumable
generation, atomic publication, failures, staff requests and overdue periods."""

from __future__ import annotations

import collections
import threading
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from timekeeper.db.connection import connect
from timekeeper.platform import snapshots as platform_snapshots
from timekeeper.platform.directory import create_workspace, set_workspace_status
from timekeeper.snapshots import jobs, ledger
from timekeeper.snapshots.jobs import JobMessage, run_job
from timekeeper.snapshots.ledger import RequestRefused, admit, plan, request_run
from timekeeper.snapshots.registry import SnapshotRegistry

# 2027-03-01 10:00 UTC: February has ended everywhere on Earth by then.
NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
CREATED = datetime(2026, 12, 15, tzinfo=UTC)


@pytest.fixture
def db(conn):
    """A clean ledger and Platform data for each test (the module's database is shared)."""
    conn.execute("TRUNCATE snapshot_runs, snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows, "
                 "payments, invoices, memberships, members, membership_types, workspace_memberships, workspaces "
                 "CASCADE")
    return conn


def registry(selftest: platform_snapshots.SelfTest | None = None, *, environment: str = "development",
             aging_chunk: int = 3) -> SnapshotRegistry:
    reg = SnapshotRegistry(environment=environment)
    platform_snapshots.register(reg, aging_chunk_size=aging_chunk, selftest=selftest)
    return reg


def workspace(conn, name: str = "Berlin", timezone: str = "Europe/Berlin", created: datetime = CREATED,
              **kwargs) -> UUID:
    return create_workspace(conn, name=name, timezone=timezone, currency="EUR", now=created, **kwargs).id


def runs(conn, **where) -> list[ledger.SnapshotRun]:
    clause = " AND ".join(f"{k} = %({k})s" for k in where) or "true"
    return ledger.fetch_runs(conn, f"SELECT * FROM snapshot_runs WHERE {clause} ORDER BY period, version", where)


def drain(conn, reg, *, now=NOW, owner="platform", max_receives=3, cap=4, lane=1, limit=1000):
    """Admit and run every job until nothing is left to admit; returns the job results."""
    results = []
    for _ in range(limit):
        with conn.transaction():
            jobs_to_send = admit(conn, owner=owner, now=now, cap=cap, backfill_lane=lane)
        if not jobs_to_send:
            return results
        for job in jobs_to_send:
            message = JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id)
            results.append(run_job(conn, reg, message, now=lambda: now, receive_count=1, max_receives=max_receives))
    raise AssertionError("did not drain")


# ------------------------------------------------------------------------------ planning


def test_planner_plans_each_completed_local_month_once_with_skip_reasons(db):
    berlin = workspace(db)
    loading = workspace(db, "Loading", status="loading")
    off = workspace(db, "Off", snapshots_enabled=False)
    reg = registry()
    first = plan(db, reg, now=NOW)
    # Berlin existed from December 2026: December, January, February; three enabled types.
    assert first.planned == 3 * 3 and first.skipped == 2 * 3 * 3
    assert plan(db, reg, now=NOW).planned == 0
    got = {(r.workspace_id, r.snapshot_type, r.period): (r.state, r.skip_reason) for r in runs(db)}
    assert got[(berlin, "ar_aging", date(2027, 2, 1))] == ("planned", None)
    assert got[(loading, "ar_aging", date(2027, 2, 1))] == ("skipped", "workspace_loading")
    assert got[(off, "selftest", date(2026, 12, 1))] == ("skipped", "policy_disabled")
    assert (berlin, "ar_aging", date(2027, 3, 1)) not in got


def test_selftest_type_is_disabled_in_production():
    reg = registry(environment="production")
    assert [t.name for t in reg.enabled()] == ["membership_counts", "ar_aging"]
    with pytest.raises(Exception) as caught:
        reg.get("platform", "selftest")
    assert caught.value.reason == "type_disabled"


def test_months_missed_while_the_planner_was_down_are_planned_within_the_horizon(db):
    ws = workspace(db)
    reg = registry()
    plan(db, reg, now=datetime(2027, 1, 2, tzinfo=UTC))
    assert {r.period for r in runs(db, snapshot_type="ar_aging")} == {date(2026, 12, 1)}
    # Down until June: January..May are planned by the next pass (horizon 6 months).
    plan(db, reg, now=datetime(2027, 6, 2, tzinfo=UTC), horizon_months=6)
    assert [r.period for r in runs(db, snapshot_type="ar_aging", workspace_id=ws)] == [
        date(2026, 12, 1), date(2027, 1, 1), date(2027, 2, 1), date(2027, 3, 1), date(2027, 4, 1), date(2027, 5, 1)]


def test_a_month_is_complete_in_the_workspaces_own_timezone(db):
    east = workspace(db, "Kiritimati", "Pacific/Kiritimati")  # UTC+14
    west = workspace(db, "Pago Pago", "Pacific/Pago_Pago")  # UTC-11
    reg = registry()
    # 2027-02-28 10:30 UTC is already March 1st 00:30 in Kiritimati, still Feb 27th in Pago Pago.
    plan(db, reg, now=datetime(2027, 2, 28, 10, 30, tzinfo=UTC))
    assert date(2027, 2, 1) in {r.period for r in runs(db, workspace_id=east)}
    assert date(2027, 2, 1) not in {r.period for r in runs(db, workspace_id=west)}


def test_two_concurrent_planners_insert_each_month_once(db, db_url):
    for i in range(40):
        workspace(db, f"W{i}")
    reg = registry()
    barrier = threading.Barrier(2)
    totals: list[int] = []
    errors: list[BaseException] = []

    def planner() -> None:
        try:
            with connect(db_url) as own:
                barrier.wait()
                with own.transaction():
                    result = plan(own, reg, now=NOW)
                totals.append(result.planned)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=planner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(totals) == 40 * 3 * 3
    assert db.execute("SELECT count(*) AS n FROM snapshot_runs").fetchone()["n"] == 40 * 3 * 3


# ----------------------------------------------------------------------- generation


def business_data(conn, ws: UUID) -> None:
    """Two membership types, four members, memberships in every state, invoices and payments
    whose aging at 2027-02-28 is known by hand."""
    gold = conn.execute("INSERT INTO membership_types (workspace_id, name, annual_fee_minor, currency) "
                        "VALUES (%s, 'Gold', 10000, 'EUR') RETURNING id", (ws,)).fetchone()["id"]
    basic = conn.execute("INSERT INTO membership_types (workspace_id, name, annual_fee_minor, currency) "
                         "VALUES (%s, 'Basic', 5000, 'EUR') RETURNING id", (ws,)).fetchone()["id"]
    members = [conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                            "VALUES (%s, %s, %s, '2026-01-01') RETURNING id", (ws, f"M{i}", f"Member {i}"))
               .fetchone()["id"] for i in range(4)]
    for member, kind, status, start, end, cancelled in [
        (members[0], gold, "active", "2026-01-01", None, None),
        (members[1], gold, "cancelled", "2026-01-01", None, "2027-02-10"),
        (members[2], basic, "lapsed", "2026-01-01", "2027-01-31", None),
        (members[3], basic, "active", "2027-03-05", None, None),  # starts after the month end
        (members[3], gold, "cancelled", "2026-06-01", None, "2027-03-03"),  # cancelled after the month end
    ]:
        conn.execute("INSERT INTO memberships (workspace_id, member_id, membership_type_id, status, start_date, "
                     "end_date, cancelled_on) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                     (ws, member, kind, status, start, end, cancelled))
    as_of = date(2027, 2, 28)
    invoices = [
        # number, member, issued, due, amount, status, voided_on, payments [(date, amount)]
        ("I1", 0, as_of - timedelta(days=40), as_of - timedelta(days=10), 1000, "open", None, []),  # 0-30: 1000
        ("I2", 1, as_of - timedelta(days=80), as_of - timedelta(days=45), 2000, "open", None,
         [(as_of - timedelta(days=5), 500)]),  # 31-60: 1500
        ("I3", 2, as_of - timedelta(days=120), as_of - timedelta(days=75), 3000, "paid", None,
         [(as_of + timedelta(days=3), 3000)]),  # paid after the month end: 61-90: 3000
        ("I4", 3, as_of - timedelta(days=200), as_of - timedelta(days=150), 400, "open", None, []),  # over_90: 400
        ("I5", 0, as_of - timedelta(days=30), as_of, 700, "paid", None, [(as_of - timedelta(days=1), 700)]),  # paid
        ("I6", 1, as_of - timedelta(days=30), as_of, 900, "void", as_of - timedelta(days=2), []),  # void by then
        ("I7", 2, as_of - timedelta(days=30), as_of, 800, "void", as_of + timedelta(days=2), []),  # void later: 800
        ("I8", 3, as_of + timedelta(days=1), as_of + timedelta(days=31), 5000, "open", None, []),  # issued later
        ("I9", 0, as_of - timedelta(days=3), as_of + timedelta(days=27), 600, "draft", None, []),  # draft
    ]
    for number, member, issued, due, amount, status, voided, payments in invoices:
        invoice = conn.execute(
            "INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, "
            "status, voided_on) VALUES (%s, %s, %s, %s, %s, %s, 'EUR', %s, %s) RETURNING id",
            (ws, members[member], number, issued, due, amount, status, voided)).fetchone()["id"]
        for received, paid in payments:
            conn.execute("INSERT INTO payments (workspace_id, invoice_id, received_on, amount_minor, currency, method) "
                         "VALUES (%s, %s, %s, %s, 'EUR', 'card')", (ws, invoice, received, paid))


def test_platform_types_publish_month_end_figures(db):
    ws = workspace(db)
    business_data(db, ws)
    reg = registry(aging_chunk=2)
    plan(db, reg, now=NOW)
    results = drain(db, reg)
    assert {r.status for r in results} == {"published"}
    feb = {r.snapshot_type: r for r in runs(db, workspace_id=ws, period=date(2027, 2, 1))}
    counts = db.execute("SELECT membership_type, status, members FROM snapshot_membership_counts WHERE run_id = %s "
                        "ORDER BY 1, 2", (feb["membership_counts"].id,)).fetchall()
    assert [tuple(r.values()) for r in counts] == [("Basic", "lapsed", 1), ("Gold", "active", 2),
                                                   ("Gold", "cancelled", 1)]
    aging = feb["ar_aging"]
    assert aging.is_current and aging.generation_mode == "chunked" and aging.chunks_committed == 5
    assert aging.basis["buckets"] == {"0-30": {"invoices": 2, "outstanding_minor": 1800},
                                      "31-60": {"invoices": 1, "outstanding_minor": 1500},
                                      "61-90": {"invoices": 1, "outstanding_minor": 3000},
                                      "over_90": {"invoices": 1, "outstanding_minor": 400}}
    assert aging.basis["outstanding_minor"] == 6700


class CrashOnce:
    """Wrap a generator: raise at the given chunk number on the first pass only."""

    def __init__(self, inner, *, chunk: int | None = None, in_validate: bool = False) -> None:
        self.inner, self.chunk, self.in_validate, self.crashed, self.calls = inner, chunk, in_validate, False, 0

    def choose_mode(self, conn, run):
        return self.inner.choose_mode(conn, run)

    def generate(self, conn, run, cursor):
        self.calls += 1
        chunk = self.inner.generate(conn, run, cursor)
        if self.calls == self.chunk and not self.crashed:
            self.crashed = True
            raise RuntimeError("killed between chunks")  # after the chunk's rows were written, before commit
        return chunk

    def validate(self, conn, run):
        return self.inner.validate(conn, run)


def selftest_registry(generator) -> SnapshotRegistry:
    reg = SnapshotRegistry(environment="development")
    reg.register(ledger_type(generator))
    return reg


def ledger_type(generator):
    from timekeeper.snapshots.registry import SnapshotType

    return SnapshotType(owner="platform", name="selftest", label="self-test", generator=generator, chunk_size=100)


def one_job(conn, now=NOW) -> JobMessage:
    with conn.transaction():
        (job,) = admit(conn, owner="platform", now=now)
    return JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id)


def test_a_crash_between_chunks_resumes_from_the_committed_cursor_without_duplicates(db):
    ws = workspace(db)
    crashing = CrashOnce(platform_snapshots.SelfTest(total=1000, chunk_size=100), chunk=4)
    reg = selftest_registry(crashing)
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    message = one_job(db)
    with pytest.raises(RuntimeError):
        run_job(db, reg, message, now=lambda: NOW, receive_count=1, max_receives=3)
    (mid,) = runs(db)
    assert (mid.state, mid.chunks_committed, mid.cursor) == ("running", 3, {"next": 301})
    assert db.execute("SELECT count(*) AS n FROM snapshot_selftest_rows").fetchone()["n"] == 300
    result = run_job(db, reg, message, now=lambda: NOW, receive_count=2, max_receives=3)
    assert result.status == "published"
    assert (result.run.attempts, result.run.chunks_committed, result.run.rows_written) == (1, 10, 1000)
    assert db.execute("SELECT count(*) AS n, count(DISTINCT n) AS d FROM snapshot_selftest_rows").fetchone() == {
        "n": 1000, "d": 1000}


def test_a_crash_inside_publish_leaves_the_previous_version_current(db, monkeypatch):
    ws = workspace(db)
    reg = selftest_registry(platform_snapshots.SelfTest(total=10, chunk_size=10))
    snapshot_type = reg.get("platform", "selftest")
    request_run(db, snapshot_type=snapshot_type, workspace_id=ws, period=date(2027, 2, 1), mode="backfill",
                reason="first", requested_by="staff", now=NOW)
    drain(db, reg)
    request_run(db, snapshot_type=snapshot_type, workspace_id=ws, period=date(2027, 2, 1), mode="manual",
                reason="re-run", requested_by="staff", now=NOW)
    message = one_job(db)
    # The publishing statement fails after the previous version was retired in the same transaction.
    monkeypatch.setitem(jobs.SQL, "publish", "SELECT 1 / 0")
    with pytest.raises(psycopg.errors.DivisionByZero):
        run_job(db, reg, message, now=lambda: NOW, receive_count=1, max_receives=3)
    v1, v2 = runs(db)
    assert (v1.version, v1.is_current, v2.is_current, v2.state) == (1, True, False, "running")
    monkeypatch.undo()
    assert run_job(db, reg, message, now=lambda: NOW, receive_count=2, max_receives=3).status == "published"
    v1, v2 = runs(db)
    assert (v1.is_current, v2.is_current, v1.state) == (False, True, "published")


class AlwaysBroken:
    def choose_mode(self, conn, run):
        return "chunked"

    def generate(self, conn, run, cursor):
        raise ConnectionError("the source is unreachable")

    def validate(self, conn, run):
        raise AssertionError("never reached")


def test_the_fourth_retryable_failure_is_final(db):
    ws = workspace(db)
    reg = selftest_registry(AlwaysBroken())
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    now = NOW
    states = []
    for failure in range(1, 5):
        message = one_job(db, now)
        for receive in (1, 2):
            with pytest.raises(ConnectionError):
                run_job(db, reg, message, now=lambda at=now: at, receive_count=receive, max_receives=3)
        result = run_job(db, reg, message, now=lambda at=now: at, receive_count=3, max_receives=3)
        states.append((result.status, result.run.retryable_failures))
        if failure < 4:
            assert result.run.retry_due_at == now + jobs.retry_backoff(failure)
            with db.transaction():
                assert admit(db, owner="platform", now=result.run.retry_due_at - timedelta(seconds=1)) == []
            now = result.run.retry_due_at
    assert states == [("retry_wait", 1), ("retry_wait", 2), ("retry_wait", 3), ("failed", 4)]
    (final,) = runs(db)
    assert (final.failure_code, final.attempts, final.is_current) == ("retries_exhausted", 4, False)


def test_a_validation_failure_is_final_at_once(db):
    ws = workspace(db)
    reg = selftest_registry(platform_snapshots.SelfTest(total=20, chunk_size=10, fail_validation=lambda run: True))
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    result = run_job(db, reg, one_job(db), now=lambda: NOW, receive_count=1, max_receives=3)
    assert (result.status, result.run.failure_code, result.run.retryable_failures) == ("failed", "selftest_mismatch", 0)
    # (its message says what did not add up: the rows are all there, the drill fails the check)
    assert result.run.failure_message.startswith("a drill: all 20 rows were written, but version 1 of this month "
                                                 "is set to fail its check on purpose")
    with db.transaction():
        assert admit(db, owner="platform", now=NOW + timedelta(days=1)) == []


def test_a_job_hands_over_before_its_time_runs_out_and_a_stale_job_is_dropped(db):
    ws = workspace(db)
    reg = selftest_registry(platform_snapshots.SelfTest(total=300, chunk_size=100))
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    message = one_job(db)
    budget = iter([100.0, 100.0, 1.0])
    handed = run_job(db, reg, message, now=lambda: NOW, receive_count=1, max_receives=3,
                     time_left_s=lambda: next(budget))
    assert (handed.status, handed.run.chunks_committed) == ("handed_over", 2)
    stale = message.model_copy(update={"job_id": UUID(int=1)})
    assert run_job(db, reg, stale, now=lambda: NOW, receive_count=1, max_receives=3).status == "stale"
    assert run_job(db, reg, message, now=lambda: NOW, receive_count=1, max_receives=3).status == "published"


# ----------------------------------------------------------------------- admission


def test_admission_keeps_the_cap_and_the_backfill_lane_under_load(db):
    ws = [workspace(db, f"W{i}", created=datetime(1899, 1, 1, tzinfo=UTC)) for i in range(5)]
    reg = selftest_registry(platform_snapshots.SelfTest(total=1, chunk_size=1))
    snapshot_type = reg.get("platform", "selftest")
    # 200 planned runs (40 per workspace: invented months far in the past) and 20 backfills
    # (benchmarks/snapshots.py drains 1,000 and 50 the same way).
    db.execute("""INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state,
                                             created_at, updated_at)
                  SELECT 'platform', 'selftest', w, (date '1900-01-01' + make_interval(months => m))::date, 1,
                         'planned', 'planned', %s + make_interval(secs => m), %s
                    FROM unnest(%s::uuid[]) w, generate_series(0, 39) m""", (NOW, NOW, ws))
    for i in range(20):
        request_run(db, snapshot_type=snapshot_type, workspace_id=ws[i % 5],
                    period=date(1950 + i // 12 + (i % 5) * 5, i % 12 + 1, 1), mode="backfill", reason="history",
                    requested_by="staff", now=NOW + timedelta(hours=1))
    max_running = max_backfills = 0
    backfills_done_at: list[int] = []
    backfill_ids = {r.id for r in runs(db, mode="backfill")}
    sent_in_order: collections.deque = collections.deque()
    for step in range(2_000):
        with db.transaction():
            sent_in_order.extend(admit(db, owner="platform", now=NOW))
        flight = db.execute("SELECT count(*) AS n, count(*) FILTER (WHERE mode = 'backfill') AS b FROM snapshot_runs "
                            "WHERE state IN ('queued', 'running')").fetchone()
        max_running, max_backfills = max(max_running, flight["n"]), max(max_backfills, flight["b"])
        if not sent_in_order:
            break
        # Busy workers: one job finishes per step, in the order the jobs were sent.
        job = sent_in_order.popleft()
        result = run_job(db, reg, JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id),
                         now=lambda: NOW, receive_count=1, max_receives=3)
        assert result.status == "published"
        if job.run_id in backfill_ids:
            backfills_done_at.append(step)
    counts = db.execute("SELECT state, count(*) AS n FROM snapshot_runs GROUP BY state").fetchall()
    assert counts == [{"state": "published", "n": 220}]
    assert (max_running, max_backfills) == (4, 1)
    # The lane is reserved: backfills finish throughout, not after the 200 planned runs.
    assert len(backfills_done_at) == 20 and backfills_done_at[0] < 10 and backfills_done_at[-1] < 100


def test_a_queued_run_whose_job_never_started_is_reoffered_after_five_minutes(db):
    ws = workspace(db)
    reg = selftest_registry(platform_snapshots.SelfTest(total=1, chunk_size=1))
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    first = one_job(db)
    with db.transaction():
        assert admit(db, owner="platform", now=NOW + timedelta(minutes=4, seconds=59)) == []
    with db.transaction():
        (again,) = admit(db, owner="platform", now=NOW + timedelta(minutes=5))
    assert again.run_id == first.run_id and again.job_id != first.job_id
    assert run_job(db, reg, first, now=lambda: NOW, receive_count=1, max_receives=3).status == "stale"
    second = JobMessage(run_id=again.run_id, workspace_id=again.workspace_id, job_id=again.job_id)
    assert run_job(db, reg, second, now=lambda: NOW, receive_count=1, max_receives=3).status == "published"


class _Queue:
    """A job queue that accepts, or refuses, every message (reports refusals by run id)."""

    def __init__(self, *, refuse: bool):
        self.refuse, self.sent = refuse, []

    def publish(self, messages):
        self.sent.extend(messages)
        return {m.run_id for m in messages} if self.refuse else set()


def test_a_job_the_queue_refused_is_offered_again_by_the_next_pass(db):
    ws = workspace(db)
    reg = selftest_registry(platform_snapshots.SelfTest(total=1, chunk_size=1))
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    # Given an admitted job the queue refused
    first = one_job(db)
    assert jobs.send_jobs(db, _Queue(refuse=True), [first], now=NOW) == 0
    # Then the next pass (a minute later, not reoffer_after later) sends the run a new job
    with db.transaction():
        (again,) = admit(db, owner="platform", now=NOW + timedelta(minutes=1))
    assert again.run_id == first.run_id and again.job_id != first.job_id
    second = JobMessage(run_id=again.run_id, workspace_id=again.workspace_id, job_id=again.job_id)
    queue = _Queue(refuse=False)
    assert jobs.send_jobs(db, queue, [second], now=NOW + timedelta(minutes=1)) == 1 and queue.sent == [second]
    # And an accepted job is not offered again before reoffer_after
    with db.transaction():
        assert admit(db, owner="platform", now=NOW + timedelta(minutes=5)) == []
    assert run_job(db, reg, first, now=lambda: NOW, receive_count=1, max_receives=3).status == "stale"
    assert run_job(db, reg, second, now=lambda: NOW, receive_count=1, max_receives=3).status == "published"


def test_a_running_job_that_stopped_beating_is_a_retryable_failure(db):
    ws = workspace(db)
    reg = selftest_registry(CrashOnce(platform_snapshots.SelfTest(total=200, chunk_size=100), chunk=2))
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="drill", requested_by="staff", now=NOW)
    with pytest.raises(RuntimeError):
        run_job(db, reg, one_job(db), now=lambda: NOW, receive_count=1, max_receives=3)
    with db.transaction():
        assert jobs.reconcile_lost_jobs(db, owner="platform", now=NOW + timedelta(minutes=59),
                                        after=timedelta(hours=1)) == []
        (lost,) = jobs.reconcile_lost_jobs(db, owner="platform", now=NOW + timedelta(hours=1), after=timedelta(hours=1))
    assert (lost.state, lost.failure_code, lost.retryable_failures) == ("retry_wait", "job_lost", 1)
    # The next attempt resumes from the committed cursor (the retained mode, the rows kept).
    results = drain(db, reg, now=lost.retry_due_at)
    assert [r.status for r in results] == ["published"]
    assert db.execute("SELECT count(*) AS n FROM snapshot_selftest_rows").fetchone()["n"] == 200


# ---------------------------------------------------------------------- staff requests


@pytest.mark.parametrize(("case", "reason"), [
    ("incomplete", "period_not_complete"), ("active", "active_work"), ("protected", "protected_history"),
    ("rerun_unplanned", "not_planned"), ("backfill_planned", "already_planned"), ("no_workspace", "unknown_workspace"),
    ("before_workspace", "period_before_workspace"), ("loading", "workspace_loading"),
    ("disabled", "workspace_disabled"), ("policy_off", "policy_disabled"),
])
def test_staff_requests_are_refused_with_their_reason(db, case, reason):
    ws = workspace(db)
    reg = registry()
    aging = reg.get("platform", "ar_aging")
    plan(db, reg, now=NOW)
    request = {"snapshot_type": aging, "workspace_id": ws, "period": date(2027, 1, 1), "mode": "manual",
               "reason": "corrected payments", "requested_by": "staff", "now": NOW}
    if case == "incomplete":
        request["period"] = date(2027, 3, 1)
    elif case == "protected":
        drain(db, reg)
        db.execute("UPDATE snapshot_runs SET protection = 'finalized' WHERE is_current AND period = '2027-01-01'")
    elif case == "rerun_unplanned":  # a completed month after the workspace's creation, never planned
        db.execute("DELETE FROM snapshot_runs WHERE period = '2026-12-01'")
        request["period"] = date(2026, 12, 1)
    elif case == "backfill_planned":
        request["mode"] = "backfill"
    elif case == "no_workspace":
        request["workspace_id"] = UUID(int=7)
    elif case == "before_workspace":  # the workspace was created in December 2026
        request.update(period=date(1900, 1, 1), mode="backfill")
    elif case in ("loading", "disabled"):  # the planner skipped the period; staff may not publish it
        db.execute("UPDATE workspaces SET status = %s WHERE id = %s", (case, ws))
    elif case == "policy_off":
        db.execute("UPDATE workspaces SET snapshots_enabled = false WHERE id = %s", (ws,))
    with pytest.raises(RequestRefused) as caught:
        request_run(db, **request)
    assert caught.value.reason == reason


def test_unsupported_types_and_missing_reasons_are_refused(db):
    reg = registry(environment="production")
    with pytest.raises(Exception) as unsupported:
        reg.get("platform", "nope")
    assert unsupported.value.reason == "unsupported_type"
    with pytest.raises(ValueError):
        request_run(db, snapshot_type=reg.get("platform", "ar_aging"), workspace_id=workspace(db),
                    period=date(2027, 1, 1), mode="backfill", reason="  ", requested_by="staff", now=NOW)


def test_a_manual_rerun_publishes_a_new_version_and_the_listing_chooses_it(db):
    ws = workspace(db)
    business_data(db, ws)
    reg = registry()
    plan(db, reg, now=NOW)
    drain(db, reg)
    rerun = request_run(db, snapshot_type=reg.get("platform", "membership_counts"), workspace_id=ws,
                        period=date(2027, 2, 1), mode="manual", reason="late cancellation", requested_by="staff",
                        now=NOW)
    assert rerun.version == 2
    drain(db, reg)
    listing = ledger.page_periods(db, workspace_id=ws, now=NOW, types=reg.enabled(),
                                  snapshot_type="membership_counts").items
    assert [(p.period, p.status, p.chosen_version) for p in listing] == [
        (date(2027, 2, 1), "published", 2), (date(2027, 1, 1), "published", 1), (date(2026, 12, 1), "published", 1)]


# ----------------------------------------------------------------------------- overdue


@pytest.mark.parametrize(("timezone", "month_end_utc"), [
    ("Pacific/Kiritimati", datetime(2027, 2, 28, 10, tzinfo=UTC)),  # UTC+14: March 1st 00:00 local
    ("Pacific/Pago_Pago", datetime(2027, 3, 1, 11, tzinfo=UTC)),  # UTC-11
])
def test_a_period_is_overdue_24_hours_after_its_local_month_end(db, timezone, month_end_utc):
    ws = workspace(db, timezone, timezone)
    reg = selftest_registry(platform_snapshots.SelfTest(total=1, chunk_size=1))
    before, after = month_end_utc + timedelta(hours=24) - timedelta(seconds=1), month_end_utc + timedelta(hours=24)
    plan(db, reg, now=month_end_utc)
    overdue = {p for (w, _, _, p) in ledger.overdue_periods(db, reg, now=before) if w == ws}
    assert date(2027, 2, 1) not in overdue
    overdue = {p for (w, _, _, p) in ledger.overdue_periods(db, reg, now=after) if w == ws}
    assert date(2027, 2, 1) in overdue
    page = ledger.page_periods(db, workspace_id=ws, now=after, types=reg.enabled())
    listing = {p.period: p.overdue for p in page.items}
    assert listing[date(2027, 2, 1)] is True
    drain(db, reg, now=after)
    assert date(2027, 2, 1) not in {p for (w, _, _, p) in ledger.overdue_periods(db, reg, now=after) if w == ws}


def test_a_month_the_planner_never_inserted_is_still_overdue(db):
    ws = workspace(db)
    reg = registry()
    overdue = ledger.overdue_periods(db, reg, now=NOW + timedelta(days=1))
    assert (ws, "platform", "ar_aging", date(2027, 2, 1)) in overdue
    set_workspace_status(db, ws, "disabled")
    assert ledger.overdue_periods(db, reg, now=NOW + timedelta(days=1)) == []


def test_a_published_version_never_changes(db):
    ws = workspace(db)
    reg = selftest_registry(platform_snapshots.SelfTest(total=3, chunk_size=3))
    request_run(db, snapshot_type=reg.get("platform", "selftest"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="first", requested_by="staff", now=NOW)
    drain(db, reg)
    (run,) = runs(db)
    attempts = {
        "insert a row": ("INSERT INTO snapshot_selftest_rows (run_id, workspace_id, n) VALUES (%s, %s, 99)",
                         (run.id, ws)),
        "change a row": ("UPDATE snapshot_selftest_rows SET n = n + 100 WHERE run_id = %s", (run.id,)),
        "delete a row": ("DELETE FROM snapshot_selftest_rows WHERE run_id = %s", (run.id,)),
        "rewrite the basis": ("UPDATE snapshot_runs SET basis = '{}'::jsonb WHERE id = %s", (run.id,)),
        "delete the version": ("DELETE FROM snapshot_runs WHERE id = %s", (run.id,)),
    }
    for what, (statement, params) in attempts.items():
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation), db.transaction():
            db.execute(statement, params)
        assert db.execute("SELECT count(*) AS n FROM snapshot_selftest_rows").fetchone()["n"] == 3, what
    # Marking it protected (or no longer current) is what may change
    db.execute("UPDATE snapshot_runs SET protection = 'finalized' WHERE id = %s", (run.id,))
    assert runs(db)[0].protection == "finalized"


# ------------------------------------------------------------- the planner's watermark


def watermark(conn, ws: UUID, snapshot_type: str = "ar_aging") -> tuple[date, date] | None:
    row = conn.execute("SELECT planned_from, planned_through FROM snapshot_planner_watermarks "
                       "WHERE workspace_id = %s AND owner = 'platform' AND snapshot_type = %s",
                       (ws, snapshot_type)).fetchone()
    return None if row is None else (row["planned_from"], row["planned_through"])


def test_a_backfill_does_not_move_the_planners_starting_point(db):
    # Given a workspace since December and a staff backfill of February before any planner pass
    ws = workspace(db)
    reg = registry()
    request_run(db, snapshot_type=reg.get("platform", "ar_aging"), workspace_id=ws, period=date(2027, 2, 1),
                mode="backfill", reason="audit", requested_by="staff", now=NOW)
    # When the planner runs
    plan(db, reg, now=NOW)
    # Then December and January are planned too (the backfill is February's version 1)
    got = [(r.period, r.version, r.mode) for r in runs(db, snapshot_type="ar_aging", workspace_id=ws)]
    assert got == [(date(2026, 12, 1), 1, "planned"), (date(2027, 1, 1), 1, "planned"),
                   (date(2027, 2, 1), 1, "backfill")]
    assert watermark(db, ws) == (date(2026, 12, 1), date(2027, 2, 1))


def test_the_watermark_spares_the_months_it_covers_and_grows_with_the_horizon(db):
    # Given a workspace since June 2026 planned at the deployed horizon (three months)
    ws = workspace(db, created=datetime(2026, 6, 10, tzinfo=UTC))
    reg = registry()
    assert plan(db, reg, now=NOW).planned == 3 * 3
    assert watermark(db, ws) == (date(2026, 12, 1), date(2027, 2, 1))
    # When January's row disappears behind the planner's back, a pass does not look at January
    db.execute("DELETE FROM snapshot_runs WHERE workspace_id = %s AND snapshot_type = 'ar_aging' "
               "AND period = '2027-01-01'", (ws,))
    assert plan(db, reg, now=NOW).planned == 0
    # When a pass has a six-month horizon, it plans the older months and the range reaches them
    assert plan(db, reg, now=NOW, horizon_months=6).planned == 3 * 3
    assert watermark(db, ws) == (date(2026, 9, 1), date(2027, 2, 1))
    # When the next month ends, only March is planned and the range moves on
    april = datetime(2027, 4, 1, 12, tzinfo=UTC)
    assert plan(db, reg, now=april).planned == 3
    assert watermark(db, ws) == (date(2026, 9, 1), date(2027, 3, 1))


def test_the_watermark_never_covers_a_month_another_planner_has_not_committed(db, db_url):
    # Given a workspace and another planner that inserted January's row without committing yet
    ws = workspace(db)
    reg = registry()
    other = connect(db_url)
    try:
        other.execute("BEGIN")
        other.execute("INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, "
                      "created_at, updated_at) VALUES ('platform', 'ar_aging', %s, '2027-01-01', 1, 'planned', "
                      "'planned', %s, %s)", (ws, NOW, NOW))
        result: list = []
        planner = threading.Thread(target=lambda: result.append(_plan_on_own_connection(db_url, reg)))
        # When this planner runs (it waits on January's row) and the other then commits
        planner.start()
        planner.join(2)
        assert planner.is_alive(), "the planner should wait for the uncommitted January row"
        other.execute("COMMIT")
        planner.join(30)
    finally:
        other.close()
    # Then it planned December and February, and its watermark does not claim January
    assert result == [8]  # ar_aging: December, February; the two other types: three months each
    assert watermark(db, ws) is None
    assert watermark(db, ws, "membership_counts") == (date(2026, 12, 1), date(2027, 2, 1))
    # And the next pass sees January's row and covers the whole window, planning nothing
    assert plan(db, reg, now=NOW).planned == 0
    assert watermark(db, ws) == (date(2026, 12, 1), date(2027, 2, 1))


def _plan_on_own_connection(db_url: str, reg: SnapshotRegistry) -> int:
    with connect(db_url) as own, own.transaction():
        return plan(own, reg, now=NOW).planned


def test_settled_months_are_not_looked_up_again_and_an_unsettled_one_stays_overdue(db):
    # Given a workspace since December whose three months are planned, and December and
    # January published, February not (it is overdue on March 2nd, a day after its end)
    ws = workspace(db)
    reg = registry()
    plan(db, reg, now=NOW)
    db.execute("UPDATE snapshot_runs SET state = 'published', is_current = true, published_at = %s "
               "WHERE workspace_id = %s AND period < '2027-02-01'", (NOW, ws))
    later = datetime(2027, 3, 2, 13, tzinfo=UTC)
    overdue = {(t, p) for _, _, t, p in plan(db, reg, now=later).overdue}
    assert overdue == {(t, date(2027, 2, 1)) for t in ("ar_aging", "membership_counts", "selftest")}
    # Then the settled range stays empty: February is in the window and not settled
    assert db.execute("SELECT count(*) AS n FROM snapshot_planner_watermarks WHERE settled_from IS NOT NULL"
                      ).fetchone()["n"] == 0
    # When February is published too, the next pass finds nothing overdue and settles the window
    db.execute("UPDATE snapshot_runs SET state = 'published', is_current = true, published_at = %s "
               "WHERE workspace_id = %s AND state = 'planned'", (later, ws))
    assert plan(db, reg, now=later).overdue == []
    row = db.execute("SELECT settled_from, settled_through FROM snapshot_planner_watermarks "
                     "WHERE workspace_id = %s AND snapshot_type = 'ar_aging'", (ws,)).fetchone()
    assert (row["settled_from"], row["settled_through"]) == (date(2026, 12, 1), date(2027, 2, 1))
    # And a settled month is not looked up again (its row made unsettled behind the planner's back
    # is not noticed), while March, once ended, is counted overdue a day after its end
    db.execute("UPDATE snapshot_runs SET is_current = false WHERE workspace_id = %s AND period = '2027-01-01'",
               (ws,))
    assert plan(db, reg, now=later).overdue == []
    april = datetime(2027, 4, 2, 13, tzinfo=UTC)
    overdue = {(t, p) for _, _, t, p in plan(db, reg, now=april).overdue}
    assert overdue == {(t, date(2027, 3, 1)) for t in ("ar_aging", "membership_counts", "selftest")}


def test_runs_planned_together_are_admitted_oldest_month_first_and_their_queue_is_counted(db):
    # Given five months planned in one pass (one creation instant), their ids in no month order
    ws = workspace(db)
    months = [date(2026, m, 1) for m in (7, 4, 8, 6, 5)]
    ids = {}
    for month in months:
        ids[month] = db.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                       state, created_at, updated_at)
            VALUES ('platform', 'selftest', %s, %s, 1, 'backfill', 'gap', 'staff', 'planned', %s, %s)
            RETURNING id""", (ws, month, NOW, NOW)).fetchone()["id"]
    # When admission has room for one backfill at a time
    admitted = admit(db, owner="platform", now=NOW, cap=4, backfill_lane=1)
    # Then the oldest month goes first, and the newest waits behind the three between
    assert [a.run_id for a in admitted] == [ids[date(2026, 4, 1)]]
    queue = ledger.admission_queue(db, ids[date(2026, 8, 1)])
    assert (queue.in_flight, queue.backfills_in_flight, queue.ahead, queue.backfill_active) == (1, 1, 3, True)
    assert ledger.admission_queue(db, UUID(int=5)) is None
