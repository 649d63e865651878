"""Sign-out ends the session on the server: a copy of the session cookie is refused
afterwards by every execution environment (pages and state-changing POSTs with the old
CSRF token alike), and a new sign-in gets a fresh session (real API resolver and
database)."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from tests.api.conftest import CONSOLE_KEY, Caller, new_schedule
from tests.api.test_console import Browser, _header
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.console.sessions import Sessions
from timekeeper.db.connection import login_url
from timekeeper.edge import registries


def _sid(cookie: str) -> str:
    return Sessions(CONSOLE_KEY).read(cookie).sid


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def test_a_copied_cookie_is_refused_after_sign_out_everywhere(console, call, caller, db_url, publisher, clock_now):
    schedule = call("POST", "/schedules", new_schedule()).body
    path = f"/console/schedules/{schedule['id']}"
    browser = Browser(console)
    browser.sign_in(caller)
    copied, token = browser.cookie, browser.csrf(path)
    # Another execution environment: its own API resolver, connection and console
    conn = connect_api(login_url(db_url, API_ROLE))
    try:
        other_api = create_app(ApiAdapters(connection=lambda: conn, publisher_for=lambda _: publisher,
                                           registry=registries.work_kinds, now=lambda: clock_now["now"]))
        elsewhere = Browser(create_console(lambda e, c: other_api.resolve(e, c),
                                           ConsoleSettings(session_key=CONSOLE_KEY, dev_sign_in=True)))
        elsewhere.cookie = copied
        assert elsewhere.request("GET", path)["statusCode"] == 200  # the copy works while signed in

        # When the person signs out
        out = browser.request("POST", "/console/sign-out", {"csrf": token})
        assert out["statusCode"] == 303 and _header(out, "Location") == "/console/sign-in"
        assert browser.cookie is None

        # Then the copied cookie opens no page and changes nothing, here and elsewhere
        for where in (Browser(console), elsewhere):
            where.cookie = copied
            for target in (path, "/console/schedules", "/console/notices"):
                page = where.request("GET", target)
                # (to sign in, coming back to the page asked for)
                assert page["statusCode"] == 303, target
                assert _header(page, "Location") == "/console/sign-in?" + urlencode({"next": target}), target
            for action in ("pause", "run"):
                refused = where.request("POST", f"{path}/{action}", {"csrf": token, "key": "k-1"})
                assert refused["statusCode"] == 303 and _header(refused, "Location") == "/console/sign-in"
            assert where.request("POST", "/console/sign-out", {"csrf": token})["statusCode"] == 303
        detail = call("GET", f"/schedules/{schedule['id']}").body
        assert detail["schedule"]["status"] == "active" and detail["history"]["runs"] == []
    finally:
        conn.close()


def test_a_new_sign_in_is_a_fresh_session_and_the_old_one_stays_out(console, call, caller):
    schedule = call("POST", "/schedules", new_schedule()).body
    path = f"/console/schedules/{schedule['id']}"
    browser = Browser(console)
    browser.sign_in(caller)
    first = browser.cookie
    assert browser.request("POST", "/console/sign-out", {"csrf": browser.csrf(path)})["statusCode"] == 303
    # When the same person signs in again
    browser.sign_in(caller)
    # Then the session is a new one that works, and the signed-out one stays refused
    assert browser.cookie != first and _sid(browser.cookie) != _sid(first)
    paused = browser.request("POST", f"{path}/pause", {"csrf": browser.csrf(path)})
    assert paused["statusCode"] == 303 and "done=pause" in _header(paused, "Location")
    old = Browser(console)
    old.cookie = first
    assert old.request("GET", path)["statusCode"] == 303
    # And two sign-ins in a row are two sessions, each signed out on its own
    again = Browser(console)
    again.sign_in(caller)
    assert _sid(again.cookie) != _sid(browser.cookie)
    assert again.request("GET", path)["statusCode"] == 200


def test_the_session_routes_see_the_caller_s_workspace_only(call, caller):
    # (the caller's display name beside it: what the console's header shows)
    named = call("GET", "/sessions/abc_DEF-1").body
    assert named == {"session_id": "abc_DEF-1", "revoked_at": None, "display_name": named["display_name"]}
    assert named["display_name"]
    revoked = call("POST", "/sessions/abc_DEF-1/revocation")
    assert revoked.status == 200 and revoked.body["revoked_at"] is not None
    again = call("POST", "/sessions/abc_DEF-1/revocation")
    assert again.body == revoked.body  # repeating it changes nothing
    assert call("GET", "/sessions/abc_DEF-1").body["revoked_at"] == revoked.body["revoked_at"]
    stranger = Caller()
    assert call("GET", "/sessions/abc_DEF-1", as_=stranger).body["revoked_at"] is None
    bad = call("GET", "/sessions/a%20b")
    assert bad.status == 422 and bad.body["field"] == "session_id"
    assert call("GET", "/sessions/x", claims=None).status == 401


def test_a_session_the_api_cannot_check_is_an_error_page_never_the_page(app, caller):
    def unavailable(event, context):
        if event["path"].startswith("/sessions/"):
            return {"statusCode": 503, "body": '{"code": "database_unavailable", "message": "the database did not '
                    'answer; retry the request"}', "headers": {"Content-Type": "application/json"}}
        return app.resolve(event, context)

    browser = Browser(create_console(unavailable, ConsoleSettings(session_key=CONSOLE_KEY, dev_sign_in=True)))
    browser.sign_in(caller)
    page = browser.request("GET", "/console/schedules")
    assert page["statusCode"] == 503 and "text/html" in _header(page, "Content-Type")
    assert "the database did not answer" in page["body"] and "<table" not in page["body"]
    assert browser.request("GET", "/console/no-such-page")["statusCode"] in (404, 503)
    refused = browser.request("POST", "/console/sign-out", {"csrf": "x"})
    assert refused["statusCode"] == 503 and "the database did not answer" in refused["body"]
