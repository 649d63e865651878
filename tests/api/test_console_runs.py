"""The console's run page and its actions against the real API resolver and database: the
page shows the run's schedule, occurrence with its DST mark and the failed attempt's error,
offers only the actions the person may use and that apply, and an action without a reason
comes back with the API's reason by its field and what was typed kept."""

from __future__ import annotations

import re
from datetime import timedelta

from tests.api.conftest import CONSOLE_KEY, Caller
from tests.api.test_console import Browser, _header
from tests.api.test_run_routes import LONG_AGO, seed_run
from timekeeper.console.app import ConsoleSettings, create_console

ADMIN_ROLES = ("schedules:read", "schedules:run", "schedules:admin")


def test_the_run_page_shows_the_failed_attempt_and_offers_retry_to_a_runner(console, conn):
    who = Caller(user_id="ops-1")
    conn.execute("TRUNCATE schedule_run_attempts, schedule_run_actions, schedule_events, schedule_runs, schedules "
                 "CASCADE")
    sweep, run_id = seed_run(conn, who.workspace_id, state="failed", attempts=3, started_at=LONG_AGO,
                             finished_at=LONG_AGO + timedelta(seconds=42), outcome_code="reconciliation_failed",
                             error="<b>bank</b> feed unreachable (bank:operating)", offer_count=1,
                             attempt_started_at=LONG_AGO, attempt_receive_count=3)
    for attempt, error in ((1, "feed timed out (bank:operating)"), (2, None)):
        conn.execute("INSERT INTO schedule_run_attempts (run_id, attempt, workspace_id, receive_count, started_at, "
                     "ended_at, ended, error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                     (run_id, attempt, who.workspace_id, attempt, LONG_AGO - timedelta(minutes=10 - attempt),
                      LONG_AGO - timedelta(minutes=9 - attempt), "retried" if error else "taken_over", error))
    conn.execute("UPDATE schedules SET name = %s WHERE id = %s", ("Sweep \u202eevil", sweep.id))
    conn.commit()
    browser = Browser(console)
    browser.sign_in(who, roles=("schedules:read", "schedules:run"))

    page = browser.request("GET", f"/console/runs/{run_id}")

    assert page["statusCode"] == 200, page["body"]
    html = page["body"]
    assert "&lt;b&gt;bank&lt;/b&gt; feed unreachable" in html
    assert "<bdi>Sweep \u202eevil</bdi>" in html
    assert 'DST shift' in html and "42.0 s" in html and "timekeeper-accounting-runs" in html
    assert f'href="/console/schedules/{sweep.id}"' in html
    assert f'action="/console/runs/{run_id}/retry"' in html
    # Its confirmation says it is a retry of this run and names the occurrence
    assert ('data-confirm="Retry the run of Sweep \u202eevil for 2027-03-01 12:44 CET now? A new run is queued; '
            'this one stays failed."') in html
    # Not queued and not stuck: no cancel nor settle; a runner without admin: none anyway
    assert "/cancel" not in html and "/fail" not in html
    # Read as the other pages: the occurrence to the minute with its zone, the error's internal
    # code apart, the consumer in words, no run id repeated as a message id, no "1 offers"
    assert '2027-03-01 12:44 CET</time>' in html and "(2027-03-01 11:44 UTC)" in html
    assert "feed unreachable</bdi> <small>(<code>bank:operating</code>)</small>" in html
    # Every attempt, the first at the top: the two superseded ones with how they ended
    rows = re.findall(r"<tr><td>(\d)</td><td>(\d)</td>", html)
    assert rows == [("1", "1"), ("2", "2"), ("3", "3")] and "(3 attempts)" in html
    assert "feed timed out</bdi> <small>(<code>bank:operating</code>)</small>" in html
    assert "failed; the run was retried" in html and "a later receive took the run over" in html
    assert "the <span" in html and "Accounting</span> consumer" in html
    assert "Message id" not in html and "offers)" not in html and '<th scope="col">Attempt</th>' in html
    assert "not recorded; its consumer received it" in html


