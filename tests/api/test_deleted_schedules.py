"""A deleted schedule's address: ``GET /schedules/{id}`` and ``GET /query-schedules/{id}``
answer 410 ``schedule_deleted`` with when and by whom (the workspace's own history) for a
schedule of the caller's workspace that was deleted; a schedule that never existed, and
another workspace's deleted schedule, stay a 404 (the tenant wall). Real PostgreSQL through
the API's own login."""

from __future__ import annotations

import uuid
from datetime import timedelta

from tests.api.conftest import NOW, Caller, new_schedule, seed_member
from tests.api.test_own_route_kinds import DELIVERY
from timekeeper.db.connection import connect


def test_a_deleted_schedule_is_410_with_when_and_by_whom(call, caller, clock_now, db_url):
    # Given a schedule of the caller's workspace, deleted an hour later by its owner
    schedule = call("POST", "/schedules", new_schedule()).body
    clock_now["now"] = NOW + timedelta(hours=1)
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE users SET display_name = 'Ada Lovelace' WHERE id = %s", (caller.user_id,))
    assert call("DELETE", f"/schedules/{schedule['id']}").status == 204
    # When its address is read
    reply = call("GET", f"/schedules/{schedule['id']}")
    # Then it is gone, with when and by whom
    assert reply.status == 410
    assert reply.body == {"code": "schedule_deleted", "message": "this schedule was deleted",
                          "deleted_at": "2027-03-01T13:00:00Z", "deleted_by": caller.user_id,
                          "deleted_by_name": "Ada Lovelace", "timezone": "UTC"}
    # And a schedule that never existed is still a 404
    missing = call("GET", f"/schedules/{uuid.uuid4()}")
    assert (missing.status, missing.body["code"]) == (404, "not_found")


def test_another_workspaces_deleted_schedule_stays_404(call, caller):
    # Given a schedule another workspace deleted
    theirs = Caller(user_id="user-2")
    schedule = call("POST", "/schedules", new_schedule(), as_=theirs).body
    assert call("DELETE", f"/schedules/{schedule['id']}", as_=theirs).status == 204
    # When the caller (another workspace) reads its address
    reply = call("GET", f"/schedules/{schedule['id']}")
    # Then it is a 404, as for one that never existed: nothing tells them it existed
    assert (reply.status, reply.body) == (404, {"code": "not_found", "message": "no such schedule in this workspace"})
    # While its own workspace is told it was deleted
    assert call("GET", f"/schedules/{schedule['id']}", as_=theirs).status == 410


def test_a_deletion_the_history_no_longer_records_names_no_one(call, db_url):
    # Given a deleted schedule whose history retention removed its events
    schedule = call("POST", "/schedules", new_schedule()).body
    call("DELETE", f"/schedules/{schedule['id']}")
    with connect(db_url) as conn, conn.transaction():
        conn.execute("DELETE FROM schedule_events WHERE schedule_id = %s", (schedule["id"],))
    # Then it is still gone, with when but no one named
    reply = call("GET", f"/schedules/{schedule['id']}")
    assert reply.status == 410
    assert reply.body["deleted_at"] == "2027-03-01T12:00:00Z"
    assert reply.body["deleted_by"] is None and reply.body["deleted_by_name"] is None


def test_a_deleted_query_schedule_is_410_on_its_own_route_only(call, analyst, publisher, db_url):
    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "source": {"kind": "query", "query_id": str(query_id)},
                                                "recipients": [who.user_id]}, as_=who)
    schedule_id = created.body["id"]
    assert call("DELETE", f"/query-schedules/{schedule_id}", as_=who).status == 204
    # Its own route says it was deleted, and by whom
    reply = call("GET", f"/query-schedules/{schedule_id}", as_=who)
    assert reply.status == 410
    assert (reply.body["code"], reply.body["deleted_by"]) == ("schedule_deleted", who.user_id)
    # The generic route never saw it: still a 404
    assert call("GET", f"/schedules/{schedule_id}", as_=who).status == 404
    # Another workspace is told nothing
    stranger = seed_member(db_url, user_id="stranger", token_roles=who.roles)
    assert call("GET", f"/query-schedules/{schedule_id}", as_=stranger).status == 404


def test_a_deleted_generic_schedule_is_404_on_the_query_schedules_route(call, analyst):
    who, _ = analyst
    schedule = call("POST", "/schedules", new_schedule(), as_=who).body
    call("DELETE", f"/schedules/{schedule['id']}", as_=who)
    assert call("GET", f"/query-schedules/{schedule['id']}", as_=who).status == 404
