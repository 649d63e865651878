"""The notices page in a real browser: a paused schedule's notice is shown with its
reason and a link to the schedule, read from the keyboard, and the page fits a 360 px
screen."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, berlin, page  # noqa: F401
from timekeeper.db.connection import connect
from timekeeper.platform import notices
from timekeeper.schedules.notifications import Notice, enqueue_notifications


@pytest.fixture(scope="module")
def paused_notice(db_url, server, berlin) -> dict[str, Any]:  # noqa: F811
    """A notice to the Berlin admin (the schedule's owner): the schedule was paused."""
    now = datetime.now(UTC)
    with connect(db_url) as conn:
        with conn.transaction():
            enqueue_notifications(conn, [Notice(uuid.UUID(berlin["schedule"]["id"]), uuid.UUID(str(
                berlin["workspace"])), "accounting", "schedule_paused", f"browser:{uuid.uuid4()}",
                {"reason": "consecutive_failures", "failures": 5})], now=now)
        notices.tell_people(conn, now=now)
    return berlin


def _unread(server: Any, who: dict[str, Any]) -> int:
    auth = {"Authorization": f"Bearer dev:{who['admin']}:{who['workspace']}:schedules:read"}
    return requests.get(f"{server.base_url}/notices", headers=auth, timeout=30).json()["unread"]


def test_read_a_notice_from_the_keyboard(page, server, paused_notice):  # noqa: F811
    before = _unread(server, paused_notice)
    assert before >= 1
    _sign_in_as(page, server, "Berlin admin")
    nav = page.get_by_role("navigation", name="Main").get_by_role("link", name="Notices")
    assert f"({before} unread)" in nav.inner_text()
    nav.click()
    page.wait_for_url("**/console/notices")
    notice = page.locator("li.notice.unread").filter(has_text="Paused after five failures in a row").first
    assert "A schedule was paused" in notice.inner_text()
    # From the notice's link, Tab reaches its Mark as read button; Enter sends it
    notice.get_by_role("link", name="Open the schedule").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Mark as read"
    page.keyboard.press("Enter")
    page.wait_for_url("**?done=read")
    assert page.get_by_role("status").inner_text() == "Marked as read."
    assert _unread(server, paused_notice) == before - 1
    # The link opens the schedule's page
    page.locator("li.notice").filter(has_text="Paused after five failures in a row").first.get_by_role(
        "link", name="Open the schedule").click()
    page.wait_for_url(f"**/console/schedules/{paused_notice['schedule']['id']}")
    assert page.get_by_role("heading", level=1).inner_text() == "Nightly <sweep>"


def test_the_notices_pages_fit_a_360_px_screen(browser, server, paused_notice):
    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    try:
        _sign_in_as(tab, server, "Berlin admin")
        for path, heading in (("/console/notices", "Notices"), ("/console/ownerless", "Ownerless schedules"),
                              ("/console/posting-jobs", "Failed posting jobs")):
            tab.goto(f"{server.base_url}{path}")
            assert tab.get_by_role("heading", level=1).inner_text() == heading, path
            assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, path
    finally:
        context.close()
