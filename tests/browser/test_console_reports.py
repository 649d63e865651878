"""Reports in a real browser: the Berlin analyst composes a two-section report (a table
and a chart over saved queries) without JavaScript-only controls, moves the chart up,
creates it, saves version 2, previews the PDF and reaches the render's page; the viewer
is offered no compose action; the pages pass axe-core's check and fit a 360 px screen."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, page  # noqa: F401


@pytest.fixture(scope="module")
def queries(server) -> dict[str, Any]:
    """Two saved queries of the Berlin analyst, made through the API."""
    sample = server.stack.platform
    analyst, workspace = sample.users["analyst"], sample.first_workspace
    auth = {"Authorization": f"Bearer dev:{analyst}:{workspace}:queries:read,queries:write"}
    made = {}
    for name, columns in (("Invoice amounts", ["number", "amount_minor"]), ("Invoice statuses", ["number", "status"])):
        reply = requests.post(f"{server.base_url}/queries", headers=auth, timeout=30, json={
            "name": name, "definition": {"entity": "invoices", "columns": columns}})
        assert reply.status_code == 201, reply.text
        made[name] = reply.json()["query"]["id"]
    return made


def _axe_bad(tab: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    return [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious", "critical")]


def _fits(tab: Any) -> bool:
    return tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE


def test_an_analyst_composes_reorders_saves_versions_and_previews_a_report(page, server, queries):  # noqa: F811
    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Reports").click()
    page.get_by_role("link", name="New report").click()
    assert page.get_by_role("heading", level=1).inner_text() == "New report"
    assert _axe_bad(page) == []
    page.get_by_label("Name").fill("Board pack")
    page.get_by_label("Title (on the PDF)").fill("Monthly board")
    # The first section: a table of the amounts query, version 1
    page.locator("#f-heading_0").fill("All invoices")
    page.locator("#f-query_0").select_option(label="Invoice amounts: version 1")
    with page.expect_navigation():
        page.get_by_role("button", name="Add a section").click()
    # The second: a bar chart of the amounts by invoice number
    page.locator("#f-heading_1").fill("Amounts by invoice")
    page.locator("#f-query_1").select_option(label="Invoice amounts: its current version when rendered")
    page.locator("#f-display_1").select_option(label="Bar chart")
    # The chart's columns are offered by their labels once the section's query is chosen
    with page.expect_navigation():
        page.get_by_role("button", name="Offer section 2’s query columns").click()
    page.locator("#f-label_1").select_option(label="Number")
    page.locator("#f-value_1").select_option(label="Amount")
    assert page.locator("#f-heading_0").input_value() == "All invoices"  # kept across the server's answer
    # Moving the chart up from the keyboard puts it first
    page.get_by_role("button", name="Move section 2 up").focus()
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.locator("#f-heading_0").input_value() == "Amounts by invoice"
    assert page.locator("#f-heading_1").input_value() == "All invoices"
    assert _axe_bad(page) == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert _fits(page)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_role("button", name="Create the report").last.click()
    page.wait_for_url(re.compile(r".*/console/reports/[0-9a-f-]{36}\?saved=1$"))
    assert page.get_by_role("heading", level=1).inner_text() == "Board pack"
    sections = page.get_by_role("table", name="The current version's sections, in order").inner_text()
    assert sections.index("Amounts by invoice") < sections.index("All invoices")
    # Version 2: the form holds version 1; a new title and Save
    page.get_by_role("link", name="Compose a new version").click()
    assert page.locator("#f-heading_0").input_value() == "Amounts by invoice"
    page.get_by_label("Title (on the PDF)").fill("Monthly board, revised")
    page.get_by_role("button", name="Save version 2").last.click()
    page.wait_for_url("**?saved=1")
    assert "Saved: version 2 is the current one." in page.get_by_role("status").inner_text()
    versions = page.get_by_role("table", name="Every saved version, newest first").inner_text()
    assert "Monthly board, revised" in versions and "Monthly board\t" in versions
    assert _axe_bad(page) == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert _fits(page)
    page.set_viewport_size({"width": 1280, "height": 800})
    # Preview the PDF: a render of version 2, on the render's page
    page.get_by_role("button", name="Preview the PDF").click()
    page.wait_for_url("**/console/reports/*/renders/*")
    assert page.get_by_role("heading", level=1).inner_text() == "Render of Board pack"
    assert "Report version\n2" in page.locator("dl").inner_text()
    # The list shows it, with the sections of its current version
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Reports").click()
    row = page.get_by_role("row", name=re.compile("Board pack"))
    assert row.inner_text().startswith("Board pack\t2\t2\t")
    assert _axe_bad(page) == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert _fits(page)


def test_a_viewer_sees_the_reports_but_no_compose_action(page, server, queries, db_url):  # noqa: F811
    sample = server.stack.platform  # (the sample viewer's membership reads queries and reports)
    auth = {"Authorization": f"Bearer dev:{sample.users['analyst']}:{sample.first_workspace}:"
                             "reports:read,reports:write"}
    made = requests.post(f"{server.base_url}/reports", headers=auth, timeout=30, json={
        "name": "For viewers", "definition": {"title": "T", "sections": [
            {"heading": "All", "query_id": queries["Invoice statuses"]}]}})
    assert made.status_code == 201, made.text
    _sign_in_as(page, server, "Berlin viewer")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Reports").click()
    assert page.get_by_role("link", name="New report").count() == 0
    page.get_by_role("link", name="For viewers").click()
    assert page.get_by_role("button", name="Preview the PDF").count() == 1
    assert page.get_by_role("link", name="Compose a new version").count() == 0
    assert _axe_bad(page) == []
