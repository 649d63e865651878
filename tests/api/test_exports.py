"""The export routes over the API's row-level-security connection, moto S3 and SQS and the
real consumer handler: request, poll, download through the presigned URL; idempotency;
the claims role and the access rule; another workspace's and another user's exports."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from uuid import UUID, uuid4

import boto3
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from tests.api.conftest import NOW, Caller
from tests.support import sqs_event
from timekeeper import clock, edge
from timekeeper.api import ApiAdapters, create_app
from timekeeper.edge import adapters, registries
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.lambdas import invoke
from timekeeper.platform.directory import add_member, create_workspace, upsert_user
from timekeeper.reporting import catalogue, store
from timekeeper.reporting import exports as ex
from timekeeper.topology import EXPORTS

DEFINITION = {"entity": "invoices", "columns": ["number", "amount_minor", "issue_date"],
              "sort": [{"column": "number"}]}


@pytest.fixture(scope="module")
def tenants(db_url):
    """Workspace A: alice and erin read queries, bob holds reports:read only; 25 invoices
    and alice's saved query. Workspace B: carol, a workspace admin."""
    from timekeeper.db.connection import connect

    with connect(db_url) as conn, conn.transaction():
        a = create_workspace(conn, name="A", timezone="Europe/Berlin", now=NOW).id
        b = create_workspace(conn, name="B", timezone="UTC", now=NOW).id
        for user in ("alice", "bob", "carol", "erin"):
            upsert_user(conn, user_id=user, now=NOW)
        add_member(conn, workspace_id=a, user_id="alice", roles=["queries:read"], now=NOW)
        add_member(conn, workspace_id=a, user_id="erin", roles=["queries:write"], now=NOW)
        add_member(conn, workspace_id=a, user_id="bob", roles=["reports:read"], now=NOW)
        add_member(conn, workspace_id=b, user_id="carol", roles=["workspace:admin"], now=NOW)
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Ada', '2026-01-01') RETURNING id", (a,)).fetchone()["id"]
        for i in range(25):
            conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                         "currency, status) VALUES (%s, %s, %s, %s, %s, %s, 'EUR', 'open')",
                         (a, member, f"INV-{i:02d}", date(2027, 1, 1), date(2027, 2, 1), 100 * i))
        query, _ = store.create_query(conn, workspace_id=a, name="Invoices", definition=DEFINITION, actor="alice",
                                      now=NOW)
    return {"a": a, "b": b, "query": query.id}


