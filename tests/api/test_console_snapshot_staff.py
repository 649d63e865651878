"""The console's snapshot staff pages against the real API resolver and database: a
period's page (every version with requester, reason, chunks, times; cancel and finalize
with a reason, a blank one refused on its field with the text kept; nothing offered to a
reader), and a range request chosen by workspace name, previewed, requested and followed."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from html import unescape

from tests.api.conftest import NOW, Caller
from tests.api.test_console import Browser, _header
from timekeeper.platform.directory import create_workspace
from timekeeper.snapshots import ledger

SINCE = datetime(2026, 10, 15, tzinfo=UTC)


def _staff(console) -> Browser:
    browser = Browser(console)
    browser.sign_in(Caller(user_id="staff-1", roles="platform:staff"), ("platform:staff",))
    return browser


def _club(conn, name: str) -> Caller:
    caller = Caller(roles="snapshots:read")
    create_workspace(conn, name=name, timezone="Europe/Berlin", currency="EUR", now=SINCE,
                     workspace_id=caller.workspace_id)
    return caller


def _previewed(staff: Browser, fields: list[tuple[str, str]]) -> dict:
    """Post the range form's Preview and follow its 303 to the GET preview (Post/Redirect/Get)."""
    posted = staff.request("POST", "/console/snapshots/ranges/preview", fields)
    assert posted["statusCode"] == 303, posted["body"][:2000]
    location = unescape(_header(posted, "Location"))
    assert location.startswith("/console/snapshots/ranges/preview?")
    return staff.get_decoded(location)


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _backfill(conn, club: Caller, period="2026-11-01") -> str:
    run = conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, created_at, updated_at)
        VALUES ('platform', 'ar_aging', %s, %s, 1, 'backfill', 'gap <b>', 'staff-0', 'planned', %s, %s)
        RETURNING id""", (club.workspace_id, period, NOW, NOW)).fetchone()
    return str(run["id"])


def test_staff_cancel_a_planned_request_on_its_periods_page_and_a_blank_reason_is_refused_on_its_field(console,
                                                                                                      conn):
    club = _club(conn, "Rowing club")
    run_id = _backfill(conn, club)
    staff = _staff(console)
    page = f"/console/snapshots/periods/platform/ar_aging/2026-11?workspace={club.workspace_id}"
    html = staff.get_decoded(page)["body"]
    # The period's page names the workspace, the requester and the reason (escaped), and offers Cancel
    assert "<bdi>Rowing club</bdi>" in html and str(club.workspace_id) not in re.sub(r"<[^>]+>", "", html)
    assert 'by <bdi title="staff-0">staff-0</bdi>: <bdi>gap &lt;b&gt;</bdi>' in html and "0 chunks done" in html
    assert "Cancel this request" in html and "Finalize this version" not in html
    form = {"csrf": _csrf(html), "workspace": str(club.workspace_id), "owner": "platform",
            "snapshot_type": "ar_aging", "period": "2026-11"}
    # When the reason is only invisible characters: 422 on the reason, the text kept
    blank = staff.request("POST", f"/console/snapshots/runs/{run_id}/cancel", {**form, "reason": "\u200b "})
    assert blank["statusCode"] == 422
    assert 'aria-invalid="true"' in blank["body"] and "(reason)</small>" in blank["body"]
    assert ">\u200b </textarea>" in blank["body"]
    # When a reason is given: the request is cancelled, with who and why
    done = staff.request("POST", f"/console/snapshots/runs/{run_id}/cancel", {**form, "reason": "asked twice"})
    assert done["statusCode"] == 303, done["body"]
    after = staff.get_decoded(unescape(_header(done, "Location")))["body"]
    assert "The request was cancelled." in after
    assert 'cancelled by <bdi title="staff-1">staff-1</bdi>: <bdi>asked twice</bdi>' in after
    assert "Cancel this request" not in after
    assert conn.execute("SELECT state FROM snapshot_runs WHERE id = %s", (run_id,)).fetchone()["state"] == "cancelled"


def test_staff_finalize_a_published_version_and_a_reader_is_offered_no_action(console, conn):
    club = _club(conn, "Chess club")
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, attempts,
                                   chunks_committed, is_current, published_at, basis, created_at, updated_at)
        VALUES ('platform', 'ar_aging', %(w)s, '2026-11-01', 1, 'planned', 'published', 1, 3, true, %(now)s,
                '{"rows": 3}', %(now)s, %(now)s)""", {"w": club.workspace_id, "now": NOW})
    staff = _staff(console)
    page = f"/console/snapshots/periods/platform/ar_aging/2026-11?workspace={club.workspace_id}"
    html = staff.get_decoded(page)["body"]
    assert "Finalize this version" in html and "3 chunks done" in html and "(2027-03-01 12:00 UTC)" in html
    assert "<strong>Now:</strong> Published (version 1)." in html and 'class="instants"' in html
    run_id = re.search(r'/console/snapshots/runs/([0-9a-f-]+)/finalize', html).group(1)
    done = staff.request("POST", f"/console/snapshots/runs/{run_id}/finalize", {
        "csrf": _csrf(html), "workspace": str(club.workspace_id), "owner": "platform", "snapshot_type": "ar_aging",
        "period": "2026-11", "reason": "books closed"})
    assert done["statusCode"] == 303, done["body"]
    after = staff.get_decoded(unescape(_header(done, "Location")))["body"]
    assert '<span class="mark">finalized</span>' in after and "Finalize this version" not in after
    # And its page says why there is no re-run form
    assert "<strong>Now:</strong> Finalized (version 1): no re-run or backfill" in after
    assert "Re-run this month" not in after
    # A reader of the workspace sees the versions, no actions
    reader = Browser(console)
    reader.sign_in(club, ("snapshots:read",))
    own = reader.get_decoded("/console/snapshots/periods/platform/ar_aging/2026-11")["body"]
    assert '<span class="mark">finalized</span>' in own
    assert "<th scope=\"col\">Actions</th>" not in own and "/finalize" not in own


