"""Write a screenshot of each console page into this folder (docs/console.md shows them).

    python3 docs/console/screenshots.py

Starts ``serve`` on a throw-away database of the embedded server (or ``DATABASE_URL``)
with its sample schedules and deliveries, runs the Berlin workspace's nightly
reconciliation now through the API (so its history has a run), previews a rule across
New York's spring-forward day in the structured rule editor (the second Sunday of every
month at 02:30), shows the analyst's morning delivery
(its page and its message preview), and photographs the pages in Debian's headless Chromium
(``/usr/bin/chromium``; the requirements-dev.txt Playwright drives it).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]

import requests  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from tests.api.conftest import enrol  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from timekeeper.local.serve import ServeOptions, start_server  # noqa: E402


def main() -> int:
    os.environ.setdefault("TIMEKEEPER_HOME", tempfile.mkdtemp(prefix="tk-shots-"))
    server = start_server(ServeOptions(port=0, access_log=False, reset=True))
    server.serve_in_background()
    try:
        sample = server.stack.platform
        admin, workspace = sample.users["admin"], sample.first_workspace
        auth = {"Authorization": f"Bearer dev:{admin}:{workspace}:schedules:read,schedules:run,queries:read"}
        schedules = requests.get(f"{server.base_url}/schedules", headers=auth, timeout=30,
                                 params={"limit": "200"}).json()["items"]
        nightly = next(s["id"] for s in schedules if s["name"] == "Nightly reconciliation")
        requests.post(f"{server.base_url}/schedules/{nightly}/run", headers=auth, timeout=30).raise_for_status()
        deliveries = requests.get(f"{server.base_url}/query-schedules", headers=auth, timeout=30).json()["items"]
        delivery_id = next(d["id"] for d in deliveries if d["name"] == "Morning unpaid invoices")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            page.goto(f"{server.base_url}/console/sign-in")
            page.screenshot(path=str(HERE / "sign-in.png"), full_page=True)
            page.get_by_role("button", name="Berlin admin").click()
            page.wait_for_url("**/console/schedules")
            page.screenshot(path=str(HERE / "schedules.png"), full_page=True)
            page.wait_for_timeout(2000)  # the local worker runs the Run now meanwhile
            page.goto(f"{server.base_url}/console/schedules/{nightly}")
            page.screenshot(path=str(HERE / "schedule.png"), full_page=True)
            form = page.locator("#rule-form")
            form.get_by_label("How often").select_option("monthly_nth")
            form.get_by_label("Which one").select_option("2")
            form.get_by_label("Weekday").select_option("SU")
            form.get_by_label("Times of day").fill("02:30")
            form.get_by_label("Time zone").select_option("America/New_York")
            form.get_by_role("button", name="Preview").click()
            page.wait_for_selector("#preview-heading")
            page.locator("#edit-rule").scroll_into_view_if_needed()
            page.screenshot(path=str(HERE / "rule-preview.png"), full_page=True)
            staff = browser.new_page(viewport={"width": 1100, "height": 800})
            enrol(server.database_url, "staff-1", workspace)  # the API lets members in only
            staff.goto(f"{server.base_url}/console/sign-in")
            staff.get_by_label("User id").fill("staff-1")
            staff.get_by_label("Workspace (UUID)").fill(str(workspace))
            staff.get_by_role("button", name="Sign in").click()
            staff.goto(f"{server.base_url}/console/snapshots")
            staff.screenshot(path=str(HERE / "snapshots.png"))
            staff.goto(f"{server.base_url}/console/operations")
            staff.screenshot(path=str(HERE / "operations.png"), full_page=True)
            page.goto(f"{server.base_url}/console/notices")
            page.screenshot(path=str(HERE / "notices.png"), full_page=True)
            page.goto(f"{server.base_url}/console/deliveries/{delivery_id}")
            page.screenshot(path=str(HERE / "delivery.png"), full_page=True)
            page.goto(f"{server.base_url}/console/deliveries/{delivery_id}/preview")
            page.frame_locator("iframe.message").locator("body").wait_for()
            page.screenshot(path=str(HERE / "message-preview.png"), full_page=True)
            for name in ("mail-suppressions", "closures", "ownerless", "posting-jobs"):
                page.goto(f"{server.base_url}/console/{name}")
                page.screenshot(path=str(HERE / f"{name}.png"), full_page=True)
            browser.close()
    finally:
        server.stop()
    print(f"wrote {', '.join(p.name for p in sorted(HERE.glob('*.png')))} to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
