"""One-click opt-out (RFC 8058) through the API: every delivered message carries the
signed opt-out link and the List-Unsubscribe headers (as SES receives them); GET shows a
confirmation page and changes nothing; the one-click POST (a form body) records the
opt-out; later runs skip the recipient as ``unsubscribed``, which the owner sees; coming
back takes the owner's invitation and the recipient's acceptance. Real PostgreSQL through
the API's own login, moto S3 and SES, the real consumer for the deliveries."""

from __future__ import annotations

import email
import re
from datetime import timedelta
from email import policy

from moto.core import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from tests.api.conftest import NOW, Caller, proxy_event
from tests.api.test_delivery_routes import WRITE, app, aws, body, deliver_run, olga, reading, tenants  # noqa: F401
from timekeeper.local.lambdas import LambdaContext
from timekeeper.reporting.links import LinkSigner

OPT_OUT = re.compile(r"https://api\.test/opt-outs/([A-Za-z0-9_.\-]+)")
KEY = "s" * 48


def rita(tenants) -> Caller:  # noqa: F811
    return Caller(user_id="rita", workspace_id=tenants["a"], roles="queries:read")


def public(app, method: str, path: str, *, form: str | None = None):  # noqa: F811
    """A request without authorizer claims; ``form`` is sent as a urlencoded form body.
    Returns ``(status, headers, text)``."""
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
    event = proxy_event(method, path, claims=None, body=form, headers=headers)
    response = app.resolve(event, LambdaContext(function_name="timekeeper-api"))
    out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    for k, v in (response.get("multiValueHeaders") or {}).items():
        out.setdefault(k.lower(), v[-1] if isinstance(v, list) else v)
    return response["statusCode"], out, response.get("body") or ""


def _run(call, publisher, schedule_id, tenants, aws, db_url, key):  # noqa: F811
    s3, ses = aws
    publisher.sent.clear()
    call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": key}, as_=olga(tenants))
    (message,) = publisher.sent
    return message, deliver_run(db_url, message, s3, ses)


def _outcomes(call, tenants, schedule_id, run_id):  # noqa: F811
    history = call("GET", f"/query-schedules/{schedule_id}/runs", as_=olga(tenants)).body["items"]
    (run,) = [r for r in history if r["run_id"] == str(run_id)]
    return {d["user_id"]: (d["status"], d["skip_reason"]) for d in run["deliveries"]}


def test_one_click_opt_out_skips_the_recipient_until_the_owner_invites_and_they_accept(
        call, app, tenants, publisher, aws, db_url, clock_now):  # noqa: F811
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    # Given a delivered message
    message, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "o1")
    (mail,) = sent
    # Then it carries the one-click headers naming the personal opt-out link ...
    token = OPT_OUT.search(mail["headers"]["List-Unsubscribe"]).group(1)
    assert mail["headers"] == {"List-Unsubscribe": f"<https://api.test/opt-outs/{token}>",
                               "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
    # ... as SES received them, in a message with a text and an HTML part
    raw = email.message_from_bytes(ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages[-1].raw_data.encode(),
                                   policy=policy.default)
    assert raw["List-Unsubscribe"] == f"<https://api.test/opt-outs/{token}>"
    assert raw["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert [p.get_content_type() for p in raw.iter_parts()] == ["text/plain", "text/html"]
    # ... and the link is in both parts, with why the recipient gets the message
    assert f"https://api.test/opt-outs/{token}" in mail["html"] and f"https://api.test/opt-outs/{token}" in mail["text"]
    assert "You receive this because Olga added you to the recipients" in mail["text"]

    # When the recipient's browser (or a link scanner) GETs the link: a page with the form, no change
    status, headers, page = public(app, "GET", f"/opt-outs/{token}")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert '<form method="post">' in page and "Daily invoices" in page
    # (under the console's rule: no inline style or script, nothing loaded, no framing)
    csp = headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert " style=" not in page and "<script" not in page
    assert call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"] == []

    # When the mailbox provider POSTs the one-click form: opted out (twice: the same)
    for _ in range(2):
        status, _, page = public(app, "POST", f"/opt-outs/{token}", form="List-Unsubscribe=One-Click")
        assert status == 200 and "You are unsubscribed" in page
    (opt_out,) = call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"]
    assert (opt_out["user_id"], opt_out["run_id"], opt_out["resubscribe_invited_at"]) == (
        "rita", str(message.run_id), None)

    # Then the next run skips her as unsubscribed, which the owner sees in the history
    clock_now["now"] = NOW + timedelta(minutes=5)
    second, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "o2")
    assert sent == [] and _outcomes(call, tenants, schedule_id, second.run_id) == {"rita": ("skipped",
                                                                                            "unsubscribed")}

    # Coming back: the recipient alone cannot ...
    refused = call("POST", f"/query-schedules/{schedule_id}/subscription", as_=rita(tenants))
    assert (refused.status, refused.body["code"]) == (409, "not_invited")
    # ... the owner invites, which alone sends nothing ...
    invited = call("POST", f"/query-schedules/{schedule_id}/opt-outs/rita/invitation", as_=olga(tenants))
    assert invited.status == 200 and invited.body["resubscribe_invited_by"] == "olga"
    assert call("POST", f"/query-schedules/{schedule_id}/opt-outs/vic/invitation", as_=olga(tenants)).status == 404
    # ... and the recipient accepts: the next run sends to her again
    accepted = call("POST", f"/query-schedules/{schedule_id}/subscription", as_=rita(tenants))
    assert accepted.status == 200 and accepted.body["subscribed"] is True
    assert call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"] == []
    third, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "o3")
    assert [m["to"] for m in sent] == ["rita@x.test"]
    assert _outcomes(call, tenants, schedule_id, third.run_id) == {"rita": ("sent", None)}


