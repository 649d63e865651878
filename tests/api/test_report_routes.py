"""The report routes over the real database (the API's walled login) and moto S3: roles
from the claims, then the access rule in the database (403 with its reason, 404 for other
workspaces), 422 naming the definition's field, versions, and renders with a download
link (none past the files' retention: ``expired`` since ``expired_at``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit
from uuid import UUID, uuid4

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from tests.api.conftest import Caller, proxy_event
from tests.integration.report_helpers import NOW, definition, make_tenant
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.reports import expires_at
from timekeeper.db.connection import connect as connect_owner
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext
from timekeeper.platform import directory
from timekeeper.reporting.rendering import render
from timekeeper.settings import REPORT_RETENTION_DAYS_VARIABLE

BUCKET = "files"


class RecordingRenderer:
    """A RendererClient fake: keeps the requested render ids."""

    def __init__(self) -> None:
        self.requested: list = []

    def request(self, *, workspace_id, render_id) -> None:
        self.requested.append(render_id)


@pytest.fixture
def s3(monkeypatch):
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", config=Config(signature_version="s3v4"))  # as timekeeper.edge.adapters.s3_client
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(scope="module")
def tenants(db_url):
    from timekeeper.db.connection import connect

    with connect(db_url) as c:
        return make_tenant(c, "api-a"), make_tenant(c, "api-b")


@pytest.fixture
def renderer():
    return RecordingRenderer()


@pytest.fixture
def send(api_conn, s3, renderer):
    app = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: None,
                                 registry=registries.work_kinds, now=lambda: NOW, renderer=lambda: renderer,
                                 files=lambda: (s3, BUCKET)))

    def _send(method, target, who: Caller, body=None, headers=None):
        response = app.resolve(proxy_event(method, target, claims=who.claims(), body=body, headers=headers),
                               LambdaContext(function_name="timekeeper-api"))
        return response["statusCode"], json.loads(response["body"]) if response.get("body") else None

    return _send


def author(t, roles="reports:write"):
    return Caller(user_id=t.author, workspace_id=t.workspace_id, roles=roles)


def reader(t, roles="reports:read"):
    return Caller(user_id=t.reader, workspace_id=t.workspace_id, roles=roles)


def test_create_edit_read_and_list(send, tenants):
    a, _ = tenants
    # When the author creates a report
    status, created = send("POST", "/reports", author(a), {"name": "Invoices", "definition": definition(a)})
    assert status == 201, created
    assert created["current_version"] == 1 and created["definition"]["title"] == "Monthly invoices"
    rid = created["id"]
    # And saves a second version
    status, edited = send("PUT", f"/reports/{rid}", author(a), {"definition": definition(a, "Second")})
    assert status == 200 and edited["current_version"] == 2 and edited["name"] == "Invoices"
    # Then a reader sees the current version and its definition
    status, got = send("GET", f"/reports/{rid}", reader(a))
    assert status == 200 and got["current_version"] == 2 and got["definition"]["title"] == "Second"
    assert got["definition"]["sections"][2]["query_version"] == 1
    # And the listing pages with a cursor
    send("POST", "/reports", author(a), {"name": "Other", "definition": definition(a)})
    status, page = send("GET", "/reports?limit=1", reader(a))
    assert status == 200 and len(page["items"]) == 1 and page["next_cursor"]
    status, rest = send("GET", f"/reports?limit=200&cursor={page['next_cursor']}", reader(a))
    assert status == 200 and page["items"][0]["id"] not in {r["id"] for r in rest["items"]}
    assert rest["next_cursor"] is None


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda t, d: d["sections"][0].update(query_id=str(uuid4())), "definition.sections[0].query_id"),
    (lambda t, d: d["sections"][1].update(value_column="member_name"), "definition.sections[1].value_column"),
    (lambda t, d: d["sections"][1].pop("label_column"), "definition.sections[1].label_column"),
    (lambda t, d: d["sections"][1].update(display="pie"), "definition.sections[1].display"),
    (lambda t, d: d.update(sections=[]), "definition.sections"),
])
def test_an_invalid_definition_is_a_422_naming_the_field(send, tenants, mutate, field):
    a, _ = tenants
    data = definition(a)
    mutate(a, data)
    status, body = send("POST", "/reports", author(a), {"name": "bad", "definition": data})
    assert status == 422 and body["field"] == field, body


def test_another_workspaces_report_and_query_are_not_found(send, tenants):
    a, b = tenants
    _, created = send("POST", "/reports", author(a), {"name": "A's", "definition": definition(a)})
    # Then B's people get 404 for A's report, and cannot name A's query
    assert send("GET", f"/reports/{created['id']}", reader(b))[0] == 404
    assert send("PUT", f"/reports/{created['id']}", author(b), {"definition": definition(b)})[0] == 404
    status, body = send("POST", "/reports", author(b), {"name": "x", "definition": definition(a)})
    assert status == 422 and body["field"] == "definition.sections[0].query_id"


def test_roles_in_the_claims_then_the_access_rule_in_the_database(send, conn, tenants):
    a, _ = tenants
    _, created = send("POST", "/reports", author(a), {"name": "r", "definition": definition(a)})
    rid = created["id"]
    # A claim without the role: 403 forbidden before the database is asked
    status, body = send("POST", "/reports", reader(a), {"name": "x", "definition": definition(a)})
    assert (status, body["code"]) == (403, "forbidden")
    # Claims that say writer, but the membership in the database only reads: the rule's reason
    status, body = send("PUT", f"/reports/{rid}", reader(a, roles="reports:write"), {"definition": definition(a)})
    assert (status, body["code"]) == (403, "missing_role")
    # A person who left the workspace keeps stale claims: the rule refuses
    leaver = f"leaver-{uuid4().hex[:6]}"
    with conn.transaction():
        directory.upsert_user(conn, user_id=leaver, now=NOW)
        directory.add_member(conn, workspace_id=a.workspace_id, user_id=leaver, roles=["reports:read"], now=NOW)
        directory.leave_workspace(conn, workspace_id=a.workspace_id, user_id=leaver, now=NOW)
    who = Caller(user_id=leaver, workspace_id=a.workspace_id, roles="reports:read")
    status, body = send("GET", f"/reports/{rid}", who)
    assert (status, body["code"]) == (403, "left_workspace")
    status, body = send("GET", "/reports", Caller(user_id="stranger", workspace_id=a.workspace_id,
                                                  roles="reports:read"))
    assert (status, body["code"]) == (403, "not_a_member")


def test_a_render_is_requested_once_per_key_and_downloadable_when_done(send, conn, tenants, renderer, s3):
    a, _ = tenants
    _, created = send("POST", "/reports", author(a), {"name": "r", "definition": definition(a)})
    rid = created["id"]
    # The key is required
    status, body = send("POST", f"/reports/{rid}/renders", reader(a))
    assert status == 422 and body["field"].lower() == "idempotency-key"
    # When a render is requested twice with one key
    key = {"Idempotency-Key": f"click-{uuid4()}"}
    status, first = send("POST", f"/reports/{rid}/renders", reader(a), headers=key)
    status2, second = send("POST", f"/reports/{rid}/renders", reader(a), headers=key)
    # Then one render, pinned to the current version, asked of the renderer while unfinished
    assert (status, status2) == (202, 202) and first["id"] == second["id"]
    assert first["state"] == "requested" and first["report_version"] == 1 and first["download_url"] is None
    assert [str(r) for r in renderer.requested] == [first["id"], first["id"]]
    # When the renderer ran it
    done = render(conn, s3, BUCKET, workspace_id=a.workspace_id, render_id=UUID(first["id"]), now=NOW)
    assert done.state == "succeeded"
    # Then reading it gives a download link valid 60 s, for the object
    status, got = send("GET", f"/reports/{rid}/renders/{first['id']}", reader(a))
    assert status == 200 and got["state"] == "succeeded" and got["sha256"] == done.sha256
    url = urlsplit(got["download_url"])
    assert url.path.endswith(done.object_key) and parse_qs(url.query)["X-Amz-Expires"] == ["60"]
    # And repeating the key now changes nothing and asks the renderer nothing
    status, third = send("POST", f"/reports/{rid}/renders", reader(a), headers=key)
    assert third["state"] == "succeeded" and len(renderer.requested) == 2
    # And the key cannot name another report's render
    _, other = send("POST", "/reports", author(a), {"name": "o", "definition": definition(a)})
    status, body = send("POST", f"/reports/{other['id']}/renders", reader(a), headers=key)
    assert (status, body["code"]) == (409, "idempotency_key_reused")
    # And the render is not found under another report
    assert send("GET", f"/reports/{other['id']}/renders/{first['id']}", reader(a))[0] == 404


def test_a_render_key_belongs_to_one_request_of_one_requester(send, tenants, renderer, s3, db_url):
    a, _ = tenants
    with connect_owner(db_url) as conn, conn.transaction():
        directory.upsert_user(conn, user_id="api-a-reader-2", display_name="r2", now=NOW)
        directory.add_member(conn, workspace_id=a.workspace_id, user_id="api-a-reader-2", roles=["reports:read"],
                             now=NOW)
    second_reader = Caller(user_id="api-a-reader-2", workspace_id=a.workspace_id, roles="reports:read")
    _, created = send("POST", "/reports", author(a), {"name": "r", "definition": definition(a)})
    rid = created["id"]
    key = {"Idempotency-Key": f"once-{uuid4()}"}
    status, first = send("POST", f"/reports/{rid}/renders", reader(a), headers=key)
    assert status == 202
    # The same request replays the same render
    assert send("POST", f"/reports/{rid}/renders", reader(a), headers=key)[1]["id"] == first["id"]
    # The key on another report's URL is a conflict naming the key
    _, other = send("POST", "/reports", author(a), {"name": "o", "definition": definition(a)})
    status, body = send("POST", f"/reports/{other['id']}/renders", reader(a), headers=key)
    assert (status, body["code"], body["field"]) == (409, "idempotency_key_reused", "Idempotency-Key")
    # Another requester with the same key gets a render of their own
    status, theirs = send("POST", f"/reports/{rid}/renders", second_reader, headers=key)
    assert status == 202 and theirs["id"] != first["id"]


def _report_delivery(conn, t, report_id, name):
    from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

    schedule, _ = create_query_schedule(
        conn, workspace_id=t.workspace_id, actor=t.author, now=NOW,
        new=NewQuerySchedule(name=name, recurrence={"cron": "0 8 * * 1", "timezone": "Europe/Berlin"},
                             source=Source(kind="report", report_id=UUID(report_id)), format="pdf",
                             recipients=[t.author], subject_template="Report", body_template="{{ link }}"))
    return str(schedule.id)


def test_the_list_shows_each_reports_sections_and_who_saved_it_in_the_workspace_zone(send, tenants):
    a, _ = tenants
    _, created = send("POST", "/reports", author(a), {"name": "Counted", "definition": definition(a)})
    two = definition(a)
    two["sections"] = two["sections"][:2]
    send("PUT", f"/reports/{created['id']}", author(a, roles="reports:write"), {"definition": two})
    status, page = send("GET", "/reports?limit=200", reader(a))
    assert status == 200 and page["timezone"] == "Europe/Berlin"
    item = next(i for i in page["items"] if i["id"] == created["id"])
    assert (item["sections"], item["updated_by"], item["current_version"]) == (2, a.author, 2)


def test_versions_are_listed_newest_first_and_only_in_the_reports_workspace(send, tenants):
    a, b = tenants
    _, created = send("POST", "/reports", author(a), {"name": "Versioned", "definition": definition(a)})
    rid = created["id"]
    send("PUT", f"/reports/{rid}", author(a), {"definition": definition(a, "Second")})
    status, body = send("GET", f"/reports/{rid}/versions", reader(a))
    assert status == 200, body
    assert body["current_version"] == 2 and body["timezone"] == "Europe/Berlin"
    assert [(v["version"], v["title"], v["sections"], v["created_by"]) for v in body["items"]] == [
        (2, "Second", 3, a.author), (1, "Monthly invoices", 3, a.author)]
    # Another workspace's people: 404; a caller without a reports role: 403
    assert send("GET", f"/reports/{rid}/versions", reader(b))[0] == 404
    assert send("GET", f"/reports/{uuid4()}/versions", reader(a))[0] == 404
    status, body = send("GET", f"/reports/{rid}/versions", reader(a, roles="queries:read"))
    assert (status, body["code"]) == (403, "forbidden")


def test_used_by_names_the_workspaces_deliveries_of_the_report(send, conn, tenants):
    from timekeeper.schedules.service import delete_schedule

    a, b = tenants
    _, created = send("POST", "/reports", author(a), {"name": "Delivered", "definition": definition(a)})
    rid = created["id"]
    assert created["used_by"] == []
    with conn.transaction():
        weekly = _report_delivery(conn, a, rid, "Weekly to the board")
        monthly = _report_delivery(conn, a, rid, "Monthly archive")
    status, got = send("GET", f"/reports/{rid}", reader(a))
    assert status == 200 and got["timezone"] == "Europe/Berlin"
    assert got["used_by"] == [{"schedule_id": monthly, "name": "Monthly archive"},
                              {"schedule_id": weekly, "name": "Weekly to the board"}]
    # Another report of the workspace is used by none of them
    _, other = send("POST", "/reports", author(a), {"name": "Unused", "definition": definition(a)})
    assert send("GET", f"/reports/{other['id']}", reader(a))[1]["used_by"] == []
    # A deleted delivery leaves the list
    with conn.transaction():
        delete_schedule(conn, workspace_id=a.workspace_id, schedule_id=UUID(weekly), actor=a.author, now=NOW)
    assert [u["name"] for u in send("GET", f"/reports/{rid}", reader(a))[1]["used_by"]] == ["Monthly archive"]


# ------------------------------------------------- a render past the files' retention


def _rendered(send, conn, s3, tenant, *, at):
    """A succeeded render of a new report of ``tenant``, written at ``at``: ``(report id, render id)``."""
    _, created = send("POST", "/reports", author(tenant), {"name": "r", "definition": definition(tenant)})
    _, requested = send("POST", f"/reports/{created['id']}/renders", reader(tenant),
                        headers={"Idempotency-Key": f"k-{uuid4()}"})
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=UUID(requested["id"]), now=at)
    assert done.state == "succeeded"
    return created["id"], requested["id"]


def test_a_render_past_the_retention_is_expired_without_a_link(send, conn, tenants, s3):
    a, _ = tenants
    # Given a render written 36 days ago (the retention is 35 days by default)
    rid, render_id = _rendered(send, conn, s3, a, at=NOW - timedelta(days=36))
    # When it is read
    status, got = send("GET", f"/reports/{rid}/renders/{render_id}", reader(a))
    # Then it says it expired, and when, and signs no link
    assert status == 200 and got["state"] == "succeeded"
    assert got["expired"] is True and got["retention_days"] == 35
    assert got["download_url"] is None and got["download_expires_at"] is None
    assert got["expired_at"] == expires_at(NOW - timedelta(days=36), 35).isoformat().replace("+00:00", "Z")


def test_a_render_within_the_retention_has_its_link_and_when_it_expires(send, conn, tenants, s3):
    a, _ = tenants
    rid, render_id = _rendered(send, conn, s3, a, at=NOW - timedelta(days=10))
    status, got = send("GET", f"/reports/{rid}/renders/{render_id}", reader(a))
    assert status == 200 and got["expired"] is False and got["download_url"]
    assert got["expired_at"] == expires_at(NOW - timedelta(days=10), 35).isoformat().replace("+00:00", "Z")


def test_the_deployment_s_retention_decides(send, conn, tenants, s3, monkeypatch):
    a, _ = tenants
    monkeypatch.setenv(REPORT_RETENTION_DAYS_VARIABLE, "60")
    rid, render_id = _rendered(send, conn, s3, a, at=NOW - timedelta(days=36))
    status, got = send("GET", f"/reports/{rid}/renders/{render_id}", reader(a))
    assert got["expired"] is False and got["retention_days"] == 60 and got["download_url"]


def test_s3_counts_the_retention_from_the_next_midnight_utc():
    assert expires_at(datetime(2027, 3, 1, 10, 30, tzinfo=UTC), 35) == datetime(2027, 4, 6, tzinfo=UTC)
    assert expires_at(datetime(2027, 3, 1, 0, 0, tzinfo=UTC), 35) == datetime(2027, 4, 5, tzinfo=UTC)