def test_a_range_is_chosen_by_name_previewed_requested_and_followed(console, conn):
    rowing, chess = _club(conn, "Rowing club"), _club(conn, "Chess club")
    december = _backfill(conn, rowing, "2026-12-01")  # Rowing's December has a run (it failed)
    conn.execute("UPDATE snapshot_runs SET state = 'failed' WHERE id = %s", (december,))
    staff = _staff(console)
    # The form finds workspaces by name (no id shown)
    form_page = staff.get_decoded("/console/snapshots/ranges?search=club")["body"]
    assert "<bdi>Chess club</bdi>" in form_page and "<bdi>Rowing club</bdi>" in form_page
    fields = [("csrf", _csrf(form_page)), ("workspace_id", str(rowing.workspace_id)),
              ("workspace_id", str(chess.workspace_id)), ("type", "platform:ar_aging"), ("first", "2026-11"),
              ("through", "2026-12"), ("mode", "backfill"), ("reason", "")]
    # A blank reason is refused on its field, the choices kept
    blank = _previewed(staff, fields)
    assert blank["statusCode"] == 422 and "(reason)</small>" in blank["body"]
    assert blank["body"].count(" checked>") == 2
    # The preview lists each month: planned, or refused with the reason
    fields[-1] = ("reason", "fill the autumn")
    posted = staff.request("POST", "/console/snapshots/ranges/preview", fields)
    preview = _previewed(staff, fields)
    assert preview["statusCode"] == 200, preview["body"]
    text = re.sub(r"\s+", " ", preview["body"])
    assert "3 months would be planned, 1 refused" in text
    # The preview is a GET page carrying the form's fields (Back from the progress returns to it;
    # a reload previews again): no CSRF token and no session secret in its address
    address = unescape(_header(posted, "Location"))
    assert "csrf" not in address and "reason=fill+the+autumn" in address
    assert address.count("workspace_id=") == 2
    assert re.search(r"<bdi>Rowing club</bdi></td><td>2026-12</td> <td>refused: <span[^>]*>Already planned", text)
    assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE workspace_id IN (%s, %s)",
                        (rowing.workspace_id, chess.workspace_id)).fetchone()["n"] == 1
    # Requesting it plans those months and leads to the range's progress
    confirm = [(k, unescape(v)) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"',
                                                      preview["body"].split('action="/console/snapshots/ranges"')[1])]
    done = staff.request("POST", "/console/snapshots/ranges", confirm)
    assert done["statusCode"] == 303, done["body"]
    progress = staff.get_decoded(_header(done, "Location"))["body"]
    assert "Range request: 0 of 3 done" in progress and "waiting for admission: 3" in progress
    # Back from the progress page is the GET preview again: it records nothing, and now says the
    # months are planned
    back = staff.get_decoded(address)
    assert back["statusCode"] == 200 and "0 months would be planned, 4 refused" in re.sub(r"\s+", " ", back["body"])
    assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE workspace_id IN (%s, %s)",
                        (rowing.workspace_id, chess.workspace_id)).fetchone()["n"] == 4
    # The same range requested again (another preview's confirmation: a key of its own) plans nothing (the
    # API's 200, no group): the outcome is shown, not a fault
    twice = staff.request("POST", "/console/snapshots/ranges",
                          [(k, "another-preview" if k == "key" else v) for k, v in confirm])
    assert twice["statusCode"] == 409 and "Nothing was planned</h1>" in twice["body"], twice["body"]
    # Its months are planned and not started: the advice is to follow or cancel them, never a re-run
    again = unescape(re.sub(r"<[^>]+>", "", twice["body"]))
    assert "Already planned: request a re-run" not in again
    # (Rowing's December failed: nothing is in progress, so a re-run is what it needs)
    assert "Receivables aging 2026-12 was planned already (version 1 is failed): a backfill is for a month " \
           "never planned; request a re-run" in again
    assert "Receivables aging 2026-11 was planned already: version 1 is planned (not started); " \
           "cancel it to request a re-run" in again, again
    assert f'href="/console/snapshots/periods/platform/ar_aging/2026-11?workspace={chess.workspace_id}">' \
           "Its progress: <bdi>Chess club</bdi>, 2026-11</a>" in twice["body"]
    # Admission moves them on (other tests' waiting runs out of its way); the page shows it
    conn.execute("DELETE FROM snapshot_runs WHERE state <> 'published' AND workspace_id NOT IN (%s, %s)",
                 (rowing.workspace_id, chess.workspace_id))
    with conn.transaction():
        ledger.admit(conn, owner="platform", now=NOW, cap=4, backfill_lane=1)
    moved = staff.get_decoded(_header(done, "Location"))["body"]
    assert "admitted: 1" in moved and "waiting for admission: 2" in moved
    # The progress updates itself while runs are unfinished: its block polls its live fragment
    live = f'{_header(done, "Location")}/live'
    assert f'data-live="{live}"' in moved
    fragment = staff.get_decoded(live)
    assert fragment["statusCode"] == 200 and fragment["body"].lstrip().startswith('<div id="range-progress"')
    assert "admitted: 1" in fragment["body"] and "<html" not in fragment["body"]
    # Each month's page links its version to the range
    month_page = re.search(r'<a href="([^"]+)">2026-11</a>', progress).group(1)
    assert f'part of <a href="{_header(done, "Location")}">a range request</a>' in staff.get_decoded(
        unescape(month_page))["body"]
    # The subtitle names the requester by name
    conn.execute("UPDATE users SET display_name = 'Ada Staff' WHERE id = 'staff-1'")
    assert "backfill by <bdi>Ada Staff</bdi>" in staff.get_decoded(_header(done, "Location"))["body"]
    # The fragment carries the heading, so the count updates with the rows
    assert "Range request: 0 of 3 done" in fragment["body"]
    conn.execute("UPDATE snapshot_runs SET state = 'published', is_current = true WHERE workspace_id = %s "
                 "AND period = '2026-11-01'", (chess.workspace_id,))
    assert "Range request: 1 of 3 done" in staff.get_decoded(live)["body"]
    # A reader gets no fragment
    reader = Browser(console)
    reader.sign_in(rowing, ("snapshots:read",))
    assert reader.get_decoded(live)["statusCode"] == 403
    # The range page lists it among the recent range requests, linked to its progress
    ranges = re.sub(r"\s+", " ", staff.get_decoded("/console/snapshots/ranges")["body"])
    recent = ranges.split("Recent range requests")[1].split("A new range request")[0]
    assert f'href="{_header(done, "Location")}"' in recent
    assert "<bdi>Ada Staff</bdi>" in recent and "Receivables aging" in recent
    assert "backfill" in recent and "2026-11 to 2026-12" in recent and "1 of 3 done" in recent