def test_only_a_valid_opt_out_token_opts_out(call, app, tenants, publisher, aws, db_url):  # noqa: F811
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    _, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "v1")
    token = OPT_OUT.search(sent[0]["html"]).group(1)
    download = re.search(r"https://api\.test/downloads/([^'\"]+)", sent[0]["html"]).group(1)
    tampered = token[:-3] + ("x" if token[-3] != "x" else "y") + token[-2:]
    other_key = LinkSigner("o" * 48).sign(LinkSigner(KEY).verify(token, now=NOW))
    # A download token, a tampered token and another key's token are refused, GET and POST alike
    for bad in (download, tampered, other_key):
        for method in ("GET", "POST"):
            status, _, page = public(app, method, f"/opt-outs/{bad}", form="List-Unsubscribe=One-Click"
                                     if method == "POST" else None)
            assert status == 403 and "not valid" in page, (bad, method)
    # and the opt-out token does not download
    assert call("GET", f"/downloads/{token}", claims=None).status == 403
    assert call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"] == []
    # A form body is taken nowhere else
    refused = call("POST", "/query-schedules", "a=b", headers={"Content-Type": "application/x-www-form-urlencoded"},
                   as_=olga(tenants))
    assert refused.status == 415


def test_an_expired_opt_out_link_is_a_410_page(call, app, tenants, publisher, aws, db_url, clock_now):  # noqa: F811
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    _, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "e1")
    token = OPT_OUT.search(sent[0]["html"]).group(1)
    # An opt-out link lives as long as the longest download link (720 hours), so the link
    # keys' rotation runbook holds for it too: still valid just before, a 410 page after
    clock_now["now"] = NOW + timedelta(hours=720) - timedelta(minutes=1)
    status, _, page = public(app, "GET", f"/opt-outs/{token}")
    assert status == 200 and '<form method="post">' in page
    clock_now["now"] = NOW + timedelta(hours=720, minutes=1)
    status, _, page = public(app, "POST", f"/opt-outs/{token}", form="List-Unsubscribe=One-Click")
    assert status == 410 and "expired" in page
    assert call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"] == []