def test_a_retry_says_which_run_it_retries_and_why_and_offers_no_retry_while_queued(console, conn):
    who = Caller(user_id="ops-3")
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    sweep, run_id = seed_run(conn, who.workspace_id, state="failed", attempts=1, started_at=LONG_AGO,
                             finished_at=LONG_AGO, outcome_code="reconciliation_failed")
    conn.execute("UPDATE schedules SET created_by = 'serve-sample' WHERE id = %s", (sweep.id,))
    conn.commit()
    browser = Browser(console)
    browser.sign_in(who, roles=("schedules:read", "schedules:run"))
    conn.execute("UPDATE users SET display_name = 'Olga Ops' WHERE id = 'ops-3'")
    conn.commit()
    html = browser.request("GET", f"/console/runs/{run_id}")["body"]
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)

    done = browser.request("POST", f"/console/runs/{run_id}/retry", {"csrf": csrf, "reason": "feed <back>"})

    assert done["statusCode"] == 303
    new_page = browser.request("GET", _header(done, "Location"))["body"]
    # People by their display name (the user id in the title), here and on the retried run
    olga = '<span title="ops-3"><bdi>Olga Ops</bdi></span>'
    assert f'Retry of <a href="/console/runs/{run_id}">an earlier run</a> by {olga}' in new_page
    assert f"Run now requested</span> (a retry) by {olga}" in new_page and "ops-3</bdi>" not in new_page
    old_page = browser.request("GET", f"/console/runs/{run_id}")["body"]
    assert f"Retry now</span> by {olga}" in old_page
    assert "<bdi>feed &lt;back&gt;</bdi>" in new_page
    # The new run is still queued: nothing to retry yet
    assert "/retry" not in new_page.split("<h2>Operators' actions</h2>")[0]
    # The schedule's runs mark the retry with the run it retried (the retried run is no retry)
    schedule_page = browser.request("GET", f"/console/schedules/{sweep.id}")["body"]
    assert schedule_page.count("retry of <a") == 1
    assert f'retry of <a href="/console/runs/{run_id}">an earlier run</a>' in schedule_page
    assert f"Retry by {olga}" in schedule_page and "(ops-3)" not in schedule_page
    # Its History says the Run now request was a retry, as the run page and the audit log do
    history = schedule_page[schedule_page.index("<h2>History</h2>"):]
    assert f"Run now requested</span> (a retry) by {olga}" in history
    assert "A run is under way" in schedule_page and "A run is stuck" not in schedule_page
    # The sample data's author in words, not its actor id
    assert 'Made by</dt><dd><span title="serve-sample">sample data</span>' in schedule_page
    assert 'name="reason"' not in new_page


def test_cancel_needs_a_reason_then_cancels_and_is_listed(console, conn):
    who = Caller(user_id="ops-2")
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    sweep, run_id = seed_run(conn, who.workspace_id)
    browser = Browser(console)
    browser.sign_in(who, roles=ADMIN_ROLES)
    html = browser.request("GET", f"/console/runs/{run_id}")["body"]
    assert f'action="/console/runs/{run_id}/cancel"' in html
    assert f'action="/console/runs/{run_id}/fail"' in html  # queued and unsent for too long: stuck
    # Its schedule's page (and the live block) say the run is stuck, not under way, and link it
    for path in (f"/console/schedules/{sweep.id}", f"/console/schedules/{sweep.id}/live"):
        block = browser.request("GET", path)["body"]
        assert ("A run is stuck: waiting to be sent again. "
                f'<a href="/console/runs/{run_id}">Open the run</a>') in block and "under way" not in block
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)

    refused = browser.request("POST", f"/console/runs/{run_id}/cancel", {"csrf": csrf, "reason": " \u200b "})
    assert refused["statusCode"] == 422
    assert 'id="reason-cancel" name="reason" required maxlength="500" value=" \u200b " aria-invalid="true"' in \
        refused["body"]
    assert conn.execute("SELECT state FROM schedule_runs WHERE id = %s", (run_id,)).fetchone()["state"] == "queued"

    done = browser.request("POST", f"/console/runs/{run_id}/cancel", {"csrf": csrf, "reason": "duplicate"})
    assert done["statusCode"] == 303
    after = browser.request("GET", _header(done, "Location"))["body"]
    assert "The run was cancelled." in after and "duplicate" in after
    assert conn.execute("SELECT state FROM schedule_runs WHERE id = %s", (run_id,)).fetchone()["state"] == "skipped"


