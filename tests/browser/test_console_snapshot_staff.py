"""Snapshot staff in a real browser: a range backfill chosen by workspace name, previewed,
requested and shown progressing as admission moves it on; each page fits a 360 px screen
and passes axe-core's check."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import psycopg

from tests.api.conftest import enrol
from tests.browser.test_console_pages import WIDTH_PHONE, page  # noqa: F401 - the page fixture
from timekeeper.snapshots import ledger


def _sign_in_as_staff(tab: Any, server: Any) -> None:
    workspace = str(server.stack.platform.first_workspace)
    enrol(server.database_url, "staff-1", workspace)  # staff are members of the workspace they sign in to
    tab.goto(f"{server.base_url}/console/sign-in")
    tab.get_by_label("User id").fill("staff-1")
    tab.get_by_label("Workspace (UUID)").fill(workspace)
    for role in ("schedules:read", "schedules:write", "schedules:run", "schedules:admin", "queries:read",
                 "queries:write", "reports:read", "workspace:admin"):
        tab.get_by_label(role, exact=True).uncheck()
    tab.get_by_role("button", name="Sign in").click()


def _fits_and_passes_axe(tab: Any, what: str) -> None:
    from axe_playwright_python.sync_playwright import Axe

    tab.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    wide = tab.evaluate("[...document.querySelectorAll('body *')]"
                        ".filter(e => e.getBoundingClientRect().right > 360)"
                        ".map(e => e.tagName + ':' + Math.round(e.getBoundingClientRect().right) + ':' + "
                        "(e.textContent || '').slice(0, 40))")
    assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, (what, wide)
    bad = [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert bad == [], (what, bad)
    tab.set_viewport_size({"width": 1280, "height": 800})


def test_staff_preview_request_and_follow_a_range_backfill(page, server):  # noqa: F811 - the fixture
    _sign_in_as_staff(page, server)
    page.get_by_role("link", name="Snapshots").click()
    # The periods page names the months never planned; the range form is one link away
    if page.locator("details.folded summary").count():  # the older months never planned, folded
        page.locator("details.folded summary").click()
    missing = [r for r in page.locator("table tbody tr").all() if "Missing" in r.inner_text()]
    assert missing, "the sample workspace has never-planned months"
    month = missing[-1].locator("td").nth(1).inner_text()
    kind = missing[-1].locator("td").nth(0).locator("[data-code]").first.get_attribute("data-code")
    name = page.locator("main p bdi").first.inner_text()  # the workspace, by name
    page.get_by_role("link", name="Request a range of months").click()
    _fits_and_passes_axe(page, "the range form")
    # Choose the workspace by its name, from the keyboard
    page.get_by_label("Find workspaces by name").fill(name[:6])
    page.get_by_role("button", name="Find").click()
    page.get_by_label(name).focus()
    page.keyboard.press("Space")
    page.get_by_label("Snapshot type").select_option(f"platform:{kind}")
    page.get_by_label("First month (YYYY-MM)").fill(month)
    page.get_by_label("Last month (YYYY-MM)").fill(month)
    page.get_by_label("Kind").select_option("backfill")
    page.get_by_label("Reason (recorded with every run)").fill("the auditors asked for it")
    page.get_by_role("button", name="Preview").click()
    # The preview says what would be planned, by workspace name, and records nothing
    assert "1 month would be planned, 0 refused" in page.get_by_role("status").inner_text()
    assert page.locator("table tbody tr").first.inner_text().startswith(name)
    _fits_and_passes_axe(page, "the preview")
    page.get_by_role("button", name="Request these 1 month").click()
    # The range's progress: waiting for admission, then admitted
    page.wait_for_url(re.compile(r".*/console/snapshots/ranges/[0-9a-f-]+$"))
    assert "waiting for admission: 1" in page.get_by_role("status").inner_text()
    _fits_and_passes_axe(page, "the progress")
    # Back returns to the preview, a GET page (no resubmission, nothing recorded), which now
    # refuses the month just requested; Forward leads to the progress again
    requested_url = page.url
    page.go_back()
    page.wait_for_url(re.compile(r".*/console/snapshots/ranges/preview\?.*"))
    assert "0 months would be planned, 1 refused" in page.get_by_role("status").first.inner_text()
    page.go_forward()
    page.wait_for_url(requested_url)
    with psycopg.connect(server.database_url) as conn, conn.transaction():
        ledger.admit(conn, owner="platform", now=datetime.now(UTC), cap=4, backfill_lane=1)
    page.get_by_role("link", name="Refresh").click()
    counts = page.get_by_role("status").inner_text()
    assert "waiting for admission: 0" in counts, counts
    progress_url = page.url
    # The month's own page shows the run with its requester and reason, and links it to its range
    page.locator("table tbody a").first.click()
    assert "the auditors asked for it" in page.locator("table").inner_text()
    assert page.get_by_role("link", name="a range request").get_attribute("href") in progress_url
    _fits_and_passes_axe(page, "the period")
    # The range page lists the request among the recent ones, and leads back to its progress
    page.goto(f"{server.base_url}/console/snapshots/ranges")
    page.locator("table").first.locator("tbody a").first.click()
    page.wait_for_url(progress_url)
    page.goto(f"{server.base_url}/console/snapshots/ranges")
    _fits_and_passes_axe(page, "the range page with its recent requests")
    # Every workspace's periods, the backfilled month among them
    page.goto(f"{server.base_url}/console/snapshots/staff?status=in_progress")
    assert name in page.locator("table").inner_text()
    _fits_and_passes_axe(page, "every workspace's periods")


def test_staff_read_a_failed_period_re_run_it_from_its_page_and_see_it_publish(page, server):  # noqa: F811
    _sign_in_as_staff(page, server)
    # Every workspace's failed periods: serve's sample has one, its failure named in words
    page.goto(f"{server.base_url}/console/snapshots/staff?status=failed")
    row = page.locator("table tbody tr", has_text="Self-test").first
    assert "Failed" in row.inner_text()
    row.locator("td").nth(2).locator("a").click()
    # The period's page: the failure's code and message, what it waits for, and a re-run on the page itself
    assert "a drill: all 1,000 rows were written, but version 1 of this month is set to fail its check" in \
        page.locator("table").inner_text()
    assert "Now: Failed" in page.locator("p.waits").inner_text()
    _fits_and_passes_axe(page, "the failed period")
    page.get_by_label("Reason to re-run this month").fill("the drill is over")
    page.get_by_role("button", name="Re-run this month").click()
    assert "Your request was recorded" in page.get_by_role("status").inner_text()
    assert "Now: Planned" in page.locator("p.waits").inner_text()
    # Admission (serve's dispatcher, run now rather than at the next minute) sends it; serve's worker runs it
    server.stack.dispatch_snapshots(datetime.now(UTC))
    for _ in range(60):
        page.reload()
        if "Published" in page.locator("table tbody tr").first.inner_text():
            break
        page.wait_for_timeout(500)
    newest = page.locator("table tbody tr").first.inner_text()
    assert "Published" in newest and "current" in newest and "the drill is over" in newest, newest
