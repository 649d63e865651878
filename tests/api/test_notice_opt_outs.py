"""One-click opt-out (RFC 8058) of owner notice e-mails: every notice e-mail carries the
signed link (the link signer's, under the public ``/opt-outs/{token}`` route) and the
List-Unsubscribe headers as SES receives them; the link's POST stops the person's next
notice e-mail of the workspace but not the notice row; ``POST /notices/mail`` (signed in)
turns them back on. Real PostgreSQL (the API's own login for the routes, the workers'
for the mail pass), moto SES, the production mail pass."""

from __future__ import annotations

import email
import re
from datetime import timedelta
from email import policy

from moto.core import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from tests.api.conftest import NOW, Caller
from tests.api.test_delivery_routes import KEY, SENDER, app, aws, body, olga, tenants  # noqa: F401
from tests.api.test_opt_outs import public
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.platform import notices
from timekeeper.reporting.links import LinkSigner
from timekeeper.reporting.notice_mail import send_notice_mail
from timekeeper.schedules.notifications import Notice, enqueue_notifications

OPT_OUT = re.compile(r"https://api\.test/opt-outs/([A-Za-z0-9_.\-]+)")


def _notice(db_url, tenants, schedule_id, key: str, at):  # noqa: F811
    with connect(db_url) as conn:
        with conn.transaction():
            enqueue_notifications(conn, [Notice(schedule_id, tenants["a"], "queries", "schedule_paused",
                                                f"paused:{schedule_id}:{key}", {"reason": "consecutive_failures"})],
                                  now=at)
        notices.tell_people(conn, now=at)


def _mail(db_url, ses, at) -> tuple[dict[str, int], list[dict]]:
    """The production mail pass (SES in moto, links to https://api.test/); returns its
    counts and the messages olga was sent, as the mailer's keyword arguments."""
    sent: list[dict] = []
    mailer = SesMailer(ses, SENDER)

    class Capture:
        def send(self, **kwargs):
            out = mailer.send(**kwargs)
            if kwargs["to"] == "olga@x.test":
                sent.append(kwargs)
            return out

    with connect(db_url) as conn:
        counts = send_notice_mail(conn, mailer=Capture(), now=at, links=LinkSigner(KEY), base_url="https://api.test/")
    return counts, sent


def _olga_notices(db_url, tenants):  # noqa: F811
    with connect(db_url) as conn:
        return conn.execute("SELECT id, mail_key, mailed_at FROM owner_notices WHERE workspace_id = %s "
                            "AND user_id = 'olga' ORDER BY id", (tenants["a"],)).fetchall()


def test_a_notice_e_mails_link_stops_the_next_one_but_not_the_notice_and_signed_in_resumes(
        call, app, tenants, aws, db_url):  # noqa: F811
    _, ses = aws
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    # Given a notice e-mailed to its owner
    _notice(db_url, tenants, schedule_id, "1", NOW)
    _, (mail,) = _mail(db_url, ses, NOW)
    # Then it carries the one-click headers naming the personal link ...
    token = OPT_OUT.search(mail["headers"]["List-Unsubscribe"]).group(1)
    assert mail["headers"] == {"List-Unsubscribe": f"<https://api.test/opt-outs/{token}>",
                               "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
    raw = email.message_from_bytes(ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages[-1].raw_data.encode(),
                                   policy=policy.default)
    assert raw["List-Unsubscribe"] == f"<https://api.test/opt-outs/{token}>"
    assert raw["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    # ... and both parts say how to stop these e-mails with it
    for part in (mail["html"], mail["text"]):
        assert f"https://api.test/opt-outs/{token}" in part and "stop" in part.lower()

    # When the browser GETs the link: a page with the form, nothing recorded
    status, _, page = public(app, "GET", f"/opt-outs/{token}")
    assert status == 200 and '<form method="post">' in page and "notice e-mails" in page.lower()
    assert call("GET", "/notices/mail", as_=olga(tenants)).body == {"mail": True, "opted_out_at": None}
    # When the one-click POST comes (twice: the second changes nothing)
    for _ in range(2):
        status, _, page = public(app, "POST", f"/opt-outs/{token}", form="List-Unsubscribe=One-Click")
        assert status == 200 and "Notice e-mails are off" in page
    setting = call("GET", "/notices/mail", as_=olga(tenants)).body
    assert setting["mail"] is False and setting["opted_out_at"]

    # Then the next notice is recorded and listed, but not e-mailed (marked unsubscribed)
    later = NOW + timedelta(hours=2)
    _notice(db_url, tenants, schedule_id, "2", later)
    counts, sent = _mail(db_url, ses, later)
    assert sent == [] and counts["unsubscribed"] == 1
    assert [n["mail_key"] for n in _olga_notices(db_url, tenants)][-1] == "unsubscribed"
    listed = call("GET", "/notices", as_=Caller(user_id="olga", workspace_id=tenants["a"], roles="queries:read"))
    assert len(listed.body["items"]) == 2

    # When olga, signed in, turns them back on (twice: idempotent), the next notice is e-mailed
    for _ in range(2):
        assert call("POST", "/notices/mail", as_=olga(tenants)).body == {"mail": True, "opted_out_at": None}
    evening = NOW + timedelta(hours=4)
    _notice(db_url, tenants, schedule_id, "3", evening)
    _, (again,) = _mail(db_url, ses, evening)
    assert OPT_OUT.search(again["headers"]["List-Unsubscribe"])


def test_only_a_valid_notice_opt_out_token_opts_out(call, app, tenants, aws, db_url, clock_now):  # noqa: F811
    _, ses = aws
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    call("POST", "/notices/mail", as_=olga(tenants))
    _notice(db_url, tenants, schedule_id, "t1", NOW + timedelta(days=1))
    _, (mail,) = _mail(db_url, ses, NOW + timedelta(days=1))
    token = OPT_OUT.search(mail["headers"]["List-Unsubscribe"]).group(1)
    tampered = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")
    for method in ("GET", "POST"):
        status, _, page = public(app, method, f"/opt-outs/{tampered}",
                                 form="List-Unsubscribe=One-Click" if method == "POST" else None)
        assert status == 403 and "not valid" in page
    assert call("GET", "/notices/mail", as_=olga(tenants)).body["mail"] is True
    # An expired link is a 410 page and records nothing
    clock_now["now"] = NOW + timedelta(days=1, hours=721)
    status, _, page = public(app, "POST", f"/opt-outs/{token}", form="List-Unsubscribe=One-Click")
    assert status == 410 and "expired" in page
    assert call("GET", "/notices/mail", as_=olga(tenants)).body["mail"] is True
