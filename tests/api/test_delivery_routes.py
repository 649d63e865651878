"""Query schedule routes and the public download route: create (422s naming the field),
read, Run now as the caller with an Idempotency-Key, the delivery history, and the
personal links (302 to a presigned URL; tampered, expired and revoked links refused);
another workspace's schedule is a 404. Real PostgreSQL through the API's own login,
moto S3 and SES, the real consumer for the delivery."""

from __future__ import annotations

import re
from contextlib import contextmanager
from datetime import date, timedelta
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from tests.api.conftest import NOW, Caller
from timekeeper.api.app import ApiAdapters, create_app
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.edge import registries
from timekeeper.platform.directory import add_member, create_workspace, upsert_user
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import store
from timekeeper.reporting.links import LinkSigner
from timekeeper.reporting.work_kinds import register
from timekeeper.schedules.consumer import ConsumerSettings, process_run
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import QUERIES

BUCKET = "files"
KEY = "s" * 48
SENDER = "reports@timekeeper.test"
WRITE = "queries:write,queries:read"


@pytest.fixture(scope="module")
def tenants(db_url):
    with connect(db_url) as conn, conn.transaction():
        a = create_workspace(conn, name="A", timezone="Europe/Berlin", now=NOW).id
        b = create_workspace(conn, name="B", timezone="UTC", now=NOW).id
        for user, roles, ws in (("olga", ["queries:write"], a), ("rita", ["queries:read"], a),
                                ("vic", ["reports:read"], a), ("bob", ["workspace:admin"], b)):
            upsert_user(conn, user_id=user, display_name=user.title(), email=f"{user}@x.test", now=NOW)
            add_member(conn, workspace_id=ws, user_id=user, roles=roles, now=NOW - timedelta(days=1))
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (a, date(2026, 1, 1))).fetchone()["id"]
        conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                     "currency, status) VALUES (%s, %s, 'INV-1', %s, %s, 100, 'EUR', 'open')",
                     (a, member, date(2027, 1, 1), date(2027, 2, 1)))
        query, _ = store.create_query(conn, workspace_id=a, name="Invoices", actor="olga", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
    return {"a": a, "b": b, "query": query.id}


@pytest.fixture
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        s3 = boto3.client("s3", config=Config(signature_version="s3v4"))  # as timekeeper.edge.adapters.s3_client
        s3.create_bucket(Bucket=BUCKET)
        ses = boto3.client("ses")
        ses.verify_email_identity(EmailAddress=SENDER)
        yield s3, ses


@pytest.fixture
def app(api_conn, publisher, clock_now, aws):
    s3, _ = aws
    return create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: publisher,
                                  registry=registries.work_kinds, now=lambda: clock_now["now"],
                                  files=lambda: (s3, BUCKET), links=lambda: LinkSigner(KEY)))


def olga(tenants) -> Caller:
    return Caller(user_id="olga", workspace_id=tenants["a"], roles=WRITE)


def body(tenants, **overrides):
    out = {"name": "Daily invoices", "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
           "source": {"kind": "query", "query_id": str(tenants["query"])}, "format": "csv",
           "recipients": ["rita"], "subject_template": "{{ schedule_name }} {{ run_date }}",
           "body_template": "<p>Hi {{ recipient_name }}: <a href='{{ link }}'>file</a></p>"}
    out.update(overrides)
    return out


