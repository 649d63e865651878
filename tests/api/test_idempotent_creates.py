"""An Idempotency-Key on a creating route (a schedule, a saved query or a version of it, a
report, a query schedule) makes the request safe to repeat: a repeat answers what the first
answered and creates nothing more; the key names that one request of that requester."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from tests.api.conftest import NOW, Caller, enrol, new_query, new_schedule, proxy_event
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.db.connection import login_url
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext


def _count(db_url: str, sql: str, *args) -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, args).fetchone()[0]


def test_a_repeated_schedule_creation_answers_the_first_and_creates_one(call, caller, db_url):
    key = {"Idempotency-Key": "create-nightly-1"}
    # When the same creation is sent twice with one key
    first = call("POST", "/schedules", new_schedule(), headers=key)
    again = call("POST", "/schedules", new_schedule(), headers=key)
    # Then the repeat answers the first response (status, body, Location), marked replayed
    assert first.status == again.status == 201
    assert again.body == first.body
    assert again.headers["location"] == first.headers["location"] == f"/schedules/{first.body['id']}"
    assert again.headers.get("idempotent-replayed") == "true" and "idempotent-replayed" not in first.headers
    # And there is one schedule
    assert _count(db_url, "SELECT count(*) FROM schedules WHERE workspace_id = %s", caller.workspace_id) == 1
    # And a new key creates a second one
    assert call("POST", "/schedules", new_schedule(), headers={"Idempotency-Key": "create-nightly-2"}).status == 201
    assert _count(db_url, "SELECT count(*) FROM schedules WHERE workspace_id = %s", caller.workspace_id) == 2


def test_the_key_reused_for_another_body_is_a_409_and_creates_nothing(call, caller, db_url):
    key = {"Idempotency-Key": "create-once"}
    assert call("POST", "/schedules", new_schedule(), headers=key).status == 201
    # When the key comes back with another body
    reply = call("POST", "/schedules", new_schedule(name="another sweep"), headers=key)
    # Then it is the 409 naming the header, and no second schedule exists
    assert reply.status == 409, reply
    assert reply.body["code"] == "idempotency_key_reused" and reply.body["field"] == "Idempotency-Key"
    assert _count(db_url, "SELECT count(*) FROM schedules WHERE workspace_id = %s", caller.workspace_id) == 1


def test_another_requester_s_same_key_is_their_own(call, caller, db_url):
    key = {"Idempotency-Key": "shared-looking-key"}
    mine = call("POST", "/schedules", new_schedule(), headers=key)
    colleague = Caller(user_id="user-2", workspace_id=caller.workspace_id)
    theirs = call("POST", "/schedules", new_schedule(), headers=key, as_=colleague)
    assert mine.status == theirs.status == 201 and mine.body["id"] != theirs.body["id"]
    assert "idempotent-replayed" not in theirs.headers


def test_a_refused_creation_records_nothing_and_its_repeat_is_judged_again(call, caller):
    key = {"Idempotency-Key": "bad-then-bad"}
    body = new_schedule(recurrence={"cron": "61 * * * *", "timezone": "UTC"})
    first = call("POST", "/schedules", body, headers=key)
    again = call("POST", "/schedules", body, headers=key)
    assert first.status == again.status == 422
    assert "idempotent-replayed" not in again.headers


def test_saved_queries_and_their_versions_are_created_once_per_key(call, member, db_url):
    created = call("POST", "/queries", new_query(), headers={"Idempotency-Key": "q-1"}, as_=member)
    replayed = call("POST", "/queries", new_query(), headers={"Idempotency-Key": "q-1"}, as_=member)
    assert created.status == replayed.status == 201 and replayed.body == created.body
    query_id = created.body["query"]["id"]
    version_body = {"definition": {"entity": "invoices", "columns": ["number"]}}
    v2 = call("POST", f"/queries/{query_id}/versions", version_body, headers={"Idempotency-Key": "v-2"}, as_=member)
    v2_again = call("POST", f"/queries/{query_id}/versions", version_body, headers={"Idempotency-Key": "v-2"},
                    as_=member)
    assert v2.status == v2_again.status == 201 and v2_again.body == v2.body
    assert v2.body["version"]["version"] == 2
    assert _count(db_url, "SELECT count(*) FROM saved_query_versions WHERE query_id = %s", query_id) == 2


@pytest.fixture
def second_app(db_url, publisher):
    """A second API execution environment (its own connection) over the same database."""
    conn = connect_api(login_url(db_url, API_ROLE))
    yield create_app(ApiAdapters(connection=lambda: conn, publisher_for=lambda _: publisher,
                                 registry=registries.work_kinds, now=lambda: NOW,
                                 snapshot_registry=registries.snapshot_types))
    conn.close()


def test_two_copies_sent_at_once_create_one_schedule(app, second_app, caller, db_url):
    # Given two execution environments that receive the same creation at the same moment
    # (from a member of the workspace)
    enrol(db_url, caller.user_id, caller.workspace_id)
    barrier = threading.Barrier(2)
    replies: list[dict] = []

    def send(resolver) -> None:
        event = proxy_event("POST", "/schedules", claims=caller.claims(), body=new_schedule(),
                            headers={"Idempotency-Key": "twin"})
        barrier.wait()
        replies.append(resolver.resolve(event, LambdaContext(function_name="timekeeper-api")))

    threads = [threading.Thread(target=send, args=(resolver,)) for resolver in (app, second_app)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # Then both answer the same 201 and one schedule exists
    assert [r["statusCode"] for r in replies] == [201, 201], replies
    assert json.loads(replies[0]["body"]) == json.loads(replies[1]["body"])
    assert _count(db_url, "SELECT count(*) FROM schedules WHERE workspace_id = %s", caller.workspace_id) == 1
