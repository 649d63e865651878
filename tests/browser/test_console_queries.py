"""Saved queries in a real browser against ``serve``: the Berlin analyst (de-DE) writes a
query with a date and a money filter typed as people there type them, previews its rows,
saves it, makes version 2 and sees the diff, exports it and sees the export succeed; the
viewer is offered no New query; the pages fit a 360 px screen and pass axe-core."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, page  # noqa: F401
from timekeeper.db.connection import connect

NAME = "Große Rechnungen 2026"


@pytest.fixture(scope="module")
def invoice(db_url, server) -> dict[str, Any]:
    """An invoice of the Berlin sample dated 31.12.2026 over exactly 1.234,50 EUR."""
    workspace = server.stack.platform.first_workspace
    with connect(db_url) as conn, conn.transaction():
        member = conn.execute("SELECT id FROM members WHERE workspace_id = %s ORDER BY id LIMIT 1",
                              (workspace,)).fetchone()["id"]
        conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                     "currency, status) VALUES (%s, %s, 'INV-QUERY-1', %s, %s, 123450, 'EUR', 'open')",
                     (workspace, member, date(2026, 12, 31), date(2027, 1, 30)))
    return {"workspace": workspace}


def _write_query(page: Any) -> None:  # noqa: F811
    page.get_by_label("Entity").select_option("invoices")
    page.get_by_role("button", name="Use this entity").click()
    assert page.get_by_label("Number").is_checked() and page.get_by_label("Status").is_checked()
    for column in ("Member", "Issued", "Due", "Status", "Currency"):
        if page.get_by_label(column, exact=True).count():
            page.get_by_label(column, exact=True).uncheck()
    page.get_by_label("Query name").fill(NAME)
    page.get_by_label("Number").check()
    page.get_by_label("Amount").check()
    page.get_by_label("Filter 1", exact=True).select_option(label="Issued is on or before")
    page.get_by_label("Value of filter 1").fill("31.12.2026")
    page.get_by_label("Filter 2", exact=True).select_option(label="Amount is at least")
    page.get_by_label("Value of filter 2").fill("1.234,50")
    page.get_by_label("Sort 1 by").select_option(label="Amount")


def test_an_analyst_writes_previews_saves_versions_and_exports_a_query(page, server, invoice):  # noqa: F811
    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Queries").click()
    page.get_by_role("link", name="New query").click()
    _write_query(page)
    # Preview: rows before saving, the typed values kept
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("section.preview")
    assert "INV-QUERY-1" in preview.inner_text() and "1.234,50" in preview.inner_text()
    assert page.get_by_label("Value of filter 2").input_value() == "1.234,50"
    # Save, from the keyboard
    page.get_by_role("button", name="Save", exact=True).focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**?done=saved")
    assert page.get_by_role("heading", level=1).inner_text() == NAME
    # Version 2 from version 1: the form is prefilled in de-DE; then the diff
    page.get_by_role("link", name="New version", exact=True).click()
    assert page.get_by_label("Value of filter 1").input_value() == "31.12.2026"
    page.get_by_label("Value of filter 2").fill("2.000,00")
    page.get_by_role("button", name="Save as a new version").click()
    page.wait_for_url("**?done=version")
    diff = page.locator("table.diff").first  # in words; the JSON behind a disclosure
    assert "Amount is at least 1.234,50" in diff.inner_text() and "Amount is at least 2.000,00" in diff.inner_text()
    assert "amount_minor" not in diff.inner_text()
    assert page.locator("table.diff").first.locator("tr.replace").count() == 1
    # Export now: XLSX, then its progress until it succeeded and the download link
    page.get_by_label("Format").select_option("xlsx")
    page.get_by_role("button", name="Export now").click()
    page.wait_for_url("**/console/exports/*")
    page.get_by_role("link", name="Download the XLSX file").wait_for(timeout=60_000)
    assert "The export succeeded" in page.get_by_role("status").inner_text()
    # The export page passes the accessibility check and fits a 360 px screen
    from axe_playwright_python.sync_playwright import Axe

    bad = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert bad == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE


def test_a_viewer_is_offered_no_new_query(page, server):  # noqa: F811
    _sign_in_as(page, server, "Berlin viewer")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Queries").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Queries"
    assert page.get_by_role("link", name="New query").count() == 0


def test_the_query_pages_fit_a_360_px_screen_and_pass_the_accessibility_check(browser, server, invoice):
    from axe_playwright_python.sync_playwright import Axe

    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    found = {}
    try:
        _sign_in_as(tab, server, "Berlin analyst")
        tab.goto(f"{server.base_url}/console/queries/new")
        _write_query(tab)
        tab.get_by_role("button", name="Preview").click()
        pages = {"/console/queries/new (preview)": None}
        tab.get_by_role("button", name="Save", exact=True).click()
        tab.wait_for_url("**?done=saved")
        query_path = tab.url.split(server.base_url, 1)[1].split("?")[0]
        pages.update({"/console/queries": "/console/queries", query_path: query_path,
                      f"{query_path}/versions/new": f"{query_path}/versions/new"})
        tab.goto(f"{server.base_url}/console/queries/new")
        _write_query(tab)
        tab.get_by_role("button", name="Preview").click()
        for label, path in pages.items():
            if path is not None:
                assert tab.goto(f"{server.base_url}{path}").status == 200, path
            wide = tab.evaluate("[...document.querySelectorAll('body *')]"
                                ".filter(e => e.getBoundingClientRect().right > 360).map(e => e.tagName)")
            assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, (label, wide)
            bad = [v["id"] for v in Axe().run(tab).response["violations"] if v.get("impact") in ("serious",
                                                                                              "critical")]
            if bad:
                found[label] = bad
    finally:
        context.close()
    assert found == {}
