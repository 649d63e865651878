"""The rule editor in a real browser: type a rule, Preview shows its words and next
occurrences across a DST change, edit it and the preview changes, Save asks and saves;
axe-core finds nothing serious on the previewed page."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from tests.browser.test_console_pages import _api, _sign_in_as

SPRING = {"cron": "30 2 * 3 0", "timezone": "America/New_York"}  # March Sundays: 14 March 2027 is the gap
AUTUMN = {"cron": "30 1 * 10 0", "timezone": "Europe/London"}  # October Sundays: 31 October 2027 falls back


@pytest.fixture(scope="module")
def sweep(server) -> dict[str, Any]:
    sample = server.stack.platform
    admin, workspace = sample.users["admin"], sample.first_workspace
    reply = requests.post(f"{server.base_url}/schedules", headers=_api(server, admin, workspace), timeout=30, json={
        "owner": "accounting", "work_kind": "reconciliation.sweep", "name": "Rule editor sweep",
        "recurrence": {"cron": "0 6 * * *", "timezone": "Europe/Berlin"}})
    assert reply.status_code == 201, reply.text
    return {"admin": admin, "workspace": workspace, "schedule": reply.json()}


@pytest.fixture
def page(browser):
    context = browser.new_context()
    tab = context.new_page()
    yield tab
    context.close()


def _preview(page: Any, rule: dict[str, Any]) -> Any:
    page.locator("#recurrence").fill(json.dumps(rule))
    page.get_by_role("button", name="Preview").click()
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
    gap_row = spring.locator("tbody tr", has_text="2027-03-14")
    assert "2027-03-14 03:30 EDT" in gap_row.inner_text() and "2027-03-14 07:30 UTC" in gap_row.inner_text()
    assert gap_row.locator(".mark").inner_text() == "DST shift"
    assert spring.locator(".mark", has_text="repeated hour").count() == 0
    # Edit it to October in London: the preview changes, the fall-back day marked repeated
    autumn = _preview(page, AUTUMN)
    assert "Europe/London" in autumn.inner_text()
    repeated = autumn.locator("tbody tr", has_text="2027-10-31")
    assert "2027-10-31 01:30 BST" in repeated.inner_text() and "2027-10-31 00:30 UTC" in repeated.inner_text()
    assert repeated.locator(".mark").inner_text() == "repeated hour"
    assert autumn.locator(".mark", has_text="DST shift").count() == 0
    # Nothing is saved by a preview; Save asks first, then saves through the API
    detail_url = f"{server.base_url}/schedules/{sweep['schedule']['id']}"
    headers = _api(server, sweep["admin"], sweep["workspace"])
    assert requests.get(detail_url, headers=headers, timeout=30).json()["schedule"]["definition_version"] == 1
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Save").click()
    page.wait_for_url("**?done=update*")  # the form's #edit-rule fragment is kept
    assert page.get_by_role("status").inner_text() == "The schedule was updated."
    saved = requests.get(detail_url, headers=headers, timeout=30).json()
    assert saved["schedule"]["recurrence"] == AUTUMN and saved["description"].endswith("Europe/London")


def test_an_invalid_rule_is_shown_with_its_field(page, server, sweep):
    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{sweep['schedule']['id']}")
    page.locator("#recurrence").fill(json.dumps({"cron": "30 2 * *", "timezone": "America/New_York"}))
    page.get_by_role("button", name="Preview").click()
    assert page.get_by_role("alert").inner_text().startswith("recurrence.cron:")


def test_axe_finds_no_serious_violation_on_the_previewed_page(page, server, sweep):
    from axe_playwright_python.sync_playwright import Axe

    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{sweep['schedule']['id']}")
    _preview(page, SPRING)
    results = Axe().run(page)
    assert [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")] == []
