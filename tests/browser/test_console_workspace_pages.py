"""A delivery's opt-outs, the suppression list and the workspace's closures in a real
browser: the owner invites a recipient back from the keyboard, an admin closes a date and
reopens it (declining first), another workspace's member gets the API's 404 by direct
address, and the pages fit a 360 px screen and pass axe-core's check."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, delivery, page  # noqa: F401
from timekeeper.db.connection import connect


@pytest.fixture(scope="module")
def opted_out(db_url, server, delivery) -> dict[str, Any]:  # noqa: F811
    """The Berlin admin opted out of the analyst's delivery; an address is suppressed."""
    workspace = server.stack.platform.first_workspace
    with connect(db_url) as conn, conn.transaction():
        conn.execute("INSERT INTO mail_opt_outs (workspace_id, schedule_id, user_id, run_id, opted_out_at) "
                     "VALUES (%s, %s, %s, %s, %s)", (workspace, delivery["schedule"]["id"], delivery["admin"],
                                                     uuid.uuid4(), datetime.now(UTC)))
        conn.execute("INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, "
                     "suppressed_at) VALUES (%s, 'gone@example.test', 'bounced', 'ses-1', %s)",
                     (workspace, datetime.now(UTC)))
    return delivery


def test_the_owner_invites_a_recipient_back_from_the_keyboard(page, server, opted_out):  # noqa: F811
    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("link", name="Deliveries").first.click()
    page.get_by_role("link", name="Invoices for the team").click()
    page.get_by_role("link", name="Opt-outs").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Opt-outs of Invoices for the team"
    button = page.get_by_role("button", name=f"Invite {opted_out['admin']} back")
    # Declining the confirmation changes nothing; accepting it from the keyboard invites
    page.once("dialog", lambda dialog: dialog.dismiss())
    button.focus()
    page.keyboard.press("Enter")
    assert button.is_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    button.focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**?done=invited*")
    assert "is invited back" in page.get_by_role("status").inner_text()
    auth = {"Authorization": f"Bearer dev:{opted_out['analyst']}:{server.stack.platform.first_workspace}:"
                             "queries:read,queries:write"}
    (item,) = requests.get(f"{server.base_url}/query-schedules/{opted_out['schedule']['id']}/opt-outs",
                           headers=auth, timeout=30).json()["items"]
    assert item["resubscribe_invited_by"] == opted_out["analyst"]
    # The suppression list is one link away in the Deliveries navigation
    page.get_by_role("navigation", name="Deliveries").get_by_role("link", name="Suppressed addresses").click()
    assert "gone@example.test" in page.locator("table").inner_text()


def test_the_message_preview_shows_the_message_styled_as_sent_without_a_policy_violation(
        page, server, opted_out):  # noqa: F811
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("link", name="Deliveries").first.click()
    page.get_by_role("link", name="Invoices for the team").click()
    page.get_by_role("link", name="Preview the message").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Message preview"
    # The framed HTML part shows the download button with the message's own inline style
    button = page.frame_locator("iframe.message").get_by_role("link", name="Download the file")
    assert button.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(31, 111, 235)"
    assert "Unsubscribe from" in page.frame_locator("iframe.message").locator("body").inner_text()
    # And nothing was refused by either page's policy
    assert refused == []


def test_an_admin_closes_a_date_and_reopens_it(page, server):  # noqa: F811
    _sign_in_as(page, server, "Berlin admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Closures").click()
    page.get_by_label("Date (local, YYYY-MM-DD)").fill("2031-12-24")
    page.get_by_label("Reason (optional, at most 200 characters)").fill("Christmas <Eve>")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Close the date").click()
    page.wait_for_url("**?done=added*")
    assert page.get_by_role("status").inner_text().startswith("2031-12-24 is closed")
    assert "Christmas <Eve>" in page.locator("table").inner_text()
    reopen = page.get_by_role("button", name="Reopen 2031-12-24")
    page.once("dialog", lambda dialog: dialog.dismiss())
    reopen.click()
    assert reopen.is_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    reopen.click()
    page.wait_for_url("**?done=removed*")
    assert page.get_by_role("status").inner_text().startswith("2031-12-24 is open again")
    assert page.get_by_role("button", name="Reopen 2031-12-24").count() == 0


