"""The planner plans every expected month that has no version, whatever staff runs exist
(a backfill of a later month does not move its starting point); the period listing shows
every expected month, including the never-planned ones. Real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime

from tests.integration import test_snapshots as base
from tests.integration.test_snapshots import registry, runs, workspace
from timekeeper.snapshots import ledger
from timekeeper.snapshots.ledger import plan, request_run

db = base.db  # the ledger tests' fixture: a clean ledger per test


def test_a_backfill_of_the_later_missed_month_leaves_the_earlier_one_to_the_planner(db):
    # Given a workspace planned for December 2026, then a planner down through January and February
    ws = workspace(db)
    reg = registry()
    plan(db, reg, now=datetime(2027, 1, 2, tzinfo=UTC))
    aging = reg.get("platform", "ar_aging")
    # And staff backfilled only February, the later of the two missed months
    request_run(db, snapshot_type=aging, workspace_id=ws, period=date(2027, 2, 1), mode="backfill",
                reason="planner outage", requested_by="staff", now=datetime(2027, 3, 3, tzinfo=UTC))
    # When the planner returns
    result = plan(db, reg, now=datetime(2027, 3, 3, 1, tzinfo=UTC))
    # Then January is planned too (version 1, by the planner), and nothing is planned twice
    got = {(r.period, r.version): r.mode for r in runs(db, snapshot_type="ar_aging", workspace_id=ws)}
    assert got == {(date(2026, 12, 1), 1): "planned", (date(2027, 1, 1), 1): "planned",
                   (date(2027, 2, 1), 1): "backfill"}
    # January and February of each enabled type, but February's ar_aging, which was backfilled
    assert result.planned == 2 * len(reg.enabled()) - 1
    assert plan(db, reg, now=datetime(2027, 3, 3, 2, tzinfo=UTC)).planned == 0


def test_an_earlier_month_without_runs_is_planned_though_later_months_have_runs(db):
    # Given every month planned, then January's runs gone (removed by hand, with the planner's
    # watermark over them, as anything that removes ledger rows must shrink it)
    ws = workspace(db)
    reg = registry()
    plan(db, reg, now=datetime(2027, 3, 1, 12, tzinfo=UTC))
    db.execute("DELETE FROM snapshot_runs WHERE period = '2027-01-01'")
    db.execute("DELETE FROM snapshot_planner_watermarks")
    # When the planner passes again
    plan(db, reg, now=datetime(2027, 3, 1, 13, tzinfo=UTC))
    # Then January is planned again
    assert date(2027, 1, 1) in {r.period for r in runs(db, snapshot_type="ar_aging", workspace_id=ws)}


def test_the_period_listing_shows_every_expected_month_including_never_planned_ones_page_by_page(db):
    # Given a workspace created in December 2026 whose January was never planned (December and February were)
    ws = workspace(db)
    reg = registry(environment="production")  # membership_counts and ar_aging
    plan(db, reg, now=datetime(2027, 3, 1, 12, tzinfo=UTC))
    db.execute("DELETE FROM snapshot_runs WHERE period = '2027-01-01'")
    # When the periods are listed two at a time
    pages, after = [], None
    while True:
        page = ledger.page_periods(db, workspace_id=ws,
                                   now=datetime(2027, 3, 5, tzinfo=UTC), types=reg.enabled(), after=after, limit=2)
        pages.append([(p.snapshot_type, p.period, p.status, p.chosen_version) for p in page.items])
        if page.next is None:
            break
        after = page.next
    # Then every expected month of each type is listed once, newest first per type, January as missing
    assert pages == [
        [("membership_counts", date(2027, 2, 1), "planned", 1),
         ("membership_counts", date(2027, 1, 1), "missing", None)],
        [("membership_counts", date(2026, 12, 1), "planned", 1), ("ar_aging", date(2027, 2, 1), "planned", 1)],
        [("ar_aging", date(2027, 1, 1), "missing", None), ("ar_aging", date(2026, 12, 1), "planned", 1)]]
    # And a missing month is overdue once its month has ended 24 hours ago
    page = ledger.page_periods(db, workspace_id=ws, now=datetime(2027, 3, 5, tzinfo=UTC),
                               types=reg.enabled(), snapshot_type="ar_aging")
    missing = [p for p in page.items if p.status == "missing"]
    assert [(p.period, p.overdue, p.run_id) for p in missing] == [(date(2027, 1, 1), True, None)]
