"""A delivery link that does not lead to its file answers a person's browser with a page
in the workspace's language saying what happened and what they can do, and a script with
the API's JSON as before: an invalid or tampered link, an expired one, one whose recipient
left or was deactivated, and one whose schedule was deleted (real PostgreSQL, moto S3 and
SES, the real consumer for the delivery)."""

from __future__ import annotations

import json
import re
from datetime import date, timedelta

import pytest

from tests.api.conftest import NOW, Caller, proxy_event
from tests.api.test_delivery_routes import KEY, SENDER, aws, deliver_run  # noqa: F401 - fixtures and helpers
from tests.api.test_delivery_routes import app as delivery_app
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.local.lambdas import LambdaContext
from timekeeper.platform.directory import add_member, create_workspace, leave_workspace, set_user_status, upsert_user
from timekeeper.reporting import store
from timekeeper.reporting.link_renewals import send_pending
from timekeeper.reporting.links import LinkSigner

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "Accept-Language": "en"}
SCRIPT = {"Accept": "*/*"}
OWNER = "lp-olga"
RECIPIENTS = ("lp-rosa", "lp-lena", "lp-dora")

app = delivery_app


@pytest.fixture
def verein(db_url):
    """A German-speaking workspace with an owner, three recipients and a query."""
    with connect(db_url) as conn, conn.transaction():
        ws = create_workspace(conn, name="Verein", timezone="Europe/Berlin", locale="de_DE", currency="EUR",
                              now=NOW).id
        for user, roles in ((OWNER, ["queries:write"]), *((r, ["queries:read"]) for r in RECIPIENTS)):
            upsert_user(conn, user_id=user, display_name=user, email=f"{user}@x.test", now=NOW)
            add_member(conn, workspace_id=ws, user_id=user, roles=roles, now=NOW - timedelta(days=1))
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (ws, date(2026, 1, 1))).fetchone()["id"]
        conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                     "currency, status) VALUES (%s, %s, 'INV-1', %s, %s, 100, 'EUR', 'open')",
                     (ws, member, date(2027, 1, 1), date(2027, 2, 1)))
        query, _ = store.create_query(conn, workspace_id=ws, name="Invoices", actor=OWNER, now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"]})
    return ws, query.id


def _get(app, token: str, headers: dict[str, str]) -> tuple[int, str, str]:
    """``GET /downloads/{token}`` without credentials: status, content type, body."""
    response = app.resolve(proxy_event("GET", f"/downloads/{token}", claims=None, headers=headers),
                           LambdaContext(function_name="timekeeper-downloads"))
    headers_out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    for k, v in (response.get("multiValueHeaders") or {}).items():
        headers_out.setdefault(k.lower(), v[-1] if isinstance(v, list) else v)
    return response["statusCode"], headers_out.get("content-type", ""), response.get("body") or ""


def _delivered(app, call, db_url, aws, publisher, ws, query_id) -> tuple[str, dict[str, str]]:  # noqa: F811
    owner = Caller(user_id=OWNER, workspace_id=ws, roles="queries:write,queries:read")
    created = call("POST", "/query-schedules", {
        "name": "Offene Rechnungen", "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        "source": {"kind": "query", "query_id": str(query_id)}, "format": "csv", "recipients": list(RECIPIENTS),
        "subject_template": "{{ schedule_name }}", "body_template": "<a href='{{ link }}'>file</a>"}, as_=owner)
    assert created.status == 201, created.body
    assert call("POST", f"/query-schedules/{created.body['id']}/run", as_=owner).status == 202
    s3, ses = aws
    sent = deliver_run(db_url, publisher.sent[-1], s3, ses)
    tokens = {m["to"].split("@")[0]: re.search(r"https://api\.test/downloads/([^'\"]+)", m["html"]).group(1)
              for m in sent}
    return created.body["id"], tokens


def _page(status_type_body, status: int, lang: str, *texts: str) -> None:
    status_got, content_type, html = status_type_body
    assert status_got == status and content_type.startswith("text/html"), (status_got, content_type, html[:300])
    assert f'<html lang="{lang}">' in html
    for text in texts:
        assert text in html, (text, html)


def _json(status_type_body, status: int, code: str) -> None:
    status_got, content_type, body = status_type_body
    assert (status_got, content_type.split(";")[0]) == (status, "application/json")
    assert json.loads(body)["code"] == code


def test_each_refused_link_is_a_page_in_the_workspace_s_language_and_json_for_scripts(
        app, call, db_url, aws, publisher, clock_now, verein):  # noqa: F811
    ws, query_id = verein
    schedule_id, tokens = _delivered(app, call, db_url, aws, publisher, ws, query_id)
    rosa = tokens["lp-rosa"]
    # A link that works still redirects to the file, whoever asks
    assert _get(app, rosa, BROWSER)[0] == 302 and _get(app, rosa, SCRIPT)[0] == 302

    # Tampered or garbage: no workspace can be named, so the browser's language (English, French)
    tampered = rosa[:-3] + ("x" if rosa[-3] != "x" else "y") + rosa[-2:]
    _page(_get(app, tampered, BROWSER), 403, "en", "This link is not valid", "Open it again from the message")
    _page(_get(app, "garbage", {**BROWSER, "Accept-Language": "fr-CH, fr;q=0.9"}), 403, "fr",
          "Ce lien n’est pas valide")
    _json(_get(app, tampered, SCRIPT), 403, "link_invalid")
    _json(_get(app, tampered, {"Accept": "application/json"}), 403, "link_invalid")

    # The recipient left the workspace, another was deactivated: pages in German (the workspace's)
    with connect(db_url) as conn, conn.transaction():
        leave_workspace(conn, workspace_id=ws, user_id="lp-lena", now=NOW)
        set_user_status(conn, "lp-dora", "deactivated", now=NOW)
    _page(_get(app, tokens["lp-lena"], BROWSER), 403, "de", "Sie sind kein Mitglied dieses Arbeitsbereichs mehr",
          "<code>left_workspace</code>")
    _json(_get(app, tokens["lp-lena"], SCRIPT), 403, "left_workspace")
    _page(_get(app, tokens["lp-dora"], BROWSER), 403, "de", "Ihr Konto ist deaktiviert")
    _json(_get(app, tokens["lp-dora"], SCRIPT), 403, "user_deactivated")

    # Expired: the page says so (the recipient still has access); a script keeps its 410
    clock_now["now"] = NOW + timedelta(hours=169)
    _page(_get(app, rosa, BROWSER), 410, "de", "Dieser Link ist abgelaufen", "<code>link_expired</code>")
    _json(_get(app, rosa, SCRIPT), 410, "link_expired")
    # An expired link of someone who left says why it would not work anyway
    _page(_get(app, tokens["lp-lena"], BROWSER), 403, "de", "Sie sind kein Mitglied")
    _json(_get(app, tokens["lp-lena"], SCRIPT), 410, "link_expired")

    # The schedule was deleted: its links are revoked
    clock_now["now"] = NOW
    owner = Caller(user_id=OWNER, workspace_id=ws, roles="queries:write,queries:read")
    assert call("DELETE", f"/query-schedules/{schedule_id}", as_=owner).status in (200, 204)
    _page(_get(app, rosa, BROWSER), 403, "de", "Diese Zustellung wurde gelöscht", "Offene Rechnungen")
    _json(_get(app, rosa, SCRIPT), 403, "link_invalid")


def _post(app, token: str, headers: dict[str, str]) -> tuple[int, str, str]:
    """``POST /downloads/{token}`` as the page's button sends it (an empty form), without credentials."""
    event = proxy_event("POST", f"/downloads/{token}", claims=None, body="",
                        headers={**headers, "Content-Type": "application/x-www-form-urlencoded"})
    response = app.resolve(event, LambdaContext(function_name="timekeeper-downloads"))
    headers_out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    for k, v in (response.get("multiValueHeaders") or {}).items():
        headers_out.setdefault(k.lower(), v[-1] if isinstance(v, list) else v)
    return response["statusCode"], headers_out.get("content-type", ""), response.get("body") or ""


def _renewals(db_url, user_id: str) -> list[dict]:
    with connect(db_url) as conn:
        return conn.execute("SELECT * FROM query_delivery_link_renewals WHERE user_id = %s ORDER BY id",
                            (user_id,)).fetchall()


def test_an_expired_link_offers_a_fresh_one_sent_once_and_limited(
        app, call, db_url, aws, publisher, clock_now, verein):  # noqa: F811
    ws, query_id = verein
    _, tokens = _delivered(app, call, db_url, aws, publisher, ws, query_id)
    rosa = tokens["lp-rosa"]
    clock_now["now"] = later = NOW + timedelta(hours=169)
    # The expired link's page offers a fresh link to a recipient who may still read the file
    page = _get(app, rosa, BROWSER)
    _page(page, 410, "de", "Sie haben weiterhin Zugriff auf", '<form method="post">',
          "<button type=\"submit\">Neuen Link senden</button>")
    # When they ask, the request is recorded in the delivery's ledger and the page says it is on its way
    _page(_post(app, rosa, BROWSER), 202, "de", "Ein neuer Link ist unterwegs")
    (recorded,) = _renewals(db_url, "lp-rosa")
    assert recorded["requested_at"] == later and recorded["sent_at"] is None
    # Asking again within the hour is refused (a page for a person, JSON for a script) and records nothing
    _page(_post(app, rosa, BROWSER), 429, "de", "Vor Kurzem wurde bereits ein neuer Link gesendet")
    _json(_post(app, rosa, SCRIPT), 429, "fresh_link_limited")
    assert len(_renewals(db_url, "lp-rosa")) == 1
    # A script gets JSON; a recipient who left is refused; a tampered token records nothing
    asked = _post(app, tokens["lp-dora"], SCRIPT)
    assert asked[0] == 202 and json.loads(asked[2])["requested_at"].startswith("2027-03-08")
    with connect(db_url) as conn, conn.transaction():
        leave_workspace(conn, workspace_id=ws, user_id="lp-lena", now=later)
    _json(_post(app, tokens["lp-lena"], SCRIPT), 403, "left_workspace")
    _page(_post(app, rosa[:-2] + "xx", BROWSER), 403, "en", "This link is not valid")
    assert _renewals(db_url, "lp-lena") == []

    # Dora is deactivated before the pass: access is asked again when sending
    with connect(db_url) as conn, conn.transaction():
        set_user_status(conn, "lp-dora", "deactivated", now=later)
    s3, ses = aws
    sent: list[dict] = []

    class Capture:
        def send(self, **kwargs):
            sent.append(kwargs)
            return SesMailer(ses, SENDER).send(**kwargs)

    with connect(db_url) as conn:
        counts = send_pending(conn, mailer=Capture(), links=LinkSigner(KEY), base_url="https://api.test/", now=later)
        assert send_pending(conn, mailer=Capture(), links=LinkSigner(KEY), base_url="https://api.test/",
                            now=later) == {}
    assert counts == {"sent": 1, "no_access": 1}
    (message,) = sent
    assert message["to"] == "lp-rosa@x.test" and "Offene Rechnungen" in message["subject"]
    fresh = re.search(r"https://api\.test/downloads/(\S+)", message["text"]).group(1)
    # The fresh link opens the same file; the ledger holds the message and the new expiry
    assert _get(app, fresh, BROWSER)[0] == 302
    (row,) = _renewals(db_url, "lp-rosa")
    assert row["sent_at"] == later and row["provider_message_id"] and row["link_expires_at"] > later
    assert [r["error_code"] for r in _renewals(db_url, "lp-dora")] == ["no_access"]


@pytest.mark.parametrize("path", ["/downloads/", "/downloads", "/downloads/a/b"])
def test_a_download_address_without_a_token_is_a_page_for_a_browser(app, path):  # noqa: F811
    # Given a browser (and a script) opening a download address that holds no link token
    def get(headers):
        response = app.resolve(proxy_event("GET", path, claims=None, headers=headers),
                               LambdaContext(function_name="timekeeper-downloads"))
        out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
        for k, v in (response.get("multiValueHeaders") or {}).items():
            out.setdefault(k.lower(), v[-1] if isinstance(v, list) else v)
        return response["statusCode"], out.get("content-type", ""), response.get("body") or ""

    # Then the browser gets the refused-link page (in its language), not the API's JSON
    _page(get(BROWSER), 404, "en", "This link is not valid", "link_invalid")
    _page(get({**BROWSER, "Accept-Language": "de-DE,de;q=0.9"}), 404, "de")
    # And a script keeps the API's JSON answer
    assert get(SCRIPT)[1].startswith("application/json")