def test_the_stuck_banner_costs_no_api_request_of_its_own_per_live_refresh(app, conn, call, db_url):
    who = Caller(user_id="ops-4")
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    sweep, run_id = seed_run(conn, who.workspace_id)  # queued and unsent for too long: stuck
    asked: list[str] = []

    def api(event, context):
        asked.append(f"{event['httpMethod']} {event['path']}")
        return app.resolve(event, context)

    console = create_console(api, ConsoleSettings(session_key=CONSOLE_KEY, dev_sign_in=True, secure_cookies=True))
    console.db_url = db_url
    browser = Browser(console)
    browser.sign_in(who, roles=("schedules:read",))
    asked.clear()

    # When the schedule page's runs block refreshes itself
    block = browser.request("GET", f"/console/schedules/{sweep.id}/live")["body"]

    # Then it says the run is stuck, from the schedule's own read: the session's check and
    # the schedule (no GET /runs/{id} beside them)
    assert f'A run is stuck: waiting to be sent again. <a href="/console/runs/{run_id}">Open the run</a>' in block
    assert [a.rsplit("/", 1)[0] for a in asked] == ["GET /sessions", "GET /schedules"], asked
    assert asked[1] == f"GET /schedules/{sweep.id}"
    # and the API says why for each run under way
    runs = call("GET", f"/schedules/{sweep.id}", as_=who).body["history"]["runs"]
    assert [(r["id"], r["stuck"]) for r in runs] == [(str(run_id), "not_published")]


def test_a_run_page_offers_no_action_to_a_reader_and_links_from_the_schedule_page(console, conn):
    who = Caller(user_id="reader-1")
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    sweep, run_id = seed_run(conn, who.workspace_id)
    browser = Browser(console)
    browser.sign_in(who, roles=("schedules:read",))
    html = browser.request("GET", f"/console/runs/{run_id}")["body"]
    assert "Act on this run" not in html and 'method="post" action="/console/runs' not in html
    schedule = browser.request("GET", f"/console/schedules/{sweep.id}")["body"]
    assert f'href="/console/runs/{run_id}"' in schedule


def test_another_workspaces_run_page_is_not_found(console, conn):
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    _, run_id = seed_run(conn, Caller().workspace_id)
    browser = Browser(console)
    browser.sign_in(Caller(user_id="elsewhere"), roles=ADMIN_ROLES)
    assert browser.request("GET", f"/console/runs/{run_id}")["statusCode"] == 404


def test_a_deliverys_runs_link_to_the_run_page(console, call, analyst):
    from tests.api.test_own_route_kinds import DELIVERY

    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "source": {"kind": "query", "query_id": str(query_id)},
                                                "recipients": [who.user_id]}, as_=who)
    run_id = call("POST", f"/query-schedules/{created.body['id']}/run", as_=who).body["run_id"]
    browser = Browser(console)
    browser.sign_in(who, roles=("queries:read", "schedules:read"))

    ledger = browser.request("GET", f"/console/deliveries/{created.body['id']}")["body"]
    assert f'href="/console/runs/{run_id}"' in ledger
    run_page = browser.request("GET", f"/console/runs/{run_id}")
    assert run_page["statusCode"] == 200
    # Its schedule links to the delivery's page (the generic schedule page does not show deliveries)
    assert f'href="/console/deliveries/{created.body["id"]}"' in run_page["body"]
    assert "Retry now" not in run_page["body"]


def test_the_schedules_runs_show_a_succeeded_runs_outcome_and_a_dash_only_for_none_yet(console, conn):
    who = Caller(user_id="reader-2")
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    sweep, run_id = seed_run(conn, who.workspace_id, state="succeeded", attempts=1, started_at=LONG_AGO,
                             finished_at=LONG_AGO, outcome_code="succeeded")
    conn.commit()
    browser = Browser(console)
    browser.sign_in(who, roles=("schedules:read",))
    html = browser.request("GET", f"/console/schedules/{sweep.id}")["body"]
    row = html[html.index(f'href="/console/runs/{run_id}"'):].split("</tr>")[0]
    # The Outcome column says the outcome, as the run page does, not a dash that reads as none
    terms = re.findall(r'<td><span class="term"[^>]*>([^<]+)</span>', row)
    assert terms[-2:] == ["Succeeded", "Succeeded"], terms
