"""The lists people scan and live status, in a real browser against ``serve``: the Berlin
analyst filters the deliveries by name (the form keeps what was typed; the page fits
360 px and passes axe-core's check), then runs a delivery now and sees its runs block
update to each recipient's outcome without reloading the page."""

from __future__ import annotations

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, delivery, page  # noqa: F401


def test_the_deliveries_filtered_by_name_keep_the_filter_and_fit_360_px(page, server, delivery):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe

    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("link", name="Deliveries").first.click()
    page.get_by_label("Name contains").fill("for the team")
    page.get_by_label("Name contains").press("Enter")
    page.wait_for_url("**/console/deliveries?name=for+the+team**")
    assert page.get_by_label("Name contains").input_value() == "for the team"
    rows = page.locator("table tbody tr")
    assert rows.count() == 1 and "Invoices for the team" in rows.first.inner_text()
    assert "Query Open invoices" in rows.first.inner_text()
    page.get_by_label("Status").select_option(value="paused")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**status=paused**")
    assert "No deliveries match these filters." in page.locator("main").inner_text()
    assert page.get_by_label("Name contains").input_value() == "for the team"
    violations = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert violations == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE


def test_a_run_now_shows_its_outcome_without_reloading(page, server, delivery):  # noqa: F811
    _sign_in_as(page, server, "Berlin analyst")
    page.goto(f"{server.base_url}/console/deliveries/{delivery['schedule']['id']}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url("**?done=run")
    page.evaluate("window.__notReloaded = true")
    # The block polls its live address until no run is under way; the page itself stays
    page.wait_for_selector("#delivery-runs:not([data-live])", timeout=60_000)
    assert page.evaluate("window.__notReloaded === true")
    ledger = page.locator("#delivery-runs section.run").first.locator("tbody tr")
    assert ledger.count() == 2 and "Sent" in ledger.first.inner_text()
    assert page.get_by_role("link", name="Refresh the status").count() == 0