def test_a_reader_is_refused_the_range_pages(console, conn):
    club = _club(conn, "Rowing club")
    reader = Browser(console)
    reader.sign_in(club, ("snapshots:read",))
    assert reader.get_decoded("/console/snapshots/ranges")["statusCode"] == 403


def test_staff_find_a_workspace_by_name_and_backfill_a_missing_month_from_its_row(console, conn):
    tag = uuid.uuid4().hex[:8]
    rowing, _ = _club(conn, f"Rowing club {tag}"), _club(conn, f"Rowing team {tag}")
    staff = _staff(console)
    # Two names match: both offered by name; none: a 404 saying so
    several = staff.get_decoded(f"/console/snapshots?name={tag}")
    assert several["statusCode"] == 200 and f"<bdi>Rowing team {tag}</bdi>" in several["body"]
    assert staff.get_decoded("/console/snapshots?name=nobody")["statusCode"] == 404
    # One match: its periods, named, each missing month with a Backfill form
    html = staff.get_decoded(f"/console/snapshots?name=rowing club {tag}&status=missing")["body"]
    assert f"Workspace <bdi>Rowing club {tag}</bdi>" in html
    assert str(rowing.workspace_id) not in re.sub(r"<[^>]+>", "", html)
    assert "Reason to backfill 2026-11" in html and "Re-run</button>" not in html
    form = [("csrf", _csrf(html)), ("workspace_id", str(rowing.workspace_id)), ("type", "platform:ar_aging"),
            ("period", "2026-11"), ("mode", "backfill")]
    blank = staff.request("POST", "/console/snapshots/requests", [*form, ("reason", " \u2060 ")])
    assert blank["statusCode"] == 422 and "(reason)" in blank["body"]
    assert "> \u2060 </textarea>" in blank["body"]
    done = staff.request("POST", "/console/snapshots/requests", [*form, ("reason", "fill November")])
    assert done["statusCode"] == 303, done["body"]
    run = conn.execute("SELECT mode, reason FROM snapshot_runs WHERE workspace_id = %s AND snapshot_type = 'ar_aging'",
                       (rowing.workspace_id,)).fetchone()
    assert (run["mode"], run["reason"]) == ("backfill", "fill November")


