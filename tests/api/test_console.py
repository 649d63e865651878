"""The console's pages against the real API resolver and database: sign-in, the schedules
list and a schedule's page, the actions with their CSRF check, escaping, the security
headers, and the tenant rule seen through the pages."""

from __future__ import annotations

import re
import uuid
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest
import requests

from tests.api.conftest import CONSOLE_KEY, Caller, enrol, new_schedule, proxy_event, serving
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.console.context import CONTENT_SECURITY_POLICY
from timekeeper.console.sessions import SESSION_COOKIE
from timekeeper.local.lambdas import LambdaContext

KEY = CONSOLE_KEY


class Browser:
    """A person's browser against the console resolver: keeps the session cookie."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.cookie: str | None = None

    def request(self, method: str, path: str, form: dict[str, str] | None = None,
                cookie: str | None = "mine") -> dict[str, Any]:
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
        jar = self.cookie if cookie == "mine" else cookie
        if jar:
            headers["Cookie"] = f"{SESSION_COOKIE}={jar}"
        event = proxy_event(method, path, claims=None, body=urlencode(form) if form is not None else None,
                            headers=headers)
        if form is None:
            event["headers"].pop("Content-Type", None)
        response = self.console.resolve(event, LambdaContext(function_name="timekeeper-api"))
        for raw in response.get("cookies") or response.get("multiValueHeaders", {}).get("Set-Cookie", []):
            parsed = SimpleCookie()
            parsed.load(raw)
            if SESSION_COOKIE in parsed:
                self.cookie = parsed[SESSION_COOKIE].value or None
        return response

    def get_decoded(self, target: str, cookie: str | None = "mine") -> dict[str, Any]:
        """GET ``target`` with its query decoded, as API Gateway and ``serve`` pass it on."""
        path, _, query = target.partition("?")
        headers = {"Cookie": f"{SESSION_COOKIE}={self.cookie}"} if cookie == "mine" and self.cookie else {}
        event = proxy_event("GET", path, claims=None, headers=headers)
        event["headers"].pop("Content-Type", None)
        params = parse_qs(query, keep_blank_values=True)
        event["queryStringParameters"] = {k: v[-1] for k, v in params.items()} or None
        event["multiValueQueryStringParameters"] = params or None
        return self.console.resolve(event, LambdaContext(function_name="timekeeper-api"))

    def sign_in(self, caller: Caller, roles: tuple[str, ...] = ("schedules:read", "schedules:write",
                                                               "schedules:run")) -> dict[str, Any]:
        if caller.enrol and getattr(self.console, "db_url", None):
            enrol(self.console.db_url, caller.user_id, caller.workspace_id)  # a member, as the API requires
        form = {"user_id": caller.user_id, "workspace_id": str(caller.workspace_id)}
        form.update({f"role:{r}": "on" for r in roles})
        return self.request("POST", "/console/sign-in", form)

    def csrf(self, path: str) -> str:
        html = self.request("GET", path)["body"]
        return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _header(response: dict[str, Any], name: str) -> str | None:
    for key, values in (response.get("multiValueHeaders") or {}).items():
        if key.lower() == name.lower():
            return values[-1]
    for key, value in (response.get("headers") or {}).items():
        if key.lower() == name.lower():
            return value
    return None


def _set_cookies(response: dict[str, Any]) -> list[str]:
    return list(response.get("cookies") or []) + list((response.get("multiValueHeaders") or {}).get("Set-Cookie", []))


@pytest.fixture
def browser(console):
    return Browser(console)


def test_a_stranger_is_sent_to_sign_in(browser):
    for path in ("/", "/console/schedules", f"/console/schedules/{uuid.uuid4()}"):
        response = browser.request("GET", path, cookie=None)
        assert response["statusCode"] == 303
        assert _header(response, "Location") in ("/console/schedules", "/console/sign-in?" + urlencode({"next": path}))
    assert _header(browser.request("GET", "/console/schedules", cookie=None), "Location") == (
        "/console/sign-in?next=%2Fconsole%2Fschedules")


@pytest.mark.parametrize("asked", [
    "/console/deliveries/{id}", "/console/schedules/{id}?done=pause", "/console/snapshots?status=overdue&workspace=x"])
def test_a_deep_link_is_returned_to_after_the_development_sign_in(browser, caller, asked):
    asked = asked.replace("{id}", str(uuid.uuid4()))
    # Given a stranger who follows a deep link: sent to sign in, the page asked for kept
    sent = browser.request("GET", asked, cookie=None)
    assert sent["statusCode"] == 303
    target = _header(sent, "Location")
    assert target == "/console/sign-in?" + urlencode({"next": asked})
    page = browser.get_decoded(target, cookie=None)["body"]
    assert f'name="next" value="{asked.replace("&", "&amp;")}"' in page
    # When they sign in with the form, the page asked for follows
    form = {"user_id": caller.user_id, "workspace_id": str(caller.workspace_id), "role:schedules:read": "on",
            "next": asked}
    signed = browser.request("POST", "/console/sign-in", form)
    assert signed["statusCode"] == 303 and _header(signed, "Location") == asked


@pytest.mark.parametrize("elsewhere", [
    "https://evil.example/console/schedules", "//evil.example/console/x", "/console//evil.example",
    "/\\evil.example", "/console/\\evil", "/other", "javascript:alert(1)", "/console/sign-in",
    "/console/schedules\r\nSet-Cookie: x=y", "/console/schedules#x", ""])
def test_a_sign_in_never_leads_elsewhere_than_a_console_page(browser, caller, elsewhere):
    page = browser.get_decoded("/console/sign-in?" + urlencode({"next": elsewhere}), cookie=None)["body"]
    assert 'name="next"' not in page
    form = {"user_id": caller.user_id, "workspace_id": str(caller.workspace_id), "next": elsewhere}
    signed = browser.request("POST", "/console/sign-in", form)
    assert signed["statusCode"] == 303 and _header(signed, "Location") == "/console/schedules", elsewhere


def test_sign_in_sets_a_guarded_cookie_and_lists_the_workspace_s_schedules(browser, call, caller):
    call("POST", "/schedules", new_schedule(name="nightly sweep"))
    response = browser.sign_in(caller)
    assert response["statusCode"] == 303 and _header(response, "Location") == "/console/schedules"
    (cookie,) = _set_cookies(response)
    assert {"HttpOnly", "SameSite=Lax", "Secure", "Path=/console"} <= {part.strip() for part in cookie.split(";")}
    page = browser.request("GET", "/console/schedules")
    assert page["statusCode"] == 200
    assert "nightly sweep" in page["body"] and "cron 30 2 * * *" in page["body"]
    assert "America/New_York" in page["body"] and "UTC" in page["body"]


def test_the_schedules_list_says_the_rule_in_words_with_the_cron_only_in_a_title(browser, call, caller):
    call("POST", "/schedules", new_schedule(name="quarter-hourly sweep",
                                            recurrence={"cron": "*/15 * * * *", "timezone": "Europe/Berlin"}))
    browser.sign_in(caller)
    body = browser.request("GET", "/console/schedules")["body"]
    assert '<span title="cron */15 * * * *">Every 15 minutes, Europe/Berlin</span>' in body
    assert "<code>cron */15" not in body and "every hour" not in body
    assert 'owner: <span class="term" title="accounting" data-code="accounting">Accounting</span>' in body


def test_every_page_carries_the_security_headers(browser, caller):
    browser.sign_in(caller)
    for path in ("/console/sign-in", "/console/schedules", "/console/no-such-page"):
        response = browser.request("GET", path)
        csp = _header(response, "Content-Security-Policy")
        assert csp == CONTENT_SECURITY_POLICY and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert _header(response, "X-Content-Type-Options") == "nosniff"


def test_a_name_with_markup_shows_as_text(browser, call, caller):
    created = call("POST", "/schedules", new_schedule(name='<script>alert("x")</script>')).body
    browser.sign_in(caller)
    for path in ("/console/schedules", f"/console/schedules/{created['id']}"):
        html = browser.request("GET", path)["body"]
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html


def test_pause_needs_the_session_s_csrf_token(browser, call, caller):
    schedule = call("POST", "/schedules", new_schedule()).body
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    # A form without the token, or with another session's, changes nothing
    other = Browser(browser.console)
    other.sign_in(caller)
    for token in (None, "forged", other.csrf(path)):
        form = {} if token is None else {"csrf": token}
        assert browser.request("POST", f"{path}/pause", form)["statusCode"] == 403
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["status"] == "active"
    # With the page's own token the schedule pauses, and its history says so
    response = browser.request("POST", f"{path}/pause", {"csrf": browser.csrf(path)})
    assert response["statusCode"] == 303
    detail = call("GET", f"/schedules/{schedule['id']}").body
    assert detail["schedule"]["status"] == "paused" and detail["schedule"]["pause_reason"] == "paused_by_owner"
    page = browser.request("GET", _header(response, "Location"))["body"]
    assert "The schedule was paused." in page and f">Paused</span> by <bdi>{caller.user_id}</bdi>" in page


def test_run_now_sent_twice_from_one_page_is_one_run(browser, call, caller, publisher):
    schedule = call("POST", "/schedules", new_schedule()).body
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    html = browser.request("GET", path)["body"]
    token = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    key = re.search(r'name="key" value="([^"]+)"', html).group(1)
    for _ in range(2):  # a double click
        response = browser.request("POST", f"{path}/run", {"csrf": token, "key": key})
        assert response["statusCode"] == 303
    runs = call("GET", f"/schedules/{schedule['id']}").body["history"]["runs"]
    assert [r["trigger"] for r in runs] == ["manual"]
    after = browser.request("GET", _header(response, "Location"))["body"]
    assert "The schedule was queued to run now." in after
    # And the run table names the zone its local occurrences are in
    assert f'<th scope="col">Occurrence ({schedule["timezone"]})</th>' in after


def test_a_token_without_the_role_shows_the_api_s_refusal(browser, call, caller):
    schedule = call("POST", "/schedules", new_schedule()).body
    browser.sign_in(caller, roles=("schedules:read",))
    path = f"/console/schedules/{schedule['id']}"
    response = browser.request("POST", f"{path}/pause", {"csrf": browser.csrf(path)})
    assert response["statusCode"] == 403 and "schedules:write" in response["body"]
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["status"] == "active"


def test_another_workspace_s_schedule_is_not_found_on_every_page(browser, call, caller):
    theirs = call("POST", "/schedules", new_schedule(name="their sweep")).body
    stranger = Caller()  # another workspace
    browser.sign_in(stranger)
    assert "their sweep" not in browser.request("GET", "/console/schedules")["body"]
    path = f"/console/schedules/{theirs['id']}"
    assert browser.request("GET", path)["statusCode"] == 404
    token = browser.csrf("/console/schedules")
    for action in ("pause", "run"):
        assert browser.request("POST", f"{path}/{action}", {"csrf": token, "key": "k1"})["statusCode"] == 404
    detail = call("GET", f"/schedules/{theirs['id']}").body
    assert detail["schedule"]["status"] == "active" and detail["history"]["runs"] == []


def test_a_tampered_or_foreign_cookie_is_no_session(browser, caller, console):
    browser.sign_in(caller)
    forged = browser.cookie[:-2] + ("AA" if not browser.cookie.endswith("AA") else "BB")
    assert browser.request("GET", "/console/schedules", cookie=forged)["statusCode"] == 303
    elsewhere = Browser(create_console(lambda e, c: {}, ConsoleSettings(session_key="z" * 40, dev_sign_in=True)))
    assert elsewhere.request("GET", "/console/schedules", cookie=browser.cookie)["statusCode"] == 303


def test_without_the_development_sign_in_nobody_signs_in_with_a_form(app, caller):
    deployed = Browser(create_console(lambda e, c: app.resolve(e, c), ConsoleSettings(session_key=KEY)))
    assert deployed.sign_in(caller)["statusCode"] == 404 and deployed.cookie is None
    assert "identity provider" in deployed.request("GET", "/console/sign-in")["body"]


def test_the_development_sign_in_keeps_every_role_asked_for(browser, caller):
    from timekeeper.console.sessions import Sessions

    asked = ("reports:write", "queries:admin", "reports:read", "snapshots:read")
    assert browser.sign_in(caller, asked)["statusCode"] == 303
    assert set(Sessions(KEY).read(browser.cookie).roles.split(",")) == set(asked)


@pytest.mark.parametrize(("name", "status"), [("console.css", 200), ("console.js", 200), ("favicon.svg", 200),
                                              ("..%2Fapp.py", 404), (".hidden.css", 404), ("app.py", 404),
                                              ("nope.css", 404)])
def test_static_files_are_the_console_s_own(browser, name, status):
    assert browser.request("GET", f"/console/static/{name}")["statusCode"] == status


def test_serve_answers_the_console_at_its_root(db_url):
    with serving(db_url) as server:
        session = requests.Session()
        home = session.get(f"{server.base_url}/", allow_redirects=False, timeout=30)
        assert home.status_code == 303 and home.headers["Location"] == "/console/schedules"
        sign_in = session.get(f"{server.base_url}/console/sign-in", timeout=30)
        assert sign_in.status_code == 200 and "Berlin admin" in sign_in.text
        workspace = str(server.stack.platform.first_workspace)
        signed = session.post(f"{server.base_url}/console/sign-in", timeout=30, data={
            "user_id": server.stack.platform.users["admin"], "workspace_id": workspace,
            "role:schedules:read": "on"})
        assert signed.status_code == 200 and signed.url.endswith("/console/schedules")
        assert "Schedules" in signed.text
