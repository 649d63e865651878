"""The rule editors in a real browser: type a rule as JSON, Preview shows its words and
next occurrences across a DST change, edit it and the preview changes, Save asks and
saves; the structured form from the keyboard across New York's spring-forward day, its
fields shown per frequency, at 360 px; axe-core finds nothing serious on the previewed
pages."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import requests

from tests.browser.test_console_pages import WIDTH_PHONE, _api, _sign_in_as

SPRING = {"cron": "30 2 * 3 0", "timezone": "America/New_York"}  # March Sundays: 14 March 2027 is the gap
AUTUMN = {"cron": "30 1 * 10 0", "timezone": "Europe/London"}  # October Sundays: 31 October 2027 falls back


def _berlin_sweep(server, name: str) -> dict[str, Any]:
    """The Berlin admin, their workspace and a new daily 06:00 sweep named ``name`` of
    theirs (a cron rule, which the structured form cannot show), created through the API."""
    sample = server.stack.platform
    admin, workspace = sample.users["admin"], sample.first_workspace
    reply = requests.post(f"{server.base_url}/schedules", headers=_api(server, admin, workspace), timeout=30, json={
        "owner": "accounting", "work_kind": "reconciliation.sweep", "name": name,
        "recurrence": {"cron": "0 6 * * *", "timezone": "Europe/Berlin"}})
    assert reply.status_code == 201, reply.text
    return {"admin": admin, "workspace": workspace, "schedule": reply.json()}


@pytest.fixture(scope="module")
def sweep(server) -> dict[str, Any]:
    return _berlin_sweep(server, "Rule editor sweep")


@pytest.fixture(scope="module")
def form_sweep(server) -> dict[str, Any]:
    """A schedule of its own for the structured form's tests."""
    return _berlin_sweep(server, "Rule form sweep")


@pytest.fixture
def page(browser):
    context = browser.new_context()
    tab = context.new_page()
    yield tab
    context.close()


def _preview(page: Any, rule: dict[str, Any]) -> Any:
    page.locator("#recurrence").fill(json.dumps(rule))
    page.locator("#json-rule").get_by_role("button", name="Preview").click()
    page.wait_for_selector("#preview-heading")
    return page.locator("section.preview")


def test_edit_a_rule_and_see_the_preview_change_across_a_dst_change(page, server, sweep):
    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{sweep['schedule']['id']}")
    assert "At 06:00, every day, Europe/Berlin" in page.locator(".facts").inner_text()
    assert page.locator("table.occurrences").first.locator("tbody tr").count() == 10
    # Preview a March rule in New York: the gap day runs an hour later, marked
    spring = _preview(page, SPRING)
    assert "At 02:30, only on Sunday, only in March, America/New_York" in spring.inner_text()
    gap_row = spring.locator("table.occurrences").first.locator("tbody tr", has_text="2027-03-14")
    assert "2027-03-14 03:30 EDT" in gap_row.inner_text() and "2027-03-14 07:30 UTC" in gap_row.inner_text()
    assert gap_row.locator(".mark").inner_text() == "DST shift"
    assert spring.locator(".mark", has_text="repeated hour").count() == 0
    # Edit it to October in London: the preview changes, the fall-back day marked repeated
    autumn = _preview(page, AUTUMN)
    assert "Europe/London" in autumn.inner_text()
    repeated = autumn.locator("table.occurrences").first.locator("tbody tr", has_text="2027-10-31")
    assert "2027-10-31 01:30 BST" in repeated.inner_text() and "2027-10-31 00:30 UTC" in repeated.inner_text()
    assert repeated.locator(".mark").inner_text() == "repeated hour"
    assert autumn.locator(".mark", has_text="DST shift").count() == 0
    # Nothing is saved by a preview; Save asks first, then saves through the API
    detail_url = f"{server.base_url}/schedules/{sweep['schedule']['id']}"
    headers = _api(server, sweep["admin"], sweep["workspace"])
    assert requests.get(detail_url, headers=headers, timeout=30).json()["schedule"]["definition_version"] == 1
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#json-rule").get_by_role("button", name="Save").click()
    page.wait_for_url("**?done=update*")  # the form's #json-rule fragment is kept
    assert page.get_by_role("status").inner_text() == "The schedule was updated."
    saved = requests.get(detail_url, headers=headers, timeout=30).json()
    assert saved["schedule"]["recurrence"] == AUTUMN and saved["description"].endswith("Europe/London")