def test_older_missing_months_are_folded_behind_their_count(console, conn):
    # Given a workspace since January 2024 without runs: at NOW its older months are missing, not overdue
    club = Caller(roles="snapshots:read")
    create_workspace(conn, name="Old club", timezone="Europe/Berlin", currency="EUR",
                     now=datetime(2024, 1, 15, tzinfo=UTC), workspace_id=club.workspace_id)
    reader = Browser(console)
    reader.sign_in(club, ("snapshots:read",))
    html = reader.get_decoded("/console/snapshots")["body"]
    # Then the overdue months come first and the rest is behind "n older months never planned"
    folded = re.search(r'<details class="folded">\s*<summary>(\d+) older months never planned', html)
    assert folded, html
    shown, hidden = html.split('<details class="folded">')
    assert "overdue</span>" in shown and "overdue</span>" not in hidden
    assert int(folded.group(1)) == hidden.count("<tr><td>")
    # And a status filter shows them without folding
    assert '<details class="folded">' not in reader.get_decoded("/console/snapshots?status=missing")["body"]


def test_staff_scan_every_workspaces_periods_failed_first_and_a_bad_filter_names_itself(console, conn):
    tag = uuid.uuid4().hex[:8]
    rowing, chess = _club(conn, f"Rowing {tag}"), _club(conn, f"Chess {tag}")
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, is_current,
                                   published_at, failure_code, created_at, updated_at)
        VALUES ('platform', 'ar_aging', %(r)s, '2026-11-01', 1, 'planned', 'published', true, %(now)s, NULL,
                %(now)s, %(now)s),
               ('platform', 'ar_aging', %(c)s, '2026-11-01', 1, 'planned', 'failed', false, NULL,
                'retries_exhausted', %(now)s, %(now)s)""",
                 {"r": rowing.workspace_id, "c": chess.workspace_id, "now": NOW})
    staff = _staff(console)
    html = staff.get_decoded(f"/console/snapshots/staff?search={tag}")["body"]
    rows = re.findall(r"<tr><td><a [^>]*><bdi>([^<]+)</bdi></a></td>", html)
    assert rows == [f"Chess {tag}", f"Rowing {tag}"]  # the failed period first
    assert str(chess.workspace_id) not in re.sub(r"<[^>]+>", "", html)
    refused = staff.get_decoded(f"/console/snapshots/staff?search={tag}&first=2027-02&through=2026-12")
    assert refused["statusCode"] == 422 and "(through)</small>" in refused["body"]
    assert 'value="2027-02"' in refused["body"] and f'value="{tag}"' in refused["body"]
    reader = Browser(console)
    reader.sign_in(rowing, ("snapshots:read",))
    assert reader.get_decoded("/console/snapshots/staff")["statusCode"] == 403


def _failed(conn, club: Caller, period="2026-11-01") -> str:
    return str(conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, attempts,
                                   failure_code, failure_message, created_at, updated_at)
        VALUES ('platform', 'selftest', %s, %s, 1, 'planned', 'failed', 1, 'selftest_mismatch',
                'wrote 7 rows of 1000', %s, %s) RETURNING id""",
        (club.workspace_id, period, NOW, NOW)).fetchone()["id"])


