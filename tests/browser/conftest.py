"""Browser tests: headless Chromium (Debian's package) driven by Playwright for Python
against ``serve`` on the embedded database.

The browser is the machine's ``/usr/bin/chromium`` (``.ci/run`` installs the Debian
package, as it installs PgBouncer); Playwright never downloads one. Where Chromium is
missing the tests skip, unless ``TIMEKEEPER_BROWSER_TESTS=required`` (``.ci/run`` sets
it), where they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import serving

CHROMIUM = os.environ.get("TIMEKEEPER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRED_VARIABLE = "TIMEKEEPER_BROWSER_TESTS"
#: Chromium's flags on a machine without a display or an open network (no background
#: connections, no sandbox as root).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get(REQUIRED_VARIABLE) == "required":
            pytest.fail(f"{REQUIRED_VARIABLE}=required but Chromium is not installed at {CHROMIUM}")
        pytest.skip(f"Chromium is not installed ({CHROMIUM}); .ci/run installs Debian's package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def server(db_url) -> Iterator[Any]:
    """``serve`` on the module's database, with the console on."""
    with serving(db_url) as running:
        yield running