def test_create_read_and_the_fields_a_refusal_names(call, tenants):
    created = call("POST", "/query-schedules", body(tenants), as_=olga(tenants))
    assert created.status == 201 and created.body["recipients"] == ["rita"]
    assert created.body["owner_user_id"] == "olga" and created.body["source"]["query_version"] == 1
    schedule_id = created.body["id"]
    assert call("GET", f"/query-schedules/{schedule_id}", as_=olga(tenants)).body["status"] == "active"
    assert [s["id"] for s in call("GET", "/query-schedules", as_=olga(tenants)).body["items"]] == [schedule_id]
    for overrides, field in (({"recipients": ["rita", "nobody"]}, "recipients[1]"),
                             ({"recipients": ["rita", "vic"]}, "recipients[1]"),
                             ({"subject_template": "{{ password }}"}, "subject_template"),
                             ({"body_template": "{{ link.__class__ }}"}, "body_template"),
                             ({"format": "pdf"}, "format"),
                             ({"recipients": ["bob"]}, "recipients[0]")):
        refused = call("POST", "/query-schedules", body(tenants, **overrides), as_=olga(tenants))
        assert (refused.status, refused.body["field"]) == (422, field), overrides
    # Another workspace sees nothing of it
    bob = Caller(user_id="bob", workspace_id=tenants["b"], roles=WRITE)
    for target in (f"/query-schedules/{schedule_id}", f"/query-schedules/{schedule_id}/runs"):
        assert call("GET", target, as_=bob).status == 404
    assert call("POST", f"/query-schedules/{schedule_id}/run", as_=bob).status == 404
    # Updating recipients and templates
    changed = call("PATCH", f"/query-schedules/{schedule_id}", {"recipients": ["rita"]}, as_=olga(tenants))
    assert changed.status == 200 and changed.body["recipients"] == ["rita"]


@contextmanager
def reading(db_url, workspace_id, user_id, role="queries:read"):
    """``user_id``'s membership grants ``role`` meanwhile: a recipient must read the source when
    a schedule is saved; taking the role away afterwards makes one a run skips as ``no_access``."""
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE workspace_memberships SET roles = array_append(roles, %s) WHERE workspace_id = %s "
                     "AND user_id = %s", (role, workspace_id, user_id))
    try:
        yield
    finally:
        with connect(db_url) as conn, conn.transaction():
            conn.execute("UPDATE workspace_memberships SET roles = array_remove(roles, %s) WHERE workspace_id = %s "
                         "AND user_id = %s", (role, workspace_id, user_id))


def test_a_recipient_who_may_not_read_the_source_is_refused_when_saved(call, tenants, db_url):
    # Vic holds reports:read only: refused as a recipient of the query, by name, on create and update
    refused = call("POST", "/query-schedules", body(tenants, recipients=["rita", "vic"]), as_=olga(tenants))
    assert (refused.status, refused.body["field"]) == (422, "recipients[1]"), refused.body
    assert refused.body["message"] == ("Vic (vic) may not read the query: their roles in this workspace do not "
                                       "include queries:read (a workspace admin can give it).")
    assert "missing_role" not in refused.body["message"]
    schedule_id = call("POST", "/query-schedules", body(tenants), as_=olga(tenants)).body["id"]
    patched = call("PATCH", f"/query-schedules/{schedule_id}", {"recipients": ["vic", "rita"]}, as_=olga(tenants))
    assert (patched.status, patched.body["field"]) == (422, "recipients[0]"), patched.body
    assert call("GET", f"/query-schedules/{schedule_id}", as_=olga(tenants)).body["recipients"] == ["rita"]
    # A member who left is refused the same way
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="lena", display_name="Lena", email="lena@x.test", now=NOW)
        add_member(conn, workspace_id=tenants["a"], user_id="lena", roles=["queries:read"], now=NOW - timedelta(days=1))
        conn.execute("UPDATE workspace_memberships SET left_at = %s WHERE user_id = 'lena'", (NOW,))
    left = call("POST", "/query-schedules", body(tenants, recipients=["lena"]), as_=olga(tenants))
    assert (left.status, left.body["field"]) == (422, "recipients[0]")
    # Once Vic may read it, he is taken
    with reading(db_url, tenants["a"], "vic"):
        taken = call("PATCH", f"/query-schedules/{schedule_id}", {"recipients": ["vic", "rita"]}, as_=olga(tenants))
        assert taken.status == 200 and taken.body["recipients"] == ["rita", "vic"]