def test_a_failed_period_is_re_run_from_its_own_page_and_the_new_version_says_what_it_waits_for(console, conn):
    # Given a failed self-test month, its failure read on its page by staff whose name the directory knows
    club = _club(conn, "Sculling club")
    conn.execute("UPDATE snapshot_runs SET chunks_committed = 1 WHERE id = %s", (_failed(conn, club),))
    conn.execute("INSERT INTO users (id, display_name, email, status, created_at) VALUES ('staff-1', 'Ada Admin', "
                 "NULL, 'active', %s) ON CONFLICT (id) DO UPDATE SET display_name = 'Ada Admin'", (NOW,))
    staff = _staff(console)
    page = f"/console/snapshots/periods/platform/selftest/2026-11?workspace={club.workspace_id}"
    html = staff.get_decoded(page)["body"]
    assert "wrote 7 rows of 1000" in html and "<strong>Now:</strong> Failed:" in html
    assert re.search(r"<small>failed</small> <time datetime=", html) and "1 chunk done" in html
    assert "Re-run this month" in html and 'title="staff-1"><bdi>Ada Admin</bdi>' in html  # the header's name
    form = {"csrf": _csrf(html), "form": "period", "workspace_id": str(club.workspace_id),
            "type": "platform:selftest", "period": "2026-11", "mode": "manual"}
    # When the reason is blank: refused on the page's own form, the page kept
    blank = staff.request("POST", "/console/snapshots/requests", {**form, "reason": "\u200b"})
    assert blank["statusCode"] == 422 and 'id="reason-request-error"' in blank["body"]
    assert "Re-run this month" in blank["body"]
    # When staff re-run it with a reason: back on the period, version 2 planned by them, by name
    done = staff.request("POST", "/console/snapshots/requests", {**form, "reason": "the drill is over"})
    assert done["statusCode"] == 303, done["body"]
    location = unescape(_header(done, "Location"))
    assert location.startswith("/console/snapshots/periods/platform/selftest/2026-11?")
    after = staff.get_decoded(location)["body"]
    assert "Your request was recorded" in after and 'by <bdi title="staff-1">Ada Admin</bdi>' in after
    # And the page says what version 2 waits for, by admission's rule, and offers no second re-run
    assert "<strong>Now:</strong> Planned: the next admission pass (every 1 minute) admits it." in after
    assert "Re-run this month" not in after
    # And cancel and finalize ask first (finalize: irreversible)
    assert 'data-confirm="Cancel version 2 of 2026-11?' in after


def test_a_planned_version_waiting_for_a_full_cap_says_so(console, conn):
    club = _club(conn, "Canoe club")
    for month in ("2026-01-01", "2026-02-01", "2026-03-01", "2026-04-01"):
        conn.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, created_at,
                                       updated_at) VALUES ('platform', 'membership_counts', %s, %s, 1, 'planned',
                                       'running', %s, %s)""", (club.workspace_id, month, NOW, NOW))
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, created_at,
                                   updated_at) VALUES ('platform', 'selftest', %s, '2026-11-01', 1, 'planned',
                                   'planned', %s, %s)""", (club.workspace_id, NOW, NOW))
    html = _staff(console).get_decoded(
        f"/console/snapshots/periods/platform/selftest/2026-11?workspace={club.workspace_id}")["body"]
    assert re.search(r"Waiting for admission: \d+ running or queued of this module.s snapshots \(cap 4, 1 kept for "
                     r"backfills\), \d+ planned before it", unescape(html)), html


