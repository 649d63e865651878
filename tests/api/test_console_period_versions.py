"""The console's snapshot periods show a re-run beside the published version, and a
period's page lists every version with its attempts and failure code (in words)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

from tests.api.conftest import NOW, Caller
from tests.api.test_console import Browser
from timekeeper.platform.directory import create_workspace

CREATED = datetime(2026, 12, 15, tzinfo=UTC)


def _period_with_a_failed_rerun(conn, workspace_id) -> None:
    """February's aging of ``workspace_id``: version 1 published, version 2 (a staff
    re-run) failed for good after four retryable failures."""
    create_workspace(conn, name="Rerun club", timezone="Europe/Berlin", currency="EUR", now=CREATED,
                     workspace_id=workspace_id)
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, attempts,
                                   is_current, published_at, basis, created_at, updated_at)
        VALUES ('platform', 'ar_aging', %(w)s, %(p)s, 1, 'planned', 'published', 1, true, %(now)s, '{}', %(now)s,
                %(now)s)""", {"w": workspace_id, "p": date(2027, 2, 1), "now": NOW})
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, attempts, retryable_failures, failure_code, failure_message,
                                   created_at, updated_at)
        VALUES ('platform', 'ar_aging', %(w)s, %(p)s, 2, 'manual', 'totals corrected', 'staff-1', 'failed', 4, 4,
                'retries_exhausted', '4 retryable failures; the last: job_lost', %(now)s, %(now)s)""",
                 {"w": workspace_id, "p": date(2027, 2, 1), "now": NOW})


def test_the_periods_list_shows_a_failed_re_run_and_the_period_page_lists_every_version(console, conn):
    # Given a published February whose re-run failed, and a reader of the workspace
    caller = Caller(roles="snapshots:read")
    _period_with_a_failed_rerun(conn, caller.workspace_id)
    browser = Browser(console)
    browser.sign_in(caller, ("snapshots:read",))
    # When they open the snapshots page
    listing = browser.request("GET", "/console/snapshots")
    # Then February shows its published version and, beside it, the failed version 2
    assert listing["statusCode"] == 200
    html = listing["body"]
    link = "/console/snapshots/periods/platform/ar_aging/2027-02"
    assert f'href="{link}"' in html
    assert 'version 2 <span class="term" data-code="failed">Failed</span>' in html
    # And the period's page lists both versions, newest first, with attempts and the code in words
    page = browser.request("GET", link)
    assert page["statusCode"] == 200, page["body"]
    body = page["body"]
    assert body.index("totals corrected") < body.index("planned by the planner")
    assert "retries_exhausted" in body and "Failed four times" in body
    assert "4 retryable failures; the last: job_lost" in body
    # And each version's instants are in the workspace's zone with the UTC instant beside
    assert re.search(r"</time> <small>\(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)</small>", body), body


def test_a_malformed_period_is_refused_with_words(console, conn):
    caller = Caller(roles="snapshots:read")
    browser = Browser(console)
    browser.sign_in(caller, ("snapshots:read",))
    response = browser.request("GET", "/console/snapshots/periods/platform/ar_aging/2027-13")
    assert response["statusCode"] == 422 and "YYYY-MM" in response["body"]