def test_run_now_delivers_and_the_link_downloads_until_it_expires_or_access_is_revoked(
        call, tenants, publisher, aws, db_url, clock_now):
    s3, ses = aws
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    # A caller whose membership may not read the query cannot run it
    vic = Caller(user_id="vic", workspace_id=tenants["a"], roles=WRITE)
    assert call("POST", f"/query-schedules/{schedule_id}/run", as_=vic).status == 403
    # Run now with an Idempotency-Key, twice: one run, published to the queries pipeline
    first = call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": "r1"}, as_=olga(tenants))
    again = call("POST", f"/query-schedules/{schedule_id}/run", headers={"Idempotency-Key": "r1"}, as_=olga(tenants))
    assert (first.status, first.body["created"], again.body["created"]) == (202, True, False)
    assert again.body["run_id"] == first.body["run_id"]
    (message,) = publisher.sent
    assert message.owner == "queries" and str(message.run_id) == first.body["run_id"]
    # The consumer delivers it
    sent = deliver_run(db_url, message, s3, ses)
    history = call("GET", f"/query-schedules/{schedule_id}/runs", as_=olga(tenants)).body["items"]
    assert [(r["state"], r["acted_for"], r["row_count"]) for r in history] == [("succeeded", "olga", 1)]
    assert [(d["user_id"], d["status"]) for d in history[0]["deliveries"]] == [("rita", "sent")]
    token = re.search(r"https://api\.test/downloads/([^'\"]+)", sent[0]["html"]).group(1)
    # The link redirects to a presigned URL of the file, valid 60 s, with no authorizer claims
    got = call("GET", f"/downloads/{token}", claims=None)
    assert got.status == 302
    location = urlsplit(got.headers["location"])
    assert location.path.endswith(f"/deliveries/{tenants['a']}/{message.run_id}.csv")
    assert "X-Amz-Expires=60" in location.query
    # Tampered: 403 link_invalid; another key: the same
    tampered = token[:-3] + ("x" if token[-3] != "x" else "y") + token[-2:]
    assert (call("GET", f"/downloads/{tampered}", claims=None).body["code"]) == "link_invalid"
    other = LinkSigner("o" * 48).sign(LinkSigner(KEY).verify(token, now=NOW))
    assert call("GET", f"/downloads/{other}", claims=None).status == 403
    # Revoked: the recipient's membership no longer grants queries:read
    with connect(db_url) as conn:
        conn.execute("UPDATE workspace_memberships SET roles = '{reports:read}' WHERE user_id = 'rita'")
        try:
            revoked = call("GET", f"/downloads/{token}", claims=None)
            assert (revoked.status, revoked.body["code"]) == (403, "missing_role")
        finally:
            conn.execute("UPDATE workspace_memberships SET roles = '{queries:read}' WHERE user_id = 'rita'")
    # Expired: 410 link_expired
    clock_now["now"] = NOW + timedelta(hours=169)
    expired = call("GET", f"/downloads/{token}", claims=None)
    assert (expired.status, expired.body["code"]) == (410, "link_expired")


def deliver_run(db_url, message, s3, ses) -> list[dict]:
    """Run the delivery ``message`` through the real consumer (SES in moto, links to
    https://api.test/); returns the messages sent, as the mailer's keyword arguments."""
    sent: list[dict] = []
    mailer = SesMailer(ses, SENDER)

    class Capture:
        def send(self, **kwargs):
            sent.append(kwargs)
            return mailer.send(**kwargs)

    kinds = WorkKindRegistry()
    register(kinds)
    with connect(db_url) as conn, connect(db_url) as journal:
        services = dl.DeliveryServices(journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=Capture(),
                                       links=LinkSigner(KEY), download_base_url="https://api.test/")
        process_run(conn, message, receive_count=1, now=NOW, registry=kinds,
                    settings=ConsumerSettings.from_pipeline(QUERIES), services={"delivery": services})
    return sent


