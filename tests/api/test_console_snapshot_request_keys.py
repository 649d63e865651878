"""Staff's snapshot request forms carry an Idempotency-Key made when the form is shown: a
second click on a range's confirmation, or on a month's re-run, answers the first click's
answer (the same progress page, the same "requested") instead of planning again or showing
the first click's runs as a refusal."""

from __future__ import annotations

import re
from html import unescape

from tests.api.test_console import _header
from tests.api.test_console_snapshot_staff import _club, _csrf, _failed, _staff


def _hidden(html: str, action: str) -> list[tuple[str, str]]:
    form = html.split(f'action="{action}"')[1].split("</form>")[0]
    return [(k, unescape(v)) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)]


def test_a_range_confirmed_twice_plans_once_and_both_clicks_lead_to_its_progress(console, conn):
    rowing, chess = _club(conn, "Rowing club"), _club(conn, "Chess club")
    staff = _staff(console)
    form_page = staff.get_decoded("/console/snapshots/ranges?search=club")["body"]
    fields = [("csrf", _csrf(form_page)), ("workspace_id", str(rowing.workspace_id)),
              ("workspace_id", str(chess.workspace_id)), ("type", "platform:ar_aging"), ("first", "2026-11"),
              ("through", "2026-12"), ("mode", "backfill"), ("reason", "fill the autumn")]
    redirect = staff.request("POST", "/console/snapshots/ranges/preview", fields)
    assert redirect["statusCode"] == 303, redirect["body"]
    preview = staff.get_decoded(unescape(_header(redirect, "Location")))
    assert preview["statusCode"] == 200, preview["body"]
    confirm = _hidden(preview["body"], "/console/snapshots/ranges")
    assert any(k == "key" and v for k, v in confirm)
    first = staff.request("POST", "/console/snapshots/ranges", confirm)
    second = staff.request("POST", "/console/snapshots/ranges", confirm)
    assert first["statusCode"] == 303, first["body"]
    assert second["statusCode"] == 303, second["body"]
    assert _header(second, "Location") == _header(first, "Location")
    assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE workspace_id IN (%s, %s)",
                        (rowing.workspace_id, chess.workspace_id)).fetchone()["n"] == 4


def test_a_months_re_run_clicked_twice_is_requested_once_and_both_clicks_say_requested(console, conn):
    club = _club(conn, "Sculling club")
    _failed(conn, club)
    staff = _staff(console)
    page = f"/console/snapshots/periods/platform/selftest/2026-11?workspace={club.workspace_id}"
    html = staff.get_decoded(page)["body"]
    form = dict(_hidden(html, "/console/snapshots/requests"))
    assert form.get("key")
    form["reason"] = "the drill is over"
    first = staff.request("POST", "/console/snapshots/requests", form)
    second = staff.request("POST", "/console/snapshots/requests", form)
    assert first["statusCode"] == 303, first["body"]
    assert second["statusCode"] == 303, second["body"]
    assert _header(second, "Location") == _header(first, "Location")
    assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE workspace_id = %s",
                        (club.workspace_id,)).fetchone()["n"] == 2


def test_each_periods_page_row_request_carries_a_key_of_its_own(console, conn):
    club = _club(conn, "Rowing club")
    staff = _staff(console)
    html = staff.get_decoded(f"/console/snapshots?workspace={club.workspace_id}")["body"]
    keys = re.findall(r'<input type="hidden" name="key" value="([^"]*)"', html)
    assert keys and all(keys) and len(set(keys)) == len(keys)
