"""Making a delivery in a real browser against ``serve``: the Berlin analyst creates a weekly
XLSX delivery of a saved query to two members while a third, who may not read it, is
refused as they are added; previews the rule and the message; creates it; edits its
subject (the changes list it); deletes it. A viewer is offered no "New delivery". The new
pages fit a 360 px screen and pass axe-core's check."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, delivery, page  # noqa: F401


@pytest.fixture(scope="module")
def people(server) -> dict[str, str]:
    return server.stack.platform.users


def _add(tab: Any, user_id: str) -> None:
    tab.get_by_label("Add a recipient").select_option(value=user_id)
    tab.get_by_role("button", name="Add recipient").click()


def test_an_analyst_makes_edits_and_deletes_a_weekly_xlsx_delivery(page, server, delivery, people):  # noqa: F811
    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("link", name="Deliveries").first.click()
    page.get_by_role("link", name="New delivery").click()
    assert page.get_by_role("heading", level=1).inner_text() == "New delivery"
    page.get_by_label("Name", exact=True).fill("Weekly open invoices")
    source = page.locator('#d-source option[value^="query:"]').first.get_attribute("value")
    page.get_by_label("Source").select_option(value=source)
    page.get_by_label("Format").select_option(value="xlsx")
    # Two members who may read the query are added; a third who may not is refused, named
    _add(page, people["viewer"])
    assert "Vic Viewer was added" in page.get_by_role("status").inner_text()
    _add(page, people["no_email"])
    _add(page, people["multi"])
    refusal = page.get_by_role("alert").inner_text()
    assert "Max Both" in refusal and "may not read the query" in refusal
    assert page.get_by_label("Add a recipient").get_attribute("aria-invalid") == "true"
    # Enter in a field shows the form again and removes no one
    with page.expect_navigation():
        page.get_by_label("Name", exact=True).press("Enter")
    recipients = page.locator("ul.recipients").inner_text()
    assert "Vic Viewer" in recipients and "Noor Nomail" in recipients and "Max Both" not in recipients
    # The rule (every Monday at 09:00 by default) and the message, previewed
    page.get_by_role("button", name="Preview the rule").click()
    assert "Monday" in page.locator("section.preview").first.inner_text()
    page.get_by_label("Subject").fill("Open invoices for {{ recipient_name }}")
    page.get_by_label("Preview the message of").select_option(value=people["viewer"])
    page.get_by_role("button", name="Preview the message").click()
    assert "Open invoices for Vic Viewer" in page.locator("section.preview").last.inner_text()
    # Create
    page.get_by_role("button", name="Create delivery").click()
    page.wait_for_url("**?done=created")
    assert page.get_by_role("heading", level=1).inner_text() == "Weekly open invoices"
    facts = page.locator("dl.facts").inner_text()
    assert "XLSX" in facts and "Vic Viewer" in facts and "Noor Nomail" in facts
    # Edit the subject: the changes list it
    page.get_by_role("link", name="Edit").click()
    page.get_by_label("Subject").fill("Invoices still open, {{ run_date }}")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url("**?done=updated")
    assert "subject_template" in page.locator("ul.changes").inner_text()
    # Delete, after reading what is kept
    page.get_by_role("link", name="Delete").click()
    assert "What is kept, for audit" in page.locator("main").inner_text()
    page.get_by_role("button", name="Delete this delivery").click()
    page.wait_for_url("**/console/deliveries?done=deleted")
    assert page.get_by_role("link", name="Weekly open invoices").count() == 0


def test_a_viewer_is_offered_no_new_delivery(page, server):  # noqa: F811
    _sign_in_as(page, server, "Berlin viewer")
    page.get_by_role("link", name="Deliveries").first.click()
    assert page.get_by_role("heading", level=1).inner_text() == "Deliveries"
    assert page.get_by_role("link", name="New delivery").count() == 0


def test_the_new_pages_fit_360_px_and_pass_axe(page, server, delivery):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe

    _sign_in_as(page, server, "Berlin analyst")
    schedule_id = delivery["schedule"]["id"]
    found = {}
    for path in ("/console/deliveries/new", f"/console/deliveries/{schedule_id}/edit",
                 f"/console/deliveries/{schedule_id}/delete"):
        page.set_viewport_size({"width": 1280, "height": 900})
        response = page.goto(f"{server.base_url}{path}")
        assert response.status == 200, path
        bad = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
        if bad:
            found[path] = bad
        page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, path
    assert found == {}
