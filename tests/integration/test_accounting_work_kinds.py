"""Accounting work kinds against a real PostgreSQL, through the real dispatcher and consumer.

Each run is claimed by the dispatcher from a schedule and delivered to
``process_batch`` (handler and settlement in the batch's transaction, then the
after-commit callbacks: posting). Every work kind's idempotency contract is checked by
duplicate delivery: the same run in a batch that dies after the handler ran, twice in the
redelivered batch, and once more after it settled; its effect is there once.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from uuid import uuid4

import pytest

from tests.integration.accounting_helpers import (
    add_balanced,
    committed,
    deliver_with_duplicates,
    execute,
    monthly_books,
    one,
    posted_batch,
    rows,
    spec,
    workspace_snapshot,
)
from timekeeper.accounting import books
from timekeeper.accounting.models import NotFound, OutsideCalendarCoverage
from timekeeper.accounting.posting import get_posting_job, run_posting_job
from timekeeper.accounting.work_kinds import register
from timekeeper.schedules.work import WorkKindRegistry, run_maintenance

FEB_1 = datetime(2027, 2, 1, 0, 5)


def batches_of(conn, recurring_id):
    return rows(conn, "SELECT * FROM batches WHERE recurring_batch_id = %s ORDER BY opened_at, name", (recurring_id,))


def test_register_adds_the_four_accounting_work_kinds_without_staleness_bound():
    # Given an empty registry
    registry = WorkKindRegistry()
    # When the accounting module registers its work kinds
    register(registry)
    # Then the four kinds are there under owner "accounting", none with a staleness bound
    assert registry.names("accounting") == ["batch.auto_close", "batch.roll", "billing.prepare",
                                            "reconciliation.sweep"]
    for name in registry.names("accounting"):
        kind = registry.get("accounting", name)
        assert kind.staleness is None
        assert "Idempotency:" in kind.description
    # And the posting sweep is its pipeline's maintenance task
    assert list(registry.maintenance("accounting")) == ["posting.sweep"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register_maintenance("accounting", "posting.sweep", lambda conn, now: None)


def test_a_failing_maintenance_task_is_reported_and_the_next_task_still_runs(conn, utc):
    # Given an owner with a failing maintenance task registered before a working one
    registry = WorkKindRegistry()
    ran = []

    def broken(task_conn, now):
        raise RuntimeError("disk full")

    registry.register_maintenance("accounting", "broken", broken)
    registry.register_maintenance("accounting", "counting", lambda task_conn, now: ran.append(now) or {"n": 1})

    # When the owner's maintenance runs
    summaries = run_maintenance(conn, registry, "accounting", utc(2027, 2, 1, 0, 5))

    # Then the failure is reported by its type, and the other task ran
    assert summaries == {"broken": {"error": "RuntimeError"}, "counting": {"n": 1}}
    assert ran == [utc(2027, 2, 1, 0, 5)]


# --------------------------------------------------------------------------- batch.roll


def test_roll_closes_the_active_batch_opens_the_next_period_and_records_the_plan(conn):
    # Given a six-month calendar (Jan-Jun 2027) and a recurring batch whose January batch holds entries
    ws = uuid4()
    b = monthly_books(conn, ws, periods=6)
    january = b.recurring.active_batch_id
    add_balanced(conn, ws, january, "120.00", date(2027, 1, 20))
    run = spec("batch.roll", ws, b.recurring.id, FEB_1)

    # When the roll runs for its 1 February occurrence
    outcome = execute(conn, run)

    # Then it succeeded, opening the February batch as the recurring batch's active batch
    assert outcome.state == "succeeded"
    detail = outcome.detail
    feb = one(conn, "SELECT * FROM batches WHERE recurring_batch_id = %s AND status = 'open'", (b.recurring.id,))
    assert detail["opened_batch"] == {"id": str(feb["id"]), "name": "Accruals 2027-02", "period": "2027-02"}
    active = one(conn, "SELECT active_batch_id FROM recurring_batches WHERE id = %s", (b.recurring.id,))
    assert detail["active_batch"] == str(active["active_batch_id"]) == str(feb["id"])
    assert feb["opened_by_run_id"] == outcome.run_id
    assert detail["period"]["starts_on"] == "2027-02-01" and detail["period"]["ends_on"] == "2027-02-28"
    # And the closed January batch is recorded
    assert detail["closed_batch"]["id"] == str(january)
    assert detail["closed_batch"]["period"] == "2027-01"
    # And the plan lists every remaining covered period with the batch name it would get
    assert detail["plan"] == [
        {"period": "2027-03", "starts_on": "2027-03-01", "ends_on": "2027-03-31", "batch_name": "Accruals 2027-03"},
        {"period": "2027-04", "starts_on": "2027-04-01", "ends_on": "2027-04-30", "batch_name": "Accruals 2027-04"},
        {"period": "2027-05", "starts_on": "2027-05-01", "ends_on": "2027-05-31", "batch_name": "Accruals 2027-05"},
        {"period": "2027-06", "starts_on": "2027-06-01", "ends_on": "2027-06-30", "batch_name": "Accruals 2027-06"},
    ]
    assert detail["coverage_ends_on"] == "2027-06-30"
    # And the January batch was closed by this run and posted after commit
    jan = one(conn, "SELECT * FROM batches WHERE id = %s", (january,))
    assert jan["status"] == "posted" and jan["closed_by_run_id"] == outcome.run_id
    job = one(conn, "SELECT * FROM posting_jobs WHERE batch_id = %s", (january,))
    assert (job["status"], job["requested_by_run_id"], str(job["id"])) == ("succeeded", outcome.run_id,
                                                                         detail["posting_job"])
    assert [e["posted"] for e in rows(conn, "SELECT posted FROM ledger_entries WHERE batch_id = %s", (january,))] \
        == [True, True]


def test_roll_delivered_again_and_again_rolls_once_and_posts_once(conn):
    # Given a recurring batch with its January batch open
    ws = uuid4()
    b = monthly_books(conn, ws, periods=6)
    add_balanced(conn, ws, b.recurring.active_batch_id, "10.00", date(2027, 1, 3))
    run = spec("batch.roll", ws, b.recurring.id, FEB_1)

    # When the run is delivered in a batch that dies after the handler ran, twice in the
    # redelivered batch, and once more after it settled
    seen = deliver_with_duplicates(conn, run)

    # Then the handler ran twice (the first effects rolled back with the dead batch) and the
    # duplicates were ignored
    assert seen.executions == [seen.run.run_id] * 2
    assert seen.actions == [["settled", "ignored"], ["ignored"]]
    # And the roll happened once: one February batch, one posting job started once
    assert seen.run.state == "succeeded"
    assert [x["name"] for x in batches_of(conn, b.recurring.id)] == ["Accruals 2027-01", "Accruals 2027-02"]
    assert one(conn, "SELECT opened_by_run_id FROM batches WHERE name = 'Accruals 2027-02' AND workspace_id = %s",
               (ws,))["opened_by_run_id"] == seen.run.run_id
    job = one(conn, "SELECT * FROM posting_jobs WHERE workspace_id = %s", (ws,))
    assert (job["status"], job["attempts"], str(job["id"])) == ("succeeded", 1, seen.run.detail["posting_job"])


def test_roll_opens_the_period_containing_the_occurrence_date_after_a_missed_roll(conn):
    # Given a recurring batch still on January (the February roll never ran)
    ws = uuid4()
    b = monthly_books(conn, ws, periods=6)

    # When the roll runs for a 1 March occurrence
    outcome = execute(conn, spec("batch.roll", ws, b.recurring.id, datetime(2027, 3, 1, 0, 5)))

    # Then the new batch belongs to March, the period containing the occurrence's local date
    assert outcome.state == "succeeded"
    assert outcome.detail["opened_batch"]["name"] == "Accruals 2027-03"
    assert [x["name"] for x in batches_of(conn, b.recurring.id)] == ["Accruals 2027-01", "Accruals 2027-03"]
    assert [p["period"] for p in outcome.detail["plan"]] == ["2027-04", "2027-05", "2027-06"]


def test_roll_skips_when_the_active_batch_already_covers_the_occurrence_date(conn):
    # Given a recurring batch whose active batch is for January
    ws = uuid4()
    b = monthly_books(conn, ws, periods=6)
    before = workspace_snapshot(conn, ws)

    # When a roll runs on a January date (e.g. a Run now mid-period)
    outcome = execute(conn, spec("batch.roll", ws, b.recurring.id, datetime(2027, 1, 15, 9, 0)))

    # Then it is skipped and nothing changed
    assert outcome.state == "skipped" and outcome.outcome_code == "active_batch_current"
    assert workspace_snapshot(conn, ws) == before


def test_roll_outside_calendar_coverage_is_refused_and_generates_no_calendar(conn):
    # Given a calendar covering January to March 2027 and a recurring batch on March
    ws = uuid4()
    b = monthly_books(conn, ws, periods=3, opens_on=date(2027, 3, 1))
    before = workspace_snapshot(conn, ws)

    # When the roll runs for 1 April, a date no period covers
    outcome = execute(conn, spec("batch.roll", ws, b.recurring.id, datetime(2027, 4, 1, 0, 5)))

    # Then it is refused as outside calendar coverage (the run settles failed at once)
    assert outcome.state == "failed"
    assert outcome.outcome_code == "outside_calendar_coverage"
    assert "2027-04-01" in outcome.error
    assert outcome.detail["coverage_ends_on"] == "2027-03-31"
    # And no batch was opened or closed, no period generated, no posting requested
    assert workspace_snapshot(conn, ws) == before
    assert len(before["accounting_periods"]) == 3
    assert before["posting_jobs"] == []


def test_recurring_batch_creation_refuses_an_uncovered_date_until_the_calendar_is_extended(conn):
    # Given a three-month calendar
    ws = uuid4()
    calendar = committed(conn, lambda: books.create_calendar(
        conn, workspace_id=ws, name="FY", timezone="America/New_York", first_period_start=date(2027, 1, 31),
        periods=3))

    # When a recurring batch is created for a date after the last period
    # Then the domain error names the coverage end
    with pytest.raises(OutsideCalendarCoverage) as refused:
        committed(conn, lambda: books.create_recurring_batch(
            conn, workspace_id=ws, calendar_id=calendar.id, name="Payroll", opens_on=date(2027, 5, 10),
        now=datetime(2027, 5, 10, tzinfo=UTC)))
    assert refused.value.coverage_ends_on == date(2027, 4, 29)

    # When the calendar is extended by two periods and the creation is retried
    added = committed(conn, lambda: books.extend_calendar(conn, workspace_id=ws, calendar_id=calendar.id, periods=2))
    recurring = committed(conn, lambda: books.create_recurring_batch(
        conn, workspace_id=ws, calendar_id=calendar.id, name="Payroll", opens_on=date(2027, 5, 10),
        now=datetime(2027, 5, 10, tzinfo=UTC)))

    # Then the month-end anchored periods clamp and return to the 31st, and the batch opens in April's period
    assert [(p.starts_on, p.ends_on) for p in added] == [(date(2027, 4, 30), date(2027, 5, 30)),
                                                         (date(2027, 5, 31), date(2027, 6, 29))]
    batch = one(conn, "SELECT b.name FROM batches b WHERE b.id = %s", (recurring.active_batch_id,))
    assert batch["name"] == "Payroll 2027-04"


# --------------------------------------------------------------------------- batch.auto_close and posting


def standalone_batch(conn, ws, *, close_at, amounts=("50.00", "-50.00")):
    batch = committed(conn, lambda: books.create_batch(conn, workspace_id=ws, name="Week 7", close_at=close_at,
                                                       now=close_at - timedelta(days=7)))
    for i, amount in enumerate(amounts):
        committed(conn, lambda a=amount, i=i: books.add_entry(conn, workspace_id=ws, batch_id=batch.id,
                                                              account=f"acct-{i}", amount=a,
                                                              entry_date=date(2027, 2, 10)))
    return batch


def test_auto_close_delivered_again_and_again_closes_and_posts_once(conn, utc):
    # Given a balanced batch scheduled to close at 18:00 UTC
    ws = uuid4()
    batch = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0))
    run = spec("batch.auto_close", ws, batch.id, datetime(2027, 2, 12, 18, 0), now=utc(2027, 2, 12, 18, 0, 5))

    # When the run is delivered in a batch that dies after the handler ran, twice in the
    # redelivered batch, and once more after it settled
    seen = deliver_with_duplicates(conn, run)

    # Then the batch was closed once by this run (at the redelivery's instant) and posted once
    assert seen.executions == [seen.run.run_id] * 2
    assert seen.actions == [["settled", "ignored"], ["ignored"]]
    assert seen.run.state == "succeeded"
    assert seen.run.detail["closed_batch"]["id"] == str(batch.id)
    row = one(conn, "SELECT * FROM batches WHERE id = %s", (batch.id,))
    assert (row["status"], row["closed_by_run_id"]) == ("posted", seen.run.run_id)
    assert row["closed_at"] == run.now + timedelta(minutes=12)
    job = one(conn, "SELECT * FROM posting_jobs WHERE batch_id = %s", (batch.id,))
    assert (job["status"], job["attempts"], str(job["id"])) == ("succeeded", 1, seen.run.detail["posting_job"])


def test_auto_close_skips_a_batch_someone_else_closed(conn, utc):
    # Given a batch a user already closed by hand
    ws = uuid4()
    batch = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0))
    committed(conn, lambda: books.close_batch(conn, workspace_id=ws, batch_id=batch.id, now=utc(2027, 2, 12, 9, 0)))
    before = workspace_snapshot(conn, ws)

    # When the automatic close runs
    outcome = execute(conn, spec("batch.auto_close", ws, batch.id, datetime(2027, 2, 12, 18, 0)))

    # Then it is skipped as already closed and requests no posting
    assert outcome.state == "skipped" and outcome.outcome_code == "already_closed"
    assert workspace_snapshot(conn, ws) == before


def test_auto_close_does_not_close_before_the_scheduled_instant(conn, utc):
    # Given a batch scheduled to close at 18:00 UTC
    ws = uuid4()
    batch = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0))

    # When a scheduled run executes at 17:00 UTC
    outcome = execute(conn, spec("batch.auto_close", ws, batch.id, datetime(2027, 2, 12, 17, 0),
                                             now=utc(2027, 2, 12, 17, 0)))

    # Then it is skipped and the batch is still open
    assert outcome.state == "skipped" and outcome.outcome_code == "close_not_due"
    assert one(conn, "SELECT status FROM batches WHERE id = %s", (batch.id,))["status"] == "open"


def test_posting_failure_leaves_the_batch_closed_and_unposted_with_the_error_on_the_job(conn, utc):
    # Given a batch whose entries do not balance (100.00 against -40.00)
    ws = uuid4()
    batch = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0), amounts=("100.00", "-40.00"))

    # When the automatic close runs and its posting job starts after commit
    outcome = execute(conn, spec("batch.auto_close", ws, batch.id, datetime(2027, 2, 12, 18, 0)))

    # Then the close itself succeeded (the refusal belongs to the posting job)
    assert outcome.state == "succeeded"
    # And the job failed with the error while the batch stays closed and unposted
    job = one(conn, "SELECT * FROM posting_jobs WHERE batch_id = %s", (batch.id,))
    assert job["status"] == "failed"
    assert "does not balance" in job["error"] and "60.00" in job["error"]
    row = one(conn, "SELECT status, posted_at FROM batches WHERE id = %s", (batch.id,))
    assert (row["status"], row["posted_at"]) == ("closed", None)
    assert {e["posted"] for e in rows(conn, "SELECT posted FROM ledger_entries WHERE batch_id = %s", (batch.id,))} \
        == {False}


def test_a_failed_posting_job_can_be_retried(conn, utc):
    # Given a balanced batch and a posting hook (the general-ledger hand-off) that fails
    ws = uuid4()
    batch = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0))
    calls = []

    def unavailable_ledger(hook_conn, hook_batch, entries):
        calls.append((hook_batch.id, len(entries)))
        raise RuntimeError("general ledger unavailable")

    run = spec("batch.auto_close", ws, batch.id, datetime(2027, 2, 12, 18, 0),
               services={"posting_hook": unavailable_ledger})

    # When the automatic close runs and its posting job fails in the hook
    outcome = execute(conn, run)
    job_id = outcome.detail["posting_job"]
    failed = committed(conn, lambda: get_posting_job(conn, workspace_id=ws, job_id=job_id))

    # Then the job is failed with the hook's error and the batch is closed, unposted
    assert calls == [(batch.id, 2)]
    assert (failed.status, failed.error) == ("failed", "RuntimeError: general ledger unavailable")
    assert one(conn, "SELECT status FROM batches WHERE id = %s", (batch.id,))["status"] == "closed"

    # When the job is run again once the ledger is back
    status = run_posting_job(conn, failed.id, utc(2027, 2, 12, 19, 0), workspace_id=ws)

    # Then it succeeded on its second attempt and the batch is posted
    retried = committed(conn, lambda: get_posting_job(conn, workspace_id=ws, job_id=job_id))
    assert status == "succeeded"
    assert (retried.status, retried.attempts, retried.error) == ("succeeded", 2, None)
    row = one(conn, "SELECT status, posted_at FROM batches WHERE id = %s", (batch.id,))
    assert (row["status"], row["posted_at"]) == ("posted", utc(2027, 2, 12, 19, 0))


def test_the_posting_sweep_starts_unstarted_jobs_every_fifth_minute_and_leaves_failed_ones(conn, utc):
    # Given a closed batch whose posting job was never started (its callback was lost) and an
    # unbalanced one whose posting failed
    ws = uuid4()
    lost = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0))
    unbalanced = standalone_batch(conn, ws, close_at=utc(2027, 2, 12, 18, 0), amounts=("10.00", "-9.00"))
    execute(conn, spec("batch.auto_close", ws, lost.id, datetime(2027, 2, 12, 18, 0),
                       services={"posting": lambda **job: None}))
    execute(conn, spec("batch.auto_close", ws, unbalanced.id, datetime(2027, 2, 12, 18, 0)))
    registry = WorkKindRegistry()
    register(registry)

    # When the accounting maintenance runs at 18:04 (not a sweep minute), then at 18:05
    quiet = run_maintenance(conn, registry, "accounting", utc(2027, 2, 12, 18, 4))
    swept = run_maintenance(conn, registry, "accounting", utc(2027, 2, 12, 18, 5))
    again = run_maintenance(conn, registry, "accounting", utc(2027, 2, 12, 18, 10))

    # Then only the 18:05 sweep started the lost job, once; the failed job waits for a retry
    assert quiet == {"posting.sweep": None}
    # (failed_waiting counts every workspace's failed jobs nobody retried: the alarm's metric)
    waiting = swept["posting.sweep"].pop("failed_waiting")
    assert swept == {"posting.sweep": {"started": 1, "succeeded": 1}}
    assert again["posting.sweep"].pop("failed_waiting") == waiting >= 1
    assert again == {"posting.sweep": {"started": 0}}
    jobs = {r["batch_id"]: r for r in rows(conn, "SELECT * FROM posting_jobs WHERE workspace_id = %s", (ws,))}
    assert (jobs[lost.id]["status"], jobs[lost.id]["attempts"]) == ("succeeded", 1)
    assert (jobs[unbalanced.id]["status"], jobs[unbalanced.id]["attempts"]) == ("failed", 1)


# --------------------------------------------------------------------------- reconciliation.sweep


def test_reconciliation_matches_by_amount_account_and_date_window_or_reference(conn, utc):
    # Given posted bank entries and one entry still in an open (unposted) batch
    ws = uuid4()
    now = utc(2027, 3, 25, 6, 0)
    in_window, by_reference, too_far = posted_batch(conn, ws, [
        ("bank", "100.00", date(2027, 3, 10), None),
        ("bank", "250.00", date(2027, 3, 1), "INV-7"),
        ("bank", "75.00", date(2027, 3, 10), None),
    ], now=now)
    open_batch = committed(conn, lambda: books.create_batch(conn, workspace_id=ws, name="Open", now=now))
    add_balanced(conn, ws, open_batch.id, "60.00", date(2027, 3, 10))
    # And bank lines: two matchable, three not
    lines = committed(conn, lambda: [
        books.add_bank_line(conn, workspace_id=ws, bank_account="bank", amount=a, booked_on=d, reference=r)
        for a, d, r in [("100.00", date(2027, 3, 12), None),       # amount + within 3 days
                        ("250.00", date(2027, 3, 20), "INV-7"),    # amount + reference, outside window
                        ("75.00", date(2027, 3, 20), None),        # amount but 10 days away
                        ("60.00", date(2027, 3, 10), None),        # entry not posted
                        ("100.01", date(2027, 3, 10), None)]])     # amount differs
    other_account = committed(conn, lambda: books.add_bank_line(
        conn, workspace_id=ws, bank_account="bank-2", amount="100.00", booked_on=date(2027, 3, 10)))
    run = spec("reconciliation.sweep", ws, None, datetime(2027, 3, 25, 7, 0))

    # When the sweep runs
    outcome = execute(conn, run)

    # Then two lines were matched and four remain unmatched
    assert outcome.state == "succeeded"
    assert (outcome.detail["matched"], outcome.detail["unmatched"]) == (2, 4)
    # And both sides of each match are marked
    matched = {r["id"]: r for r in rows(conn, "SELECT * FROM bank_lines WHERE workspace_id = %s", (ws,))}
    assert matched[lines[0].id]["matched_entry_id"] == in_window.id
    assert matched[lines[1].id]["matched_entry_id"] == by_reference.id
    assert matched[lines[0].id]["reconciled_by_run_id"] == outcome.run_id
    assert all(matched[x.id]["matched_entry_id"] is None for x in (*lines[2:], other_account))
    entries = {r["id"]: r for r in rows(conn, "SELECT * FROM ledger_entries WHERE workspace_id = %s", (ws,))}
    assert entries[in_window.id]["reconciled_by_bank_line_id"] == lines[0].id
    assert entries[by_reference.id]["reconciled_by_bank_line_id"] == lines[1].id
    assert entries[too_far.id]["reconciled_by_bank_line_id"] is None


def test_reconciliation_delivered_again_and_again_matches_once(conn, utc):
    # Given one posted entry and one bank line that match
    ws = uuid4()
    now = utc(2027, 3, 25, 6, 0)
    (entry,) = posted_batch(conn, ws, [("bank", "42.50", date(2027, 3, 10), None)], now=now)
    line = committed(conn, lambda: books.add_bank_line(conn, workspace_id=ws, bank_account="bank", amount="42.50",
                                                       booked_on=date(2027, 3, 11)))
    run = spec("reconciliation.sweep", ws, None, datetime(2027, 3, 25, 7, 0))

    # When the run is delivered in a batch that dies after the handler ran, twice in the
    # redelivered batch, and once more after it settled
    seen = deliver_with_duplicates(conn, run)

    # Then one match was made, by this run, and the run reports it
    assert seen.executions == [seen.run.run_id] * 2
    assert seen.actions == [["settled", "ignored"], ["ignored"]]
    assert (seen.run.state, seen.run.detail) == ("succeeded", {"matched": 1, "unmatched": 0, "window_days": 3})
    matched = one(conn, "SELECT matched_entry_id, reconciled_by_run_id FROM bank_lines WHERE id = %s", (line.id,))
    assert (matched["matched_entry_id"], matched["reconciled_by_run_id"]) == (entry.id, seen.run.run_id)


def test_reconciliation_with_no_unreconciled_lines_is_skipped(conn):
    # Given a workspace without bank lines
    ws = uuid4()

    # When the sweep runs
    outcome = execute(conn, spec("reconciliation.sweep", ws, None, datetime(2027, 3, 25, 7)))

    # Then there was nothing to reconcile
    assert outcome.state == "skipped" and outcome.outcome_code == "nothing_to_reconcile"


# --------------------------------------------------------------------------- billing.prepare


def test_billing_delivered_again_and_again_prepares_one_draft(conn):
    # Given a monthly plan next billing on 5 March
    ws = uuid4()
    plan = committed(conn, lambda: books.create_billing_plan(
        conn, workspace_id=ws, customer="Acme", amount="99.00", currency="eur", interval_months=1,
        first_bill_date=date(2027, 3, 5)))
    run = spec("billing.prepare", ws, None, datetime(2027, 3, 1, 6, 0))

    # When the run is delivered in a batch that dies after the handler ran, twice in the
    # redelivered batch, and once more after it settled
    seen = deliver_with_duplicates(conn, run)

    # Then one draft exists, the run reports it, and the plan advanced once
    assert seen.executions == [seen.run.run_id] * 2
    assert seen.actions == [["settled", "ignored"], ["ignored"]]
    assert seen.run.state == "succeeded"
    assert seen.run.detail["prepared"] == 1 and seen.run.detail["through"] == "2027-03-08"
    drafts = rows(conn, "SELECT * FROM draft_invoices WHERE billing_plan_id = %s", (plan.id,))
    assert [(d["billing_date"], d["amount"], d["currency"], d["status"], d["prepared_by_run_id"]) for d in drafts] \
        == [(date(2027, 3, 5), Decimal("99.00"), "EUR", "draft", seen.run.run_id)]
    assert one(conn, "SELECT next_bill_date FROM billing_plans WHERE id = %s", (plan.id,))["next_bill_date"] \
        == date(2027, 4, 5)


def test_billing_clamps_month_ends_and_returns_to_the_anchor_day(conn):
    # Given a monthly plan anchored on 31 January
    ws = uuid4()
    plan = committed(conn, lambda: books.create_billing_plan(
        conn, workspace_id=ws, customer="Acme", amount="10.00", currency="USD", interval_months=1,
        first_bill_date=date(2027, 1, 31)))

    # When three monthly preparations run (each its own run), late in January, February and March
    outcomes = [execute(conn, spec("billing.prepare", ws, plan.id, datetime(2027, m, d, 6, 0)))
                for m, d in [(1, 25), (2, 22), (3, 25)]]

    # Then the drafts fall on 31 Jan, 28 Feb and 31 Mar, and the next bill is on 30 April
    assert all(o.state == "succeeded" for o in outcomes)
    dates = [r["billing_date"] for r in rows(
        conn, "SELECT billing_date FROM draft_invoices WHERE billing_plan_id = %s ORDER BY billing_date", (plan.id,))]
    assert dates == [date(2027, 1, 31), date(2027, 2, 28), date(2027, 3, 31)]
    assert one(conn, "SELECT next_bill_date FROM billing_plans WHERE id = %s", (plan.id,))["next_bill_date"] \
        == date(2027, 4, 30)


def test_billing_never_duplicates_a_draft_for_the_same_plan_and_date(conn):
    # Given a plan whose 5 March draft was prepared, then whose next bill date was set back to 5 March
    ws = uuid4()
    plan = committed(conn, lambda: books.create_billing_plan(
        conn, workspace_id=ws, customer="Acme", amount="99.00", currency="EUR", interval_months=3,
        first_bill_date=date(2027, 3, 5)))
    execute(conn, spec("billing.prepare", ws, None, datetime(2027, 3, 1, 6, 0)))
    committed(conn, lambda: conn.execute("UPDATE billing_plans SET next_bill_date = '2027-03-05' WHERE id = %s",
                                         (plan.id,)))

    # When another run prepares billing
    outcome = execute(conn, spec("billing.prepare", ws, None, datetime(2027, 3, 2, 6, 0)))

    # Then no second draft was made and the plan moved on by its three-month interval
    assert outcome.state == "skipped" and outcome.outcome_code == "nothing_due"
    assert len(rows(conn, "SELECT id FROM draft_invoices WHERE billing_plan_id = %s", (plan.id,))) == 1
    assert one(conn, "SELECT next_bill_date FROM billing_plans WHERE id = %s", (plan.id,))["next_bill_date"] \
        == date(2027, 6, 5)


# --------------------------------------------------------------------------- tenant isolation


def test_handlers_for_one_workspace_never_touch_another_workspaces_rows(conn, utc):
    # Given two workspaces with the same kind of data: books, a closable batch, bank data and a plan
    ws_a, ws_b = uuid4(), uuid4()
    now = utc(2027, 2, 1, 0, 10)
    subjects = {}
    for ws in (ws_a, ws_b):
        b = monthly_books(conn, ws, periods=6)
        add_balanced(conn, ws, b.recurring.active_batch_id, "30.00", date(2027, 1, 9))
        batch = standalone_batch(conn, ws, close_at=utc(2027, 1, 31, 18, 0))
        plan = committed(conn, lambda ws=ws: books.create_billing_plan(
            conn, workspace_id=ws, customer="Acme", amount="5.00", currency="EUR", interval_months=1,
            first_bill_date=date(2027, 2, 3)))
        subjects[ws] = (b.recurring.id, batch.id, plan.id)
    # And B has a posted bank entry that would match A's bank line, were workspaces ignored
    posted_batch(conn, ws_b, [("bank", "100.00", date(2027, 1, 30), None)], now=now)
    committed(conn, lambda: books.add_bank_line(conn, workspace_id=ws_a, bank_account="bank", amount="100.00",
                                                booked_on=date(2027, 1, 30)))
    b_before = workspace_snapshot(conn, ws_b)
    a_roll, a_batch, a_plan = subjects[ws_a]
    b_roll, b_batch, b_plan = subjects[ws_b]

    # When every handler runs for workspace A, with A's subjects and then with B's subjects
    own = [execute(conn, spec(kind, ws_a, subject, FEB_1, now=now)) for kind, subject in [
        ("batch.roll", a_roll), ("batch.auto_close", a_batch), ("reconciliation.sweep", None),
        ("billing.prepare", None)]]
    foreign = [execute(conn, spec(kind, ws_a, subject, FEB_1, now=now)) for kind, subject in [
        ("batch.roll", b_roll), ("batch.auto_close", b_batch), ("billing.prepare", b_plan)]]

    # Then A's own work happened (B's entry did not match A's line)
    assert [o.state for o in own] == ["succeeded"] * 4
    assert (own[2].detail["matched"], own[2].detail["unmatched"]) == (0, 1)
    assert own[3].detail["prepared"] == 1
    # And B's subjects were invisible to A
    assert [(o.state, o.outcome_code) for o in foreign] == [
        ("failed", "recurring_batch_not_found"), ("failed", "batch_not_found"), ("failed", "billing_plan_not_found")]
    assert [o.error.split(" ")[0:2] for o in foreign] == [["recurring", "batch"], ["batch", str(b_batch)],
                                                            ["billing", "plan"]]
    # And not one of B's rows changed
    assert workspace_snapshot(conn, ws_b) == b_before


def test_a_posting_job_is_invisible_from_another_workspace(conn, utc):
    # Given a closed batch of workspace B with a pending posting job
    ws_b = uuid4()
    batch = standalone_batch(conn, ws_b, close_at=utc(2027, 2, 12, 18, 0))
    run = spec("batch.auto_close", ws_b, batch.id, datetime(2027, 2, 12, 18, 0),
               services={"posting": lambda **kwargs: None})  # a starter that does not run the job now
    job_id = execute(conn, run).detail["posting_job"]

    # When workspace A tries to run B's posting job
    # Then the job is not found and B's batch is not posted
    with pytest.raises(NotFound):
        run_posting_job(conn, job_id, utc(2027, 2, 12, 19, 0), workspace_id=uuid4())
    assert one(conn, "SELECT status FROM posting_jobs WHERE id = %s", (job_id,))["status"] == "pending"
    assert one(conn, "SELECT status FROM batches WHERE id = %s", (batch.id,))["status"] == "closed"
    # And run in its own workspace it posts
    assert run_posting_job(conn, job_id, utc(2027, 2, 12, 19, 0), workspace_id=ws_b) == "succeeded"