def test_an_invalid_rule_is_shown_with_its_field(page, server, sweep):
    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{sweep['schedule']['id']}")
    page.locator("#recurrence").fill(json.dumps({"cron": "30 2 * *", "timezone": "America/New_York"}))
    page.locator("#json-rule").get_by_role("button", name="Preview").click()
    assert page.get_by_role("alert").inner_text().startswith("recurrence.cron:")


def test_axe_finds_no_serious_violation_on_the_previewed_page(page, server, sweep):
    from axe_playwright_python.sync_playwright import Axe

    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{sweep['schedule']['id']}")
    _preview(page, SPRING)
    results = Axe().run(page)
    assert [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")] == []


def test_the_form_from_the_keyboard_across_new_york_s_spring_forward(browser, server, form_sweep):
    # A phone-wide screen: the form fits, and every step is a key press
    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    page = context.new_page()
    try:
        _sign_in_as(page, server, "Berlin admin")
        page.goto(f"{server.base_url}/console/schedules/{form_sweep['schedule']['id']}")
        form = page.locator("#rule-form")
        # The saved rule is a cron rule: the form says so and starts from every day at 09:00
        assert "cannot show this schedule's rule (a cron rule)" in page.locator("#rf-unsupported").inner_text()
        assert form.get_by_label("How often").input_value() == "daily"
        # Only the chosen frequency's fields show: choosing "Monthly, on the Nth weekday"
        # from the keyboard shows its two choices and hides the weekdays
        assert form.get_by_label("Which one").is_hidden() and form.get_by_label("Times of day").is_visible()
        form.get_by_label("How often").focus()
        for _ in range(3):
            page.keyboard.press("ArrowDown")
        assert form.get_by_label("How often").input_value() == "monthly_nth"
        assert form.get_by_label("Which one").is_visible() and form.get_by_label("Monday").is_hidden()
        # The second Sunday of every month at 02:30 in New York: March's is the spring-forward day
        form.get_by_label("Which one").focus()
        page.keyboard.press("ArrowDown")  # second
        form.get_by_label("Weekday").focus()
        page.keyboard.press("End")  # Sunday
        form.get_by_label("Time zone").select_option("America/New_York")
        times = form.get_by_label("Times of day")
        times.focus()
        page.keyboard.press("Control+A")
        page.keyboard.type("02:30")
        page.keyboard.press("Enter")  # the form's first button: Preview
        page.wait_for_selector("#preview-heading")
        preview = page.locator("section.preview")
        assert "At 02:30 on the second Sunday of every month, America/New_York" in preview.inner_text()
        upcoming = preview.locator("table.occurrences").first  # (the change days' tables follow)
        shifted = upcoming.locator("tbody tr", has=page.locator(".mark", has_text="DST shift"))
        assert shifted.count() == 1  # of ten months, only March's falls in the gap
        row = shifted.inner_text()
        assert re.search(r"\d{4}-03-\d\d 03:30 EDT", row) and "(intended" in row and "02:30)" in row
        assert re.search(r"\d{4}-03-\d\d 07:30 UTC", row)
        assert preview.locator(".mark", has_text="repeated hour").count() == 0
        # The typed values stay; the page still fits the screen
        assert form.get_by_label("How often").input_value() == "monthly_nth"
        assert form.get_by_label("Weekday").input_value() == "SU" and times.input_value() == "02:30"
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
        # Save asks, then the API holds the calendar rule the form composed
        detail_url = f"{server.base_url}/schedules/{form_sweep['schedule']['id']}"
        headers = _api(server, form_sweep["admin"], form_sweep["workspace"])
        before = requests.get(detail_url, headers=headers, timeout=30).json()["schedule"]["definition_version"]
        page.once("dialog", lambda dialog: dialog.accept())
        form.get_by_role("button", name="Save").focus()
        page.keyboard.press("Enter")
        page.wait_for_url("**?done=update*")
        saved = requests.get(detail_url, headers=headers, timeout=30).json()
        assert saved["schedule"]["recurrence"] == {
            "calendar": {"frequency": "monthly", "nth_weekday": [2, "SU"], "times": ["02:30"]},
            "timezone": "America/New_York"}
        assert saved["schedule"]["definition_version"] == before + 1
        # The saved rule fills the form back, and the JSON editor stays folded
        assert page.locator("#rf-unsupported").count() == 0
        assert form.get_by_label("How often").input_value() == "monthly_nth"
        assert form.get_by_label("Which one").input_value() == "2"
        assert page.locator("#recurrence").is_hidden()
    finally:
        context.close()


def test_the_form_shows_the_api_s_reason_and_axe_finds_nothing_serious(page, server, form_sweep):
    from axe_playwright_python.sync_playwright import Axe

    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{form_sweep['schedule']['id']}")
    form = page.locator("#rule-form")
    form.get_by_label("How often").select_option("monthly_business")
    form.get_by_label("Business day of the month").fill("24")
    form.get_by_role("button", name="Preview").click()
    alert = page.get_by_role("alert")
    assert alert.inner_text().startswith("recurrence.calendar.business_day: must be 1 to 23")
    assert form.get_by_label("Business day of the month").get_attribute("aria-invalid") == "true"
    results = Axe().run(page)
    assert [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")] == []
    form.get_by_label("Business day of the month").fill("3")
    form.get_by_label("Public holidays (optional)").fill("US-NY")
    form.get_by_role("button", name="Preview").click()
    page.wait_for_selector("#preview-heading")
    assert "third business day" in page.locator("section.preview").inner_text()
    results = Axe().run(page)
    assert [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")] == []


def test_the_dst_choice_from_the_keyboard_at_360_px(browser, server, form_sweep):
    from axe_playwright_python.sync_playwright import Axe

    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    page = context.new_page()
    try:
        _sign_in_as(page, server, "Berlin admin")
        page.goto(f"{server.base_url}/console/schedules/{form_sweep['schedule']['id']}")
        form = page.locator("#rule-form")
        # The second Sunday of every month at 02:30 in New York (March's is the spring-forward day)
        form.get_by_label("How often").select_option("monthly_nth")
        form.get_by_label("Which one").select_option("2")
        form.get_by_label("Weekday").select_option("SU")
        form.get_by_label("Time zone").select_option("America/New_York")
        form.get_by_label("Times of day").fill("02:30")
        # The DST choice from the keyboard: skip a time the clock skips, run a repeated one twice
        gap = form.get_by_label("A time the clock skips (spring forward)")
        overlap = form.get_by_label("A time the clock shows twice (fall back)")
        assert (gap.input_value(), overlap.input_value()) == ("shift", "first")
        gap.focus()
        page.keyboard.press("End")
        overlap.focus()
        page.keyboard.press("End")
        assert (gap.input_value(), overlap.input_value()) == ("skip", "both")
        form.get_by_role("button", name="Preview").click()
        page.wait_for_selector("#preview-heading")
        preview = page.locator("section.preview")
        assert "a time the clock skips does not run (recorded as skipped)" in preview.inner_text()
        upcoming = preview.locator("table.occurrences").first
        skipped = upcoming.locator("tbody tr", has=page.locator(".mark", has_text="DST skip"))
        assert skipped.count() == 1 and "(intended" in skipped.inner_text()
        # The zone's change days: the spring-forward day's 02:30 skipped, the fall-back day untouched
        days = preview.locator("ul.change-days > li")
        assert days.count() == 2
        spring = days.filter(has_text="springs forward")
        assert "02:30 is skipped" in spring.inner_text()
        assert spring.locator("tbody tr", has=page.locator(".mark", has_text="DST skip")).count() == 1
        assert "does not affect it" in days.filter(has_text="falls back").inner_text()
        assert (gap.input_value(), overlap.input_value()) == ("skip", "both")
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
        results = Axe().run(page)
        assert [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")] == []
    finally:
        context.close()


def test_the_flexible_window_from_the_keyboard_at_360_px(browser, server, form_sweep):
    from axe_playwright_python.sync_playwright import Axe

    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    page = context.new_page()
    try:
        _sign_in_as(page, server, "Berlin admin")
        page.goto(f"{server.base_url}/console/schedules/{form_sweep['schedule']['id']}")
        form = page.locator("#rule-form")
        form.get_by_label("How often").select_option("daily")
        form.get_by_label("Times of day").fill("00:00")
        window = form.get_by_label("Any time within (minutes)")
        assert window.input_value() == ""
        window.focus()
        page.keyboard.type("30")
        page.keyboard.press("Enter")  # submits the form's first button: Preview
        page.wait_for_selector("#preview-heading")
        preview = page.locator("section.preview")
        assert "each run at some time within 30 minutes" in preview.inner_text()
        # the schedule's own editor: each occurrence with the instant its run would be given
        assert preview.locator("table.occurrences").first.locator("tbody tr", has_text="runs at").count() == 10
        assert window.input_value() == "30"
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
        results = Axe().run(page)
        assert [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")] == []
    finally:
        context.close()
