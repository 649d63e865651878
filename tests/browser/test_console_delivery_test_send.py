"""The analyst's whole flow in a real browser against ``serve``: a saved query with a date and
a money filter (typed as Berlin types them), its rows previewed, saved, a version 2; a
weekly XLSX delivery of it to two members while a third without access is refused as
they are added; "Send a test to me" (the ledger shows it as a test, sent to the analyst
only); Run now and its per-recipient ledger; a member of another workspace gets 404s for
both; then the delivery and the query are deleted. The pages visited pass axe-core and
fit a 360 px screen."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, page  # noqa: F401
from tests.browser.test_console_queries import _write_query, invoice  # noqa: F401

QUERY = "Rechnungen zum Testversand"
DELIVERY = "Wöchentliche Rechnungen"


@pytest.fixture(scope="module")
def people(server) -> dict[str, str]:
    return server.stack.platform.users


def _add(tab: Any, user_id: str) -> None:
    tab.get_by_label("Add a recipient").select_option(value=user_id)
    tab.get_by_role("button", name="Add recipient").click()


def _checked(tab: Any, label: str, found: dict[str, list[str]]) -> None:
    """axe-core's serious and critical findings on the page (into ``found``), and no
    sideways scroll at 360 px."""
    from axe_playwright_python.sync_playwright import Axe

    tab.set_viewport_size({"width": 1280, "height": 900})
    bad = [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious", "critical")]
    if bad:
        found[label] = bad
    tab.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, label
    tab.set_viewport_size({"width": 1280, "height": 900})


def _runs_until(tab: Any, ready: Any) -> Any:
    """Reload the delivery page until ``ready(first run section)`` (the local worker polls
    the queue every fraction of a second); the newest run's section."""
    for _ in range(60):
        first = tab.locator("section.run").first
        if first.count() and ready(first):
            return first
        tab.wait_for_timeout(500)
        tab.reload()
    raise AssertionError("the run did not finish: " + tab.locator("main").inner_text()[:2000])


def test_an_analyst_writes_a_query_delivers_it_weekly_tests_it_runs_it_and_deletes_both(
        page, browser, server, invoice, people):  # noqa: F811
    found: dict[str, list[str]] = {}
    _sign_in_as(page, server, "Berlin analyst")
    # A query with a date and a money filter, previewed, saved, then a version 2
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Queries").click()
    page.get_by_role("link", name="New query").click()
    _write_query(page)
    page.get_by_label("Query name").fill(QUERY)
    page.get_by_role("button", name="Preview").click()
    assert "INV-QUERY-1" in page.locator("section.preview").inner_text()
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url("**?done=saved")
    query_path = page.url.split(server.base_url, 1)[1].split("?")[0]
    page.get_by_role("link", name="New version", exact=True).click()
    page.get_by_label("Value of filter 2").fill("1.000,00")
    page.get_by_role("button", name="Save as a new version").click()
    page.wait_for_url("**?done=version")
    _checked(page, "query page", found)
    # A weekly XLSX delivery of version 2 to two members; a third who may not read it is refused
    page.get_by_role("link", name="Deliveries").first.click()
    page.get_by_role("link", name="New delivery").click()
    page.get_by_label("Name", exact=True).fill(DELIVERY)
    page.get_by_label("Source").select_option(label=f"Query: {QUERY} (newest, version 2)")
    page.get_by_label("Format").select_option(value="xlsx")
    _add(page, people["viewer"])
    _add(page, people["admin"])
    _add(page, people["multi"])
    refusal = page.get_by_role("alert").inner_text()
    assert "Max Both" in refusal and "may not read the query" in refusal
    _checked(page, "new delivery form", found)
    page.get_by_role("button", name="Create delivery").click()
    page.wait_for_url("**?done=created")
    delivery_path = page.url.split(server.base_url, 1)[1].split("?")[0]
    facts = page.locator("dl.facts").inner_text()
    assert "XLSX" in facts and "version 2" in facts and "Vic Viewer" in facts and "Ada Admin" in facts
    assert "Max Both" not in facts
    # Send a test to me: it goes to the analyst only and shows in the ledger as a test
    page.get_by_role("button", name="Send a test to me").click()
    page.wait_for_url("**done=test**")
    notice = page.get_by_role("status").inner_text()
    assert re.search(r"on its way to you only, at ana\S*@\S+", notice), notice
    test_run = _runs_until(page, lambda run: "Sent" in run.inner_text())
    assert test_run.locator(".mark", has_text="test").count() == 1
    rows = test_run.locator("table tbody tr")
    assert rows.count() == 1
    assert rows.first.locator("td").first.inner_text() == people["analyst"]  # no recipient: by user id
    assert "Sent" in rows.first.inner_text()
    assert "test Test" not in test_run.inner_text() and "sent only to Ana Analyst" in test_run.inner_text()
    changes = page.locator("ul.changes").inner_text()
    assert "Test sent to Ana Analyst" in changes and "Run now requested" not in changes
    _checked(page, "delivery page with a test", found)
    # Run now: every recipient, and the per-recipient ledger
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url("**?done=run")
    run = _runs_until(page, lambda run: run.locator("table tbody tr").count() == 2
                      and run.inner_text().count("Sent") >= 2)
    ledger = {row.locator("td").first.locator("span[title]").first.get_attribute("title"):
              row.locator("td").nth(1).inner_text()
              for row in run.locator("table tbody tr").all()}
    assert ledger == {people["viewer"]: "Sent", people["admin"]: "Sent"}
    assert run.locator(".mark", has_text="test").count() == 0
    # A member of another workspace sees neither
    other = browser.new_context()
    try:
        tab = other.new_page()
        _sign_in_as(tab, server, "Sydney admin")
        for path in (delivery_path, query_path):
            response = tab.goto(f"{server.base_url}{path}")
            assert response.status == 404, path
            assert tab.get_by_role("heading", level=1).inner_text() == "Not found"
        assert tab.goto(f"{server.base_url}/console/deliveries").status == 200
        assert tab.get_by_role("link", name=DELIVERY).count() == 0
    finally:
        other.close()
    # Delete the delivery, then the query
    page.get_by_role("link", name="Delete").click()
    page.get_by_role("button", name="Delete this delivery").click()
    page.wait_for_url("**/console/deliveries?done=deleted")
    assert page.get_by_role("link", name=DELIVERY).count() == 0
    page.goto(f"{server.base_url}{query_path}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete this query").click()
    page.wait_for_url("**/console/queries?done=deleted")
    assert page.get_by_role("link", name=QUERY).count() == 0
    assert found == {}