def test_a_refused_request_keeps_what_was_typed_and_names_the_type_and_what_to_do(console, conn):
    club = _club(conn, "Dragon boats")
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, created_at,
                                   updated_at) VALUES ('platform', 'selftest', %s, '2026-11-01', 1, 'planned',
                                   'planned', %s, %s)""", (club.workspace_id, NOW, NOW))
    staff = _staff(console)
    html = staff.get_decoded(f"/console/snapshots?workspace={club.workspace_id}")["body"]
    refused = staff.request("POST", "/console/snapshots/requests", {
        "csrf": _csrf(html), "form": "general", "workspace_id": str(club.workspace_id), "type": "platform:selftest",
        "period": "2026-11", "mode": "manual", "reason": "my typed reason"})
    assert refused["statusCode"] == 409
    body = unescape(refused["body"])
    assert "Self-test 2026-11 has version 1 planned (not started); cancel it to request a re-run" in body
    assert '<option value="platform:selftest" selected>' in body and 'value="2026-11"' in body
    assert ">my typed reason</textarea>" in body


def test_a_backfill_of_a_finalized_month_gives_one_message(console, conn):
    club = _club(conn, "Regatta club")
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, is_current,
                                   protection, published_at, created_at, updated_at)
        VALUES ('platform', 'selftest', %s, '2026-11-01', 1, 'planned', 'published', true, 'finalized', %s, %s,
                %s)""", (club.workspace_id, NOW, NOW, NOW))
    staff = _staff(console)
    html = staff.get_decoded(f"/console/snapshots?workspace={club.workspace_id}")["body"]
    refused = staff.request("POST", "/console/snapshots/requests", {
        "csrf": _csrf(html), "form": "general", "workspace_id": str(club.workspace_id), "type": "platform:selftest",
        "period": "2026-11", "mode": "backfill", "reason": "again"})
    body = unescape(refused["body"])
    assert refused["statusCode"] == 409
    assert "Refused: the current version of Self-test 2026-11 (version 1) is finalized" in body
    assert "(mode)" not in body and "request a re-run" not in body


def test_the_staff_periods_page_marks_and_filters_overdue_periods_never_planned_ones_among_them(console, conn):
    # Given a club whose months in the planner's horizon were never planned but January's, planned, not admitted
    tag = uuid.uuid4().hex[:8]
    club = _club(conn, f"Overdue {tag}")
    _backfill(conn, club, period="2027-01-01")
    staff = _staff(console)
    html = unescape(staff.get_decoded(f"/console/snapshots/staff?search={tag}")["body"])
    # The planned month is marked overdue, and the months never planned are counted with a way to them
    assert '<span class="mark bad">overdue</span>' in html
    assert re.search(r"\d+ overdue months? never planned \(not listed here\)", html), html
    # And status=overdue lists them all, months never planned as Missing
    overdue = unescape(staff.get_decoded(f"/console/snapshots/staff?search={tag}&status=overdue")["body"])
    assert '<option value="overdue" selected>' in overdue
    assert "Missing" in overdue and "2027-01" in overdue and overdue.count('<span class="mark bad">overdue</span>') >= 2
    # And the planned month's Changed time is given there as on the unfiltered page
    row = re.search(r"2027-01</a>.*?</tr>", re.sub(r"\s+", " ", overdue)).group(0)
    assert "(2027-03-01 12:00 UTC)" in row, row


def test_a_skipped_period_shows_why_as_a_failed_one_shows_its_failure(console, conn):
    tag = uuid.uuid4().hex[:8]
    club = _club(conn, f"Skipper {tag}")
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, skip_reason,
                                   created_at, updated_at)
        VALUES ('platform', 'ar_aging', %s, '2026-11-01', 1, 'planned', 'skipped', 'workspace_disabled', %s, %s)""",
                 (club.workspace_id, NOW, NOW))
    html = _staff(console).get_decoded(f"/console/snapshots/staff?search={tag}")["body"]
    assert "The workspace is disabled" in html


def test_a_range_of_a_hundred_workspaces_is_previewed_restating_what_it_requests(console, conn):
    tag = uuid.uuid4().hex[:8]
    clubs = [_club(conn, f"Club {tag} {n:03d}") for n in range(100)]
    staff = _staff(console)
    form_page = staff.get_decoded(f"/console/snapshots/ranges?search={tag}")["body"]
    fields = [("csrf", _csrf(form_page)), *[("workspace_id", str(c.workspace_id)) for c in clubs],
              ("type", "platform:membership_counts"), ("first", "2026-11"), ("through", "2026-11"),
              ("mode", "backfill"), ("reason", "the auditors <asked>")]
    preview = _previewed(staff, fields)
    assert preview["statusCode"] == 200, preview["body"][:2000]
    text = re.sub(r"\s+", " ", unescape(preview["body"]))
    assert "100 months would be planned, 0 refused" in text
    # The preview restates the type, the kind and the reason before the request's button
    restated = text[text.index('<dl class="facts restated">'):text.index("Request these 100 months")]
    assert "Month-end membership counts" in restated or "Membership counts" in restated, restated
    assert "backfill (months never planned)" in restated and "the auditors <asked>" in restated
