"""The snapshot staff console pages on input the API refuses: a NUL in the search or a
forged cursor is the API's 422 page, never a 500."""

from __future__ import annotations

import base64

import pytest

from tests.api.conftest import Caller
from tests.api.test_console import Browser

FORGED = base64.urlsafe_b64encode(b"99999999999999999999|2026-12-06T16:48:01+00:00|"
                                  b"d1008f3c-cd3c-46b1-9830-c5b0ff710a6a").decode()


@pytest.mark.parametrize("path", ["/console/snapshots/staff?search=\x00", "/console/snapshots/ranges?search=\x00",
                                  f"/console/snapshots/staff?cursor={FORGED}"])
def test_input_the_api_refuses_is_its_422_page(console, path):
    staff = Browser(console)
    staff.sign_in(Caller(user_id="staff-1", roles="platform:staff"), ("platform:staff",))
    page = staff.request("GET", path)
    assert page["statusCode"] == 422, page["body"][:300]