def test_a_report_schedules_recipient_with_only_the_reports_role_accepts_the_invitation(
        call, tenants, db_url):  # noqa: F811
    # Given a report's schedule whose recipient Vic holds only reports:read (token and
    # membership), who opted out of it, and a query's schedule he opted out of too
    from uuid import uuid4

    from tests.api.conftest import Caller
    from timekeeper.db.connection import connect
    from timekeeper.platform.directory import add_member, upsert_user
    from timekeeper.reporting import opt_outs, reports

    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="rene", display_name="Rene", email="rene@x.test", now=NOW)
        add_member(conn, workspace_id=tenants["a"], user_id="rene", roles=["queries:write", "reports:read"],
                   now=NOW - timedelta(days=1))
        report, _ = reports.create_report(conn, workspace_id=tenants["a"], name="Monthly", actor="rene", now=NOW,
                                          definition={"title": "Monthly", "sections": [
                                              {"heading": "Invoices", "query_id": str(tenants["query"]),
                                               "display": "table"}]})
    rene = Caller(user_id="rene", workspace_id=tenants["a"], roles="queries:write,queries:read,reports:read")
    vic = Caller(user_id="vic", workspace_id=tenants["a"], roles="reports:read")
    of_report = call("POST", "/query-schedules", body(tenants, source={"kind": "report", "report_id": str(report.id)},
                                                      format="pdf", recipients=["vic"]), as_=rene).body["id"]
    with reading(db_url, tenants["a"], "vic"):  # (he could read the query when it was saved)
        of_query = call("POST", "/query-schedules", body(tenants, recipients=["vic"]), as_=olga(tenants)).body["id"]
    with connect(db_url) as conn, conn.transaction():
        for schedule_id in (of_report, of_query):
            opt_outs.record_opt_out(conn, opt_outs.OptOutLink(tenants["a"], schedule_id, uuid4(), "vic"), now=NOW)
    assert call("POST", f"/query-schedules/{of_report}/opt-outs/vic/invitation", as_=rene).status == 200
    assert call("POST", f"/query-schedules/{of_query}/opt-outs/vic/invitation", as_=olga(tenants)).status == 200
    # When Vic accepts the report schedule's invitation: subscribed again (a 403 before:
    # the route asked every recipient for queries:read)
    accepted = call("POST", f"/query-schedules/{of_report}/subscription", as_=vic)
    assert (accepted.status, accepted.body.get("subscribed")) == (200, True), accepted.body
    assert call("GET", f"/query-schedules/{of_report}/opt-outs", as_=rene).body["items"] == []
    # But the query's schedule still needs queries:read: by the token ...
    refused = call("POST", f"/query-schedules/{of_query}/subscription", as_=vic)
    assert (refused.status, refused.body["code"]) == (403, "forbidden")
    # ... and by the membership (a token that claims it is not enough)
    claimed = Caller(user_id="vic", workspace_id=tenants["a"], roles="queries:read,reports:read")
    refused = call("POST", f"/query-schedules/{of_query}/subscription", as_=claimed)
    assert (refused.status, refused.body["code"]) == (403, "missing_role")
    assert [o["user_id"] for o in call("GET", f"/query-schedules/{of_query}/opt-outs",
                                       as_=olga(tenants)).body["items"]] == ["vic"]
    # And a caller with neither read role is refused before anything is looked up
    nobody = Caller(user_id="vic", workspace_id=tenants["a"], roles="schedules:read")
    assert call("POST", f"/query-schedules/{uuid4()}/subscription", as_=nobody).status == 403


def test_the_one_click_post_takes_only_the_rfc_8058_form(call, app, tenants, publisher, aws, db_url):  # noqa: F811
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    _, sent = _run(call, publisher, schedule_id, tenants, aws, db_url, "f1")
    token = OPT_OUT.search(sent[0]["html"]).group(1)
    path = f"/opt-outs/{token}"
    # No body, another form, a JSON body, another media type: refused with a 4xx naming the field, no opt-out
    for form in ("", "List-Unsubscribe=Yes", "a=b", "List-Unsubscribe=One-Click&x=1",
                 "List-Unsubscribe=One-Click&List-Unsubscribe=One-Click"):
        status, headers, text = public(app, "POST", path, form=form)
        assert status == 422 and "List-Unsubscribe" in text, (form, status, text)
    for content_type, raw in (("application/json", '{"List-Unsubscribe": "One-Click"}'),
                              ("text/plain", "List-Unsubscribe=One-Click")):
        event = proxy_event("POST", path, claims=None, body=raw, headers={"Content-Type": content_type})
        response = app.resolve(event, LambdaContext(function_name="timekeeper-api"))
        assert response["statusCode"] == 415 and "List-Unsubscribe=One-Click" in response["body"], content_type
    event = proxy_event("POST", path, claims=None)
    event["headers"].pop("Content-Type")
    assert app.resolve(event, LambdaContext(function_name="timekeeper-api"))["statusCode"] == 422
    assert call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"] == []
    # The RFC's form (also URL-encoded, with a charset) opts out
    status, _, page = public(app, "POST", path, form="List-Unsubscribe=One%2DClick")
    assert status == 200 and "You are unsubscribed" in page
    assert len(call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=olga(tenants)).body["items"]) == 1
