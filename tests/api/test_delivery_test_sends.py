"""A delivery's test send (``POST /query-schedules/{id}/test``): one message to the caller
only, through the real consumer and SES in moto, recorded in the ledger as a ``test`` run;
the schedule's streak, last outcome and next due instant stay as they were, even after a
failing test; the hourly limits answer 429 with Retry-After; another workspace gets a 404,
a role or the access rule a 403, a caller without an address a 409. Real PostgreSQL."""

from __future__ import annotations

import re
from datetime import date, timedelta

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.api.conftest import NOW, Caller
from tests.api.test_delivery_routes import BUCKET, KEY, SENDER
from timekeeper.api.app import ApiAdapters, create_app
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.edge import registries
from timekeeper.platform.directory import add_member, create_workspace, upsert_user
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import send_tests, store
from timekeeper.reporting.links import LinkSigner
from timekeeper.reporting.work_kinds import register
from timekeeper.schedules.consumer import ConsumerSettings, process_run
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import QUERIES

WRITE = "queries:write,queries:read"


@pytest.fixture(scope="module")
def tenants(db_url):
    with connect(db_url) as conn, conn.transaction():
        a = create_workspace(conn, name="A", timezone="Europe/Berlin", now=NOW).id
        b = create_workspace(conn, name="B", timezone="UTC", now=NOW).id
        people = (("tess", ["queries:write"], a, True), ("rita", ["queries:read"], a, True),
                  ("ron", ["queries:read"], a, True), ("vic", ["reports:read"], a, True),
                  ("nora", ["queries:write"], a, False), ("pia", ["queries:write"], a, True),
                  ("lim", ["queries:write"], a, True), ("bob", ["queries:write"], b, True))
        for user, roles, ws, addressed in people:
            upsert_user(conn, user_id=user, display_name=user.title(),
                        email=f"{user}@x.test" if addressed else None, now=NOW)
            add_member(conn, workspace_id=ws, user_id=user, roles=roles, now=NOW - timedelta(days=1))
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (a, date(2026, 1, 1))).fetchone()["id"]
        conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                     "currency, status) VALUES (%s, %s, 'INV-1', %s, %s, 100, 'EUR', 'open')",
                     (a, member, date(2027, 1, 1), date(2027, 2, 1)))
        query, _ = store.create_query(conn, workspace_id=a, name="Invoices", actor="tess", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
    return {"a": a, "b": b, "query": query.id}


@pytest.fixture
def aws(monkeypatch):
    """moto's S3 (the files bucket) and SES (the sender verified)."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        s3 = boto3.client("s3", config=Config(signature_version="s3v4"))
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


def person(tenants, user_id: str, ws: str = "a") -> Caller:
    return Caller(user_id=user_id, workspace_id=tenants[ws], roles=WRITE)


def create(call, tenants, as_: str = "tess", **overrides) -> str:
    body = {"name": "Daily invoices", "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
            "source": {"kind": "query", "query_id": str(tenants["query"])}, "format": "csv",
            "recipients": ["rita", "ron"], "subject_template": "{{ schedule_name }} {{ run_date }}",
            "body_template": "<p>Hi {{ recipient_name }}: <a href='{{ link }}'>file</a></p>", **overrides}
    created = call("POST", "/query-schedules", body, as_=person(tenants, as_))
    assert created.status == 201, created.body
    return created.body["id"]


def deliver(db_url, message, aws_clients, *, refuse: bool = False) -> list[dict]:
    """Run ``message`` through the real consumer; ``refuse``: SES refuses every message
    for good (the run fails ``recipients_refused``). Returns the messages submitted."""
    s3, ses = aws_clients
    sent: list[dict] = []
    mailer = SesMailer(ses, SENDER)

    class Capture:
        def send(self, **kwargs):
            sent.append(kwargs)
            if refuse:
                raise ClientError({"Error": {"Code": "MessageRejected", "Message": "no"}}, "SendRawEmail")
            return mailer.send(**kwargs)

    kinds = WorkKindRegistry()
    register(kinds)
    with connect(db_url) as conn, connect(db_url) as journal:
        services = dl.DeliveryServices(journal=lambda: journal, s3=s3, bucket=BUCKET, mailer=Capture(),
                                       links=LinkSigner(KEY), download_base_url="https://api.test/")
        process_run(conn, message, receive_count=1, now=NOW, registry=kinds,
                    settings=ConsumerSettings.from_pipeline(QUERIES), services={"delivery": services})
    return sent


def schedule_row(db_url, schedule_id: str) -> dict:
    with connect(db_url) as conn:
        return conn.execute("SELECT consecutive_failures, last_run_id, last_outcome, last_run_at, next_due_at, "
                            "status FROM schedules WHERE id = %s", (schedule_id,)).fetchone()


def notices(db_url, schedule_id: str) -> int:
    with connect(db_url) as conn:
        return conn.execute("SELECT count(*) AS n FROM schedule_notifications WHERE schedule_id = %s",
                            (schedule_id,)).fetchone()["n"]


def test_a_test_goes_to_the_requester_only_and_shows_in_the_ledger_as_a_test(call, tenants, publisher, aws, db_url):
    schedule_id = create(call, tenants)
    before = schedule_row(db_url, schedule_id)
    accepted = call("POST", f"/query-schedules/{schedule_id}/test", headers={"Idempotency-Key": "t1"},
                    as_=person(tenants, "tess"))
    again = call("POST", f"/query-schedules/{schedule_id}/test", headers={"Idempotency-Key": "t1"},
                 as_=person(tenants, "tess"))
    assert accepted.status == 202, accepted.body
    assert (accepted.body["user_id"], accepted.body["email"], accepted.body["created"]) == ("tess", "tess@x.test",
                                                                                            True)
    assert (again.status, again.body["run_id"], again.body["created"]) == (202, accepted.body["run_id"], False)
    (message,) = publisher.sent
    assert message.owner == "queries" and str(message.run_id) == accepted.body["run_id"]
    sent = deliver(db_url, message, aws)
    # Exactly one message, to the requester's own address, built as the delivery's (its subject, its link)
    assert [m["to"] for m in sent] == ["tess@x.test"]
    assert sent[0]["subject"].startswith("Daily invoices ") and "https://api.test/downloads/" in sent[0]["html"]
    (run,) = call("GET", f"/query-schedules/{schedule_id}/runs", as_=person(tenants, "tess")).body["items"]
    assert (run["trigger"], run["requested_by"], run["state"], run["acted_for"], run["row_count"]) == (
        "test", "tess", "succeeded", "tess", 1)
    assert [(d["user_id"], d["status"]) for d in run["deliveries"]] == [("tess", "sent")]
    # The schedule is as it was: recipients, next due instant, last run
    assert schedule_row(db_url, schedule_id) == before
    assert call("GET", f"/query-schedules/{schedule_id}", as_=person(tenants, "tess")).body["recipients"] == [
        "rita", "ron"]


def test_a_test_run_leaves_the_streak_and_next_due_as_they_were_even_when_it_fails(
        call, tenants, publisher, aws, db_url):
    schedule_id = create(call, tenants, as_="pia")
    with connect(db_url) as conn:  # two scheduled failures in a row before
        conn.execute("UPDATE schedules SET consecutive_failures = 2, last_outcome = 'recipients_refused' "
                     "WHERE id = %s", (schedule_id,))
    before = schedule_row(db_url, schedule_id)
    failing = call("POST", f"/query-schedules/{schedule_id}/test", as_=person(tenants, "pia"))
    assert failing.status == 202
    sent = deliver(db_url, publisher.sent[-1], aws, refuse=True)
    assert [m["to"] for m in sent] == ["pia@x.test"]
    (run,) = call("GET", f"/query-schedules/{schedule_id}/runs", as_=person(tenants, "pia")).body["items"]
    assert (run["trigger"], run["state"], run["outcome_code"]) == ("test", "failed", "recipients_refused")
    after = schedule_row(db_url, schedule_id)
    assert after == before and after["consecutive_failures"] == 2 and after["status"] == "active"
    assert notices(db_url, schedule_id) == 0
    # A succeeding test does not reset the streak either (a Run now would)
    call("POST", f"/query-schedules/{schedule_id}/test", as_=person(tenants, "pia"))
    deliver(db_url, publisher.sent[-1], aws)
    assert schedule_row(db_url, schedule_id) == before


def test_tests_are_limited_per_delivery_and_per_person_within_the_hour(call, tenants, clock_now):
    lim = person(tenants, "lim")
    first = create(call, tenants, as_="lim")
    for _ in range(send_tests.PER_DELIVERY_PER_HOUR):
        assert call("POST", f"/query-schedules/{first}/test", as_=lim).status == 202
    limited = call("POST", f"/query-schedules/{first}/test", as_=lim)
    assert (limited.status, limited.body["code"]) == (429, "test_send_limited")
    assert limited.headers["retry-after"] == "3600" and "5 times within the hour" in limited.body["message"]
    # The person's own limit over all deliveries: 20 within the hour
    others = [create(call, tenants, as_="lim") for _ in range(4)]
    for schedule_id in others[:3]:
        for _ in range(send_tests.PER_DELIVERY_PER_HOUR):
            assert call("POST", f"/query-schedules/{schedule_id}/test", as_=lim).status == 202
    clock_now["now"] = NOW + timedelta(minutes=10)
    mine = call("POST", f"/query-schedules/{others[3]}/test", as_=lim)
    assert (mine.status, mine.body["code"]) == (429, "test_send_limited")
    assert mine.headers["retry-after"] == str(50 * 60) and "you asked for 20" in mine.body["message"]
    # Another person may still test the delivery that is not at its limit; an hour later, lim too
    assert call("POST", f"/query-schedules/{others[3]}/test", as_=person(tenants, "tess")).status == 202
    clock_now["now"] = NOW + timedelta(hours=1, seconds=1)
    assert call("POST", f"/query-schedules/{first}/test", as_=lim).status == 202


def test_another_workspace_roles_access_and_address_are_refused(call, tenants, db_url):
    schedule_id = create(call, tenants)
    target = f"/query-schedules/{schedule_id}/test"
    # Another workspace's member: 404, as for any of its routes
    assert call("POST", target, as_=person(tenants, "bob", "b")).status == 404
    # A token without queries:write: 403; a membership without it (rita reads only): 403
    reader = Caller(user_id="rita", workspace_id=tenants["a"], roles="queries:read")
    assert call("POST", target, as_=reader).status == 403
    assert call("POST", target, as_=person(tenants, "rita")).status == 403
    # A member who may not read the source (vic: reports:read only): 403 with the rule's reason
    refused = call("POST", target, as_=person(tenants, "vic"))
    assert (refused.status, refused.body["code"]) == (403, "missing_role")
    # No address in the directory: a clear refusal, nothing queued
    with connect(db_url) as conn:
        before = conn.execute("SELECT count(*) AS n FROM schedule_runs WHERE schedule_id = %s",
                              (schedule_id,)).fetchone()["n"]
    nora = call("POST", target, as_=person(tenants, "nora"))
    assert (nora.status, nora.body["code"]) == (409, "no_address")
    assert "no email address" in nora.body["message"]
    with connect(db_url) as conn:
        assert conn.execute("SELECT count(*) AS n FROM schedule_runs WHERE schedule_id = %s",
                            (schedule_id,)).fetchone()["n"] == before


def test_the_delivery_page_offers_the_test_to_writers_and_says_where_it_went(
        call, tenants, publisher, aws, db_url, console):
    from tests.api.test_console import Browser, _header

    schedule_id = create(call, tenants)
    page_path = f"/console/deliveries/{schedule_id}"
    # A reader is not offered the button
    reader = Browser(console)
    reader.sign_in(Caller(user_id="rita", workspace_id=tenants["a"]), roles=("queries:read",))
    assert "Send a test to me" not in reader.request("GET", page_path)["body"]
    # A writer is; the form carries the session's CSRF token and an Idempotency-Key
    browser = Browser(console)
    browser.sign_in(person(tenants, "tess"), roles=("queries:read", "queries:write"))
    page = browser.request("GET", page_path)["body"]
    form = re.search(rf'<form method="post" action="/console/deliveries/{schedule_id}/test">(.*?)</form>', page,
                     re.S)
    assert form and "Send a test to me" in form.group(1)
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.group(1)).group(1)
    key = re.search(r'name="key" value="([^"]+)"', form.group(1)).group(1)
    # Without the token nothing is sent
    assert browser.request("POST", f"{page_path}/test", {"key": key})["statusCode"] == 403
    assert publisher.sent == []
    done = browser.request("POST", f"{page_path}/test", {"csrf": csrf, "key": key})
    assert done["statusCode"] == 303
    location = _header(done, "Location")
    assert location.startswith(page_path) and "done=test" in location
    deliver(db_url, publisher.sent[-1], aws)
    shown = browser.get_decoded(location)["body"]
    assert "A test of this delivery is on its way to you only, at <bdi>tess@x.test</bdi>" in shown
    # the ledger's heading says it once; the Changes tell the test from a Run now
    assert '<span class="mark" data-code="test">test</span> sent only to ' in shown
    assert "test Test" not in shown and "Test (sent only" not in shown
    changes = shown[shown.index("<h2>Changes</h2>"):]
    assert "Test sent to " in changes and "Run now requested" not in changes
    # A refusal is shown on the page with the API's reason (Nora has no address)
    nora = Browser(console)
    nora.sign_in(person(tenants, "nora"), roles=("queries:read", "queries:write"))
    token = nora.csrf(page_path)
    refused = nora.request("POST", f"{page_path}/test", {"csrf": token, "key": "nora-1"})
    assert refused["statusCode"] == 409
    assert "No test was sent: you have no email address in the directory" in refused["body"]