@pytest.fixture
def aws(db_url, monkeypatch):
    """moto with the exports queue and the files bucket; the consumer's edge configured."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "DATABASE_URL": db_url, "FILES_BUCKET": "files"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        boto3.client("s3").create_bucket(Bucket="files")
        pair = create_pipeline_queues(sqs, EXPORTS)
        monkeypatch.setenv(EXPORTS.queue_url_variable, pair.url)
        edge.reset()
        clock.install(lambda: NOW)
        yield {"sqs": sqs, "queue": pair}
        edge.reset()
        clock.install(None)


@pytest.fixture
def app(api_conn, publisher, clock_now, aws):
    """The resolver with the real exports publisher and S3 client (moto)."""
    return create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: publisher,
                                  registry=registries.work_kinds, now=lambda: clock_now["now"],
                                  export_publisher=adapters.export_publisher,
                                  files=lambda: (adapters.s3_client(), adapters.files_bucket())))


def who(user: str, workspace: UUID, roles: str = "queries:read") -> Caller:
    return Caller(user_id=user, workspace_id=workspace, roles=roles)


def drain(aws) -> int:
    handled = 0
    while got := aws["sqs"].receive_message(QueueUrl=aws["queue"].url, MaxNumberOfMessages=10).get("Messages", []):
        for message in got:
            assert invoke("export_consumer", sqs_event(json.loads(message["Body"]))) == {"batchItemFailures": []}
            aws["sqs"].delete_message(QueueUrl=aws["queue"].url, ReceiptHandle=message["ReceiptHandle"])
            handled += 1
    return handled


def test_request_poll_and_download_an_export(call, tenants, aws, clock_now):
    alice = who("alice", tenants["a"])
    # When alice requests a CSV export of her query
    reply = call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv"}, as_=alice)
    # Then it is accepted, queued, pinned to the current version
    assert reply.status == 202, reply.body
    export_id = reply.body["id"]
    assert reply.headers["location"] == f"/exports/{export_id}"
    assert (reply.body["state"], reply.body["query_version"], reply.body["created"]) == ("queued", 1, True)
    assert call("GET", f"/exports/{export_id}", as_=alice).body["download_url"] is None
    # When the consumer has run it
    assert drain(aws) == 1
    clock_now["now"] = NOW + timedelta(seconds=5)
    done = call("GET", f"/exports/{export_id}", as_=alice)
    # Then it succeeded with its counts, and the link (short-lived) downloads the recorded file
    assert done.status == 200 and done.body["state"] == "succeeded" and done.body["row_count"] == 25
    expires = datetime.fromisoformat(done.body["download_expires_at"])
    assert 60 <= (expires - clock_now["now"]).total_seconds() <= 300
    download = requests.get(done.body["download_url"], timeout=10)
    assert download.status_code == 200
    assert hashlib.sha256(download.content).hexdigest() == done.body["sha256"]
    assert len(download.content) == done.body["byte_size"]
    assert download.content.decode().splitlines()[:2] == ["Number,Amount (USD),Issued", "INV-00,0.00,2027-01-01"]
    assert f'filename="export-{export_id}.csv"' in download.headers["content-disposition"]


def test_a_repeated_idempotency_key_returns_the_same_export_with_200(call, tenants, aws):
    alice = who("alice", tenants["a"])
    first = call("POST", f"/queries/{tenants['query']}/exports", {"format": "xlsx", "version": 1},
                 headers={"Idempotency-Key": "export-1"}, as_=alice)
    again = call("POST", f"/queries/{tenants['query']}/exports", {"format": "xlsx", "version": 1},
                 headers={"Idempotency-Key": "export-1"}, as_=alice)
    assert (first.status, again.status) == (202, 200)
    assert again.body["id"] == first.body["id"] and again.body["created"] is False


def test_the_claims_role_and_the_access_rule_are_both_required(call, tenants, aws):
    target = f"/queries/{tenants['query']}/exports"
    # Without the claims role: forbidden
    schedules_only = who("alice", tenants["a"], roles="schedules:admin")
    assert call("POST", target, {"format": "csv"}, as_=schedules_only).body["code"] == "forbidden"
    # With it, but the directory refuses: 403 with the rule's reason
    refused = call("POST", target, {"format": "csv"}, as_=who("bob", tenants["a"]))
    assert (refused.status, refused.body["code"]) == (403, "missing_role")
    stranger = call("POST", target, {"format": "csv"}, as_=replace(who("mallory", tenants["a"]), enrol=False))
    assert (stranger.status, stranger.body["code"]) == (403, "not_a_member")


def test_unknown_queries_versions_and_formats(call, tenants, aws, monkeypatch):
    alice = who("alice", tenants["a"])
    assert call("POST", f"/queries/{uuid4()}/exports", {"format": "csv"}, as_=alice).status == 404
    assert call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv", "version": 9},
                as_=alice).status == 404
    bad = call("POST", f"/queries/{tenants['query']}/exports", {"format": "pdf"}, as_=alice)
    assert (bad.status, bad.body["field"]) == (422, "format")
    assert call("GET", f"/exports/{uuid4()}", as_=alice).status == 404
    invoices = catalogue.CATALOGUE["invoices"]
    monkeypatch.setitem(catalogue.CATALOGUE, "invoices", catalogue.Entity(
        name="invoices", label=invoices.label, table=invoices.table,
        columns={k: v for k, v in invoices.columns.items() if k != "issue_date"}, joins=invoices.joins))
    stale = call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv"}, as_=alice)
    assert (stale.status, stale.body["code"], stale.body["field"]) == (409, "definition_invalid", "columns[2]")


def test_another_workspaces_query_and_export_are_not_found(call, tenants, aws):
    # Given an export of alice's in workspace A
    alice = who("alice", tenants["a"])
    export_id = call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv"}, as_=alice).body["id"]
    carol = who("carol", tenants["b"])
    # Then carol (workspace B, every right there) finds neither A's query nor A's export
    post = call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv"}, as_=carol)
    assert (post.status, post.body["code"]) == (404, "not_found")
    get = call("GET", f"/exports/{export_id}", as_=carol)
    assert (get.status, get.body["code"]) == (404, "not_found")
    # And erin, a reader of A, does not see alice's export either (exports are their requester's)
    assert call("GET", f"/exports/{export_id}", as_=who("erin", tenants["a"])).status == 404
    assert call("GET", f"/exports/{export_id}", as_=alice).status == 200


def test_polling_an_unpublished_export_offers_it_again(call, tenants, aws, conn, clock_now):
    # Given an export whose publish the queue refused
    class Refusing:
        def publish(self, messages):
            return {m.export_id for m in messages}

    export, _ = ex.request_export(conn, workspace_id=tenants["a"], query_id=tenants["query"], version=None,
                                  format="csv", requested_by="alice", idempotency_key=None, now=NOW,
                                  publisher=Refusing())
    alice = who("alice", tenants["a"])
    # When alice polls it at once, nothing is sent; once it is reoffer_after old, it is published
    call("GET", f"/exports/{export.id}", as_=alice)
    assert drain(aws) == 0
    clock_now["now"] = NOW + EXPORTS.reoffer_after
    assert call("GET", f"/exports/{export.id}", as_=alice).body["state"] == "queued"
    assert drain(aws) == 1
    assert call("GET", f"/exports/{export.id}", as_=alice).body["state"] == "succeeded"


# ------------------------------------------------- what saves must run: every type and operator

def _scalar_values(column: catalogue.Column):
    """Hypothesis strategy of JSON values a filter on ``column`` accepts."""
    kind = column.type
    if kind is catalogue.ColumnType.ENUM:
        return st.sampled_from(column.values)
    if kind is catalogue.ColumnType.TEXT:
        return st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
    if kind in (catalogue.ColumnType.INTEGER, catalogue.ColumnType.MONEY):
        return st.integers(-(2**63), 2**63 - 1)
    if kind is catalogue.ColumnType.BOOLEAN:
        return st.booleans()
    if kind is catalogue.ColumnType.DATE:
        return st.dates().map(date.isoformat)
    if kind is catalogue.ColumnType.TIMESTAMP:
        return st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat)
    if kind is catalogue.ColumnType.UUID:
        return st.uuids().map(str)
    raise AssertionError(kind)


def _filter_values(column: catalogue.Column, op: catalogue.Operator):
    ops = catalogue.Operator
    if op in (ops.IS_NULL, ops.IS_NOT_NULL):
        return st.none()
    if op in (ops.IN, ops.NOT_IN):
        return st.lists(_scalar_values(column), min_size=1, max_size=3)
    if op is ops.BETWEEN:
        return st.lists(_scalar_values(column), min_size=2, max_size=2).map(sorted)
    return _scalar_values(column)


#: One (entity, column) of each column type the catalogue has, with each operator it allows.
_TYPE_OPERATORS = sorted(
    {column.type: (entity.name, column.name)
     for entity in catalogue.CATALOGUE.values() for column in entity.columns.values()}.items())
FILTER_CASES = [(entity, name, op) for kind, (entity, name) in _TYPE_OPERATORS
                for op in sorted(catalogue.OPERATORS[kind])]


@pytest.mark.parametrize(("entity", "column", "op"), FILTER_CASES, ids=lambda v: str(v))
def test_a_saved_query_with_any_filter_exports(call, tenants, aws, entity, column, op):
    """What saves must run: a query saved through ``POST /queries`` with a filter of every
    column type and operator exports through the real consumer (no ``definition_invalid``)."""
    erin = who("erin", tenants["a"], roles="queries:read,queries:write")
    spec = catalogue.CATALOGUE[entity].columns[column]

    @settings(max_examples=3, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(value=_filter_values(spec, op))
    def saved_query_exports(value):
        definition = {"entity": entity, "columns": [column],
                      "filters": [{"column": column, "op": op.value, "value": value}], "limit": 5}
        saved = call("POST", "/queries", {"name": "property", "definition": definition}, as_=erin)
        assert saved.status == 201, saved.body
        query_id = saved.body["query"]["id"]
        shown = call("GET", f"/queries/{query_id}", as_=erin)
        assert shown.body["versions"][0]["problem"] is None, shown.body
        export = call("POST", f"/queries/{query_id}/exports", {"format": "csv"}, as_=erin)
        assert export.status == 202, export.body
        assert drain(aws) == 1
        done = call("GET", f"/exports/{export.body['id']}", as_=erin)
        assert done.body["state"] == "succeeded", done.body

    saved_query_exports()


def test_an_idempotency_key_belongs_to_one_request_of_one_requester(call, tenants, aws, db_url):
    from timekeeper.db.connection import connect

    alice, erin = who("alice", tenants["a"]), who("erin", tenants["a"])
    with connect(db_url) as conn, conn.transaction():
        other, _ = store.create_query(conn, workspace_id=tenants["a"], name="Other", definition=DEFINITION,
                                      actor="alice", now=NOW)
    key = {"Idempotency-Key": f"once-{uuid4()}"}
    target = f"/queries/{tenants['query']}/exports"
    first = call("POST", target, {"format": "csv"}, headers=key, as_=alice)
    assert first.status == 202
    # The same request replays: the same export, 200
    again = call("POST", target, {"format": "csv"}, headers=key, as_=alice)
    assert (again.status, again.body["id"]) == (200, first.body["id"])
    # A different body (format, version) or another query's URL with the key is refused, naming the key
    for path, body in ((target, {"format": "xlsx"}), (target, {"format": "csv", "version": 1}),
                       (f"/queries/{other.id}/exports", {"format": "csv"})):
        refused = call("POST", path, body, headers=key, as_=alice)
        assert (refused.status, refused.body["code"], refused.body["field"]) == (
            409, "idempotency_key_reused", "Idempotency-Key"), (path, body)
    # Another requester's same key is theirs: a new export, not alice's
    theirs = call("POST", target, {"format": "csv"}, headers=key, as_=erin)
    assert theirs.status == 202 and theirs.body["id"] != first.body["id"]


@pytest.mark.parametrize("version", [True, "1", "01", 1.5])
def test_an_export_version_is_a_json_integer_only(call, tenants, aws, version):
    alice = who("alice", tenants["a"])
    refused = call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv", "version": version}, as_=alice)
    assert (refused.status, refused.body["code"], refused.body["field"]) == (422, "validation_error", "version")


def test_an_export_version_written_as_a_whole_number_is_that_version(call, tenants, aws):
    # JSON Schema's integer: 1.0 is the integer 1, as the OpenAPI document lets a client send it
    alice = who("alice", tenants["a"])
    accepted = call("POST", f"/queries/{tenants['query']}/exports", {"format": "csv", "version": 1.0}, as_=alice)
    assert accepted.status == 202 and accepted.body["query_version"] == 1