def test_a_query_schedule_run_now_key_belongs_to_one_request_of_one_requester(call, tenants, db_url):
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="quinn", display_name="Quinn", email="quinn@x.test", now=NOW)
        add_member(conn, workspace_id=tenants["a"], user_id="quinn", roles=["queries:write"], now=NOW)
    quinn = Caller(user_id="quinn", workspace_id=tenants["a"], roles=WRITE)
    schedule_id = call("POST", "/query-schedules", body(tenants), as_=olga(tenants)).body["id"]
    other_id = call("POST", "/query-schedules", body(tenants), as_=olga(tenants)).body["id"]
    key = {"Idempotency-Key": "qs-once"}
    first = call("POST", f"/query-schedules/{schedule_id}/run", headers=key, as_=olga(tenants))
    assert first.status == 202
    again = call("POST", f"/query-schedules/{schedule_id}/run", headers=key, as_=olga(tenants))
    assert (again.status, again.body["run_id"]) == (202, first.body["run_id"])
    refused = call("POST", f"/query-schedules/{other_id}/run", headers=key, as_=olga(tenants))
    assert (refused.status, refused.body["code"], refused.body["field"]) == (
        409, "idempotency_key_reused", "Idempotency-Key")
    theirs = call("POST", f"/query-schedules/{schedule_id}/run", headers=key, as_=quinn)
    assert theirs.status == 202 and theirs.body["run_id"] != first.body["run_id"]


def test_the_consoles_ledger_shows_each_messages_later_state(call, tenants, publisher, aws, db_url, console):
    # Given a delivered run whose message SES later reported bounced (recorded the way the
    # message-events consumer records it)
    from tests.api.test_console import Browser
    from timekeeper.local.delivery import ses_event
    from timekeeper.reporting.message_states import SesEvent, record_message_event

    s3, ses = aws
    schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants)).body["id"]
    call("POST", f"/query-schedules/{schedule_id}/run", as_=olga(tenants))
    deliver_run(db_url, publisher.sent[-1], s3, ses)
    [delivery] = call("GET", f"/query-schedules/{schedule_id}/runs", as_=olga(tenants)).body["items"][0]["deliveries"]
    page_path = f"/console/deliveries/{schedule_id}"
    browser = Browser(console)
    browser.sign_in(olga(tenants), roles=("queries:read", "queries:write"))
    before = browser.request("GET", page_path)["body"]
    assert "no report yet" in before
    event = ses_event("Bounce", message_id=delivery["provider_message_id"], to="rita@x.test", sender=SENDER,
                      sent_at=NOW, at=NOW + timedelta(seconds=30))
    with connect(db_url) as conn, conn.transaction():
        record_message_event(conn, SesEvent.model_validate(event), now=NOW + timedelta(minutes=1))

    # Then the recipient's row shows the bounce and its kind
    after = browser.request("GET", page_path)["body"]
    assert ('<span class="mark bad"><span class="term" title="bounced" data-code="bounced">Bounced</span></span>'
            in after and "Permanent" in after)
    assert "no report yet" not in after


def test_the_consoles_ledger_says_each_recipient_s_fate_in_words(call, tenants, publisher, aws, db_url, console):
    # Given a run that skipped Vic, who may no longer read the query (reports:read only)
    from tests.api.test_console import Browser

    s3, ses = aws
    with reading(db_url, tenants["a"], "vic"):
        schedule_id = call("POST", "/query-schedules", body(tenants, recipients=["rita", "vic"]),
                           as_=olga(tenants)).body["id"]
    call("POST", f"/query-schedules/{schedule_id}/run", as_=olga(tenants))
    deliver_run(db_url, publisher.sent[-1], s3, ses)
    browser = Browser(console)
    browser.sign_in(olga(tenants), roles=("queries:read", "queries:write"))
    page = browser.request("GET", f"/console/deliveries/{schedule_id}")["body"]
    # Then the run reads "Succeeded" once (not "succeeded: succeeded"), each fate in words, codes in titles
    assert 'title="succeeded" data-code="succeeded">Succeeded</span></p>' in page or (
        'title="succeeded" data-code="succeeded">Succeeded</span> ·' in page)
    assert "succeeded</span>: " not in page and "<code>succeeded</code>" not in page
    for code, words in (("skipped", "Skipped"), ("no_access", "May not read the source"), ("manual", "Run now")):
        assert f'title="{code}" data-code="{code}">{words}</span>' in page, code