def test_an_admin_takes_a_suppressed_address_off_the_list_from_the_keyboard(browser, server, db_url):
    from axe_playwright_python.sync_playwright import Axe

    workspace = server.stack.platform.first_workspace
    with connect(db_url) as conn, conn.transaction():
        conn.execute("INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, "
                     "suppressed_at) VALUES (%s, 'full-mailbox@example.test', 'bounced', 'ses-2', %s) "
                     "ON CONFLICT DO NOTHING", (workspace, datetime.now(UTC)))
    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    try:
        _sign_in_as(tab, server, "Berlin admin")
        tab.get_by_role("navigation", name="Main").get_by_role("link", name="Deliveries").click()
        tab.get_by_role("navigation", name="Deliveries").get_by_role("link", name="Suppressed addresses").click()
        tab.wait_for_url("**/console/mail-suppressions")  # the page has loaded before it is measured
        tab.get_by_role("button", name="Remove full-mailbox@example.test from the suppression list").wait_for()
        # The page with its Remove forms fits 360 px and passes the accessibility check
        assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
        bad = [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious", "critical")]
        assert bad == []
        reason = tab.get_by_label("Why full-mailbox@example.test may be sent to again")
        button = tab.get_by_role("button", name="Remove full-mailbox@example.test from the suppression list")
        # Declining the confirmation changes nothing; accepting it from the keyboard removes the address
        reason.fill("the mailbox was full; fixed")
        tab.once("dialog", lambda dialog: dialog.dismiss())
        button.focus()
        tab.keyboard.press("Enter")
        assert button.is_visible()
        tab.once("dialog", lambda dialog: dialog.accept())
        button.focus()
        tab.keyboard.press("Enter")
        tab.wait_for_url("**?done=removed")
        assert "off the suppression list" in tab.get_by_role("status").inner_text()
        suppressed = tab.get_by_role("table", name="Suppressed addresses, oldest first")
        assert suppressed.count() == 0 or "full-mailbox@example.test" not in suppressed.inner_text()
        # The admin reads who took it off, when and why; the page still fits and passes the check
        recent = tab.locator("table", has=tab.locator("caption", has_text="removals, newest first"))
        assert "the mailbox was full; fixed" in recent.inner_text()
        assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
        bad = [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious", "critical")]
        assert bad == []
        auth = {"Authorization": f"Bearer dev:{server.stack.platform.users['admin']}:{workspace}:workspace:admin"}
        removals = requests.get(f"{server.base_url}/mail-suppressions/removals", headers=auth, timeout=30).json()
        assert [(r["address"], r["reason"]) for r in removals["items"]][:1] == [
            ("full-mailbox@example.test", "the mailbox was full; fixed")]
    finally:
        context.close()


def test_another_workspace_s_member_gets_the_api_s_refusal(page, server, opted_out):  # noqa: F811
    _sign_in_as(page, server, "Sydney admin")
    response = page.goto(f"{server.base_url}/console/deliveries/{opted_out['schedule']['id']}/opt-outs")
    assert response.status == 404
    assert page.get_by_role("heading", level=1).inner_text() == "Not found"
    page.goto(f"{server.base_url}/console/mail-suppressions")
    assert "gone@example.test" not in page.content()


def test_the_pages_fit_a_360_px_screen_and_pass_the_accessibility_check(browser, server, opted_out):
    from axe_playwright_python.sync_playwright import Axe

    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    found = {}
    try:
        _sign_in_as(tab, server, "Berlin analyst")
        for path in (f"/console/deliveries/{opted_out['schedule']['id']}/opt-outs", "/console/mail-suppressions",
                     "/console/closures", "/console/deliveries",
                     f"/console/deliveries/{opted_out['schedule']['id']}/preview"):
            assert tab.goto(f"{server.base_url}{path}").status == 200, path
            wide = tab.evaluate("[...document.querySelectorAll('body *')]"
                                ".filter(e => e.getBoundingClientRect().right > 360).map(e => e.tagName)")
            assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, (path, wide)
            bad = [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious",
                                                                                              "critical")]
            if bad:
                found[path] = bad
    finally:
        context.close()
    assert found == {}


def test_the_invited_recipient_follows_the_notice_and_accepts_from_the_keyboard(page, server, opted_out):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe

    # Given the owner's invitation back (the first test of this module invites the Berlin admin)
    auth = {"Authorization": f"Bearer dev:{opted_out['analyst']}:{server.stack.platform.first_workspace}:"
                             "queries:read,queries:write"}
    invite = requests.post(f"{server.base_url}/query-schedules/{opted_out['schedule']['id']}/opt-outs/"
                           f"{opted_out['admin']}/invitation", headers=auth, timeout=30)
    assert invite.status_code == 200, invite.text
    # When the recipient opens their notices and follows the invitation's link
    _sign_in_as(page, server, "Berlin admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Notices").click()
    page.get_by_role("link", name="See the invitation and accept it").first.click()
    assert page.get_by_role("heading", level=1).inner_text() == "Invoices for the team"
    bad = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert bad == []
    page.set_viewport_size({"width": 360, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= 360
    # Then accepting from the keyboard (after the confirmation) subscribes them again
    button = page.get_by_role("button", name="Accept the invitation")
    page.once("dialog", lambda dialog: dialog.accept())
    button.focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**?done=accepted")
    assert page.get_by_role("status").inner_text() == "You receive its messages again."
    # And the owner's opt-out list no longer has them
    items = requests.get(f"{server.base_url}/query-schedules/{opted_out['schedule']['id']}/opt-outs",
                         headers=auth, timeout=30).json()["items"]
    assert opted_out["admin"] not in [item["user_id"] for item in items]


def test_a_broken_download_link_is_a_page_for_the_browser(page, server):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe

    response = page.goto(f"{server.base_url}/downloads/not-a-link")
    assert response.status == 403 and response.headers["content-type"].startswith("text/html")
    assert page.get_by_role("heading", level=1).inner_text() == "This link is not valid"
    bad = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert bad == []
    # A script asking for anything keeps the JSON error
    assert requests.get(f"{server.base_url}/downloads/not-a-link", timeout=30).json()["code"] == "link_invalid"
