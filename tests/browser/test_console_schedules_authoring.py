"""Making a schedule in a real browser: the Berlin admin makes a New York 02:30
second-Sunday-of-the-month schedule, sees March's spring-forward shift marked in its
preview before saving, creates it, renames it and deletes it (the confirmation says what
is kept, and its old address then says when and by whom); the Berlin viewer is offered no
"New schedule". axe-core finds nothing serious on the new pages, which fit a 360 px screen."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from tests.browser.test_console_pages import WIDTH_PHONE, _api, _sign_in_as


def _serious(page: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")]


def _fits(page: Any) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE


@pytest.fixture
def phone(browser):
    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    yield tab
    context.close()


def test_an_admin_makes_previews_renames_and_deletes_a_second_sunday_schedule(phone, server):
    page = phone
    sample = server.stack.platform
    headers = _api(server, sample.users["admin"], sample.first_workspace)
    _sign_in_as(page, server, "Berlin admin")
    page.get_by_role("link", name="New schedule").click()
    page.wait_for_url("**/console/schedules/new")
    assert _fits(page) and _serious(page) == []
    form = page.locator("#new-schedule")
    form.locator("#sn-name").fill("Second Sunday sweep")
    form.get_by_label("Work", exact=True).select_option("accounting/reconciliation.sweep")
    form.get_by_label("How often").select_option("monthly_nth")
    form.get_by_label("Which one").select_option("2")
    form.get_by_label("Weekday").select_option("SU")
    form.get_by_label("Time zone").select_option("America/New_York")
    times = form.get_by_label("Times of day")
    times.fill("02:30")
    times.press("Enter")  # the form's first button: Preview
    page.wait_for_selector("#preview-heading")
    preview = page.locator("section.preview")
    assert "At 02:30 on the second Sunday of every month, America/New_York" in preview.inner_text()
    upcoming = preview.locator("table.occurrences").first  # (the change days' tables follow)
    shifted = upcoming.locator("tbody tr", has=page.locator(".mark", has_text="DST shift"))
    assert shifted.count() == 1  # of ten months, only March's second Sunday falls in the gap
    assert "springs forward" in preview.locator("ul.change-days").inner_text()
    assert re.search(r"\d{4}-03-\d\d 03:30 EDT", shifted.inner_text()) and "02:30)" in shifted.inner_text()
    # What was typed stays; nothing is saved by a preview
    assert form.locator("#sn-name").input_value() == "Second Sunday sweep"
    assert form.get_by_label("Weekday").input_value() == "SU" and times.input_value() == "02:30"
    names = [s["name"] for s in requests.get(f"{server.base_url}/schedules", headers=headers, timeout=30)
             .json()["items"]]
    assert "Second Sunday sweep" not in names
    assert _fits(page) and _serious(page) == []
    # Create opens the new schedule's page
    form.get_by_role("button", name="Create").click()
    page.wait_for_url("**?done=create*")
    assert page.get_by_role("status").inner_text() == "The schedule was created."
    assert "Last changed" in page.locator(".facts").inner_text()
    schedule_id = page.url.split("/schedules/", 1)[1].split("?", 1)[0]
    saved = requests.get(f"{server.base_url}/schedules/{schedule_id}", headers=headers, timeout=30).json()
    assert saved["schedule"]["recurrence"] == {
        "calendar": {"frequency": "monthly", "nth_weekday": [2, "SU"], "times": ["02:30"]},
        "timezone": "America/New_York"}
    assert _fits(page) and _serious(page) == []
    # Rename it
    page.locator("#def-name").fill("Renamed sweep")
    page.locator("#def-name").press("Enter")
    page.wait_for_url("**?done=update*")
    assert page.get_by_role("heading", level=1).inner_text() == "Renamed sweep"
    assert page.get_by_role("status").is_visible() and page.url.endswith("#done")  # the confirmation, in view
    top = page.evaluate("document.getElementById('done').getBoundingClientRect().top")
    assert -1 <= top < page.viewport_size["height"]
    # Delete it: the confirmation says what is kept
    page.get_by_role("link", name="Delete this schedule…").click()
    page.wait_for_url("**/delete")
    assert "its runs (0) and its history, for audit" in page.locator("main").inner_text()
    assert page.get_by_role("link", name="audit log (schedules)").get_attribute("href").endswith(
        "/console/audit?kind=schedule")
    assert _fits(page) and _serious(page) == []
    page.get_by_role("button", name="Delete the schedule").click()
    page.wait_for_url("**/console/schedules?done=delete")
    assert page.get_by_role("status").inner_text() == (
        "The schedule was deleted; its runs and history are kept: see the audit log (schedules).")
    assert page.get_by_role("link", name="Renamed sweep").count() == 0
    assert requests.get(f"{server.base_url}/schedules/{schedule_id}", headers=headers, timeout=30).status_code == 410
    # Its old address says when and by whom it was deleted, with the audit log for the admin
    page.goto(f"{server.base_url}/console/schedules/{schedule_id}")
    assert page.get_by_role("heading", name="Schedule deleted").count() == 1
    assert re.search(r"This schedule was deleted on \d{4}-\d\d-\d\d \d\d:\d\d CES?T \(.* UTC\) by ",
                     page.locator("main").inner_text())
    assert page.get_by_role("link", name=re.compile("changes in the audit log")).count() == 1
    assert _fits(page) and _serious(page) == []


def test_a_viewer_is_offered_no_new_schedule(browser, server):
    context = browser.new_context()
    page = context.new_page()
    try:
        _sign_in_as(page, server, "Berlin viewer")
        assert page.get_by_role("heading", name="Schedules").count() == 1
        assert page.get_by_role("link", name="New schedule").count() == 0
        response = page.goto(f"{server.base_url}/console/schedules/new")
        assert response.status == 403
    finally:
        context.close()



def test_a_kind_s_subject_is_chosen_by_name(browser, server):
    context = browser.new_context()
    page = context.new_page()
    try:
        _sign_in_as(page, server, "Berlin admin")
        page.goto(f"{server.base_url}/console/schedules/new")
        form = page.locator("#new-schedule")
        # Only the chosen kind's subject shows: a batch.roll names a recurring batch, by name
        form.get_by_label("Work", exact=True).select_option("accounting/batch.roll")
        subject = form.get_by_label("Recurring batch", exact=True)
        assert subject.is_visible() and form.get_by_label("Batch", exact=True).is_hidden()
        assert "General journal" in subject.inner_text()
        form.get_by_label("Work", exact=True).select_option("accounting/reconciliation.sweep")
        assert subject.is_hidden()
    finally:
        context.close()
