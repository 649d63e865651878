"""Staff's claim weights through the resolver on the real database (the API's walled
login): staff list every workspace's weight and set one with a reason, recorded in that
workspace's audit log; anyone else is refused, an unknown workspace is 404 and a bad value
a 422 naming its field."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import pytest

from tests.api.conftest import NOW, Caller
from tests.support import dispatch_settings
from timekeeper.platform.directory import create_workspace
from timekeeper.schedules.dispatcher import claim_batch

STAFF = Caller(user_id="staff-1", roles="platform:staff")


@pytest.fixture
def target(conn):
    """A workspace staff do not belong to (weight 1)."""
    made = create_workspace(conn, name=f"Acme tier {uuid.uuid4().hex[:6]}", timezone="Europe/Berlin", now=NOW)
    conn.commit()
    return made


def weight_of(conn, workspace_id) -> int:
    return conn.execute("SELECT claim_weight FROM workspaces WHERE id = %s", (workspace_id,)).fetchone()["claim_weight"]


def test_staff_set_a_workspaces_weight_and_its_audit_log_records_it(conn, call, target):
    reply = call("PATCH", f"/operations/workspaces/{target.id}", {"claim_weight": 3, "reason": "enterprise tier"},
                 as_=STAFF)

    assert reply.status == 200, reply.body
    assert reply.body == {"id": str(target.id), "name": target.name, "timezone": "Europe/Berlin",
                          "status": "active", "claim_weight": 3, "changed": True}
    assert weight_of(conn, target.id) == 3
    event = conn.execute("SELECT actor, kind, subject_type, subject_id, before, after, reason FROM audit_events "
                         "WHERE workspace_id = %s", (target.id,)).fetchall()
    assert [tuple(e.values()) for e in event] == [
        ("staff-1", "staff.claim_weight_changed", "workspace", None, {"claim_weight": 1}, {"claim_weight": 3},
         "enterprise tier")]


def test_a_weight_written_as_a_number_without_a_fraction_is_an_integer(conn, call, target):
    # JSON Schema counts 4.0 an integer (a generated client may send it so): taken as 4
    reply = call("PATCH", f"/operations/workspaces/{target.id}", {"claim_weight": 4.0, "reason": "tier"}, as_=STAFF)
    assert reply.status == 200, reply.body
    assert reply.body["claim_weight"] == 4 and weight_of(conn, target.id) == 4


def test_staff_list_the_weights_by_name(conn, call, target):
    call("PATCH", f"/operations/workspaces/{target.id}", {"claim_weight": 2, "reason": "tier"}, as_=STAFF)

    reply = call("GET", f"/operations/workspaces?search={target.name[-6:]}", as_=STAFF)

    assert reply.status == 200, reply.body
    assert reply.body["items"] == [{"id": str(target.id), "name": target.name, "timezone": "Europe/Berlin",
                                    "status": "active", "claim_weight": 2}]


def test_an_unknown_workspace_is_404_and_nothing_is_recorded(conn, call):
    missing = uuid.uuid4()
    reply = call("PATCH", f"/operations/workspaces/{missing}", {"claim_weight": 2, "reason": "tier"}, as_=STAFF)
    assert (reply.status, reply.body["code"]) == (404, "not_found")
    assert conn.execute("SELECT count(*) AS n FROM audit_events WHERE workspace_id = %s",
                        (missing,)).fetchone()["n"] == 0


@pytest.mark.parametrize(("body", "field"), [
    ({"claim_weight": 0, "reason": "x"}, "claim_weight"),
    ({"claim_weight": 11, "reason": "x"}, "claim_weight"),
    ({"claim_weight": "two", "reason": "x"}, "claim_weight"),
    ({"claim_weight": 2.5, "reason": "x"}, "claim_weight"),
    ({"claim_weight": True, "reason": "x"}, "claim_weight"),
    ({"claim_weight": "5", "reason": "x"}, "claim_weight"),
    ({"claim_weight": 1e300, "reason": "x"}, "claim_weight"),
    ({"reason": "x"}, "claim_weight"),
    ({"claim_weight": 2}, "reason"),
    ({"claim_weight": 2, "reason": "   "}, "reason"),
])
def test_a_bad_weight_or_reason_is_a_422_naming_the_field(conn, call, target, body, field):
    reply = call("PATCH", f"/operations/workspaces/{target.id}", body, as_=STAFF)
    assert (reply.status, reply.body["code"], reply.body.get("field")) == (422, "validation_error", field)
    assert weight_of(conn, target.id) == 1


@pytest.mark.parametrize(("method", "path"), [("GET", "/operations/workspaces"),
                                              ("PATCH", "/operations/workspaces/{id}")])
def test_only_staff_may(conn, call, target, method, path):
    admin = Caller(roles="workspace:admin,schedules:admin,queries:admin")
    body = {"claim_weight": 5, "reason": "x"} if method == "PATCH" else None
    reply = call(method, path.format(id=target.id), body, as_=admin)
    assert (reply.status, reply.body["code"]) == (403, "forbidden")
    assert "platform staff" in reply.body["message"] and "snapshot" not in reply.body["message"]
    assert call(method, path.format(id=target.id), body, claims=None).status == 401
    assert weight_of(conn, target.id) == 1


def test_a_workspace_staff_weighted_2_gets_twice_the_share_of_a_crowded_claim(conn, call, target):
    # Given two workspaces with 500 due schedules each, the other one's due first, and staff
    # giving the target weight 2
    other = create_workspace(conn, name="Other", timezone="UTC", now=NOW)
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers CASCADE")
    for workspace_id, due in ((other.id, NOW - timedelta(minutes=30)), (target.id, NOW)):
        conn.execute("""
            INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                                   created_at, updated_at)
            SELECT gen_random_uuid(), %(wid)s, 'accounting', 'batch.roll', '{"cron": "* * * * *", "timezone": "UTC"}',
                   'UTC', 'active', %(due)s, %(due)s, %(due)s
              FROM generate_series(1, 500)""", {"wid": workspace_id, "due": due})
    conn.commit()
    assert call("PATCH", f"/operations/workspaces/{target.id}", {"claim_weight": 2, "reason": "tier"},
                as_=STAFF).status == 200
    # When the dispatcher claims a batch of 300
    with conn.transaction():
        messages, _ = claim_batch(conn, dispatch_settings("accounting", claim_limit=300),
                                  now=NOW + timedelta(seconds=5))
    # Then the target has two thirds of it (the due order alone would have given the other all)
    assert Counter(m.workspace_id for m in messages) == {target.id: 200, other.id: 100}


def test_the_weight_it_already_has_changes_and_records_nothing(conn, call, target):
    first = call("PATCH", f"/operations/workspaces/{target.id}", {"claim_weight": 3, "reason": "tier"}, as_=STAFF)
    again = call("PATCH", f"/operations/workspaces/{target.id}", {"claim_weight": 3, "reason": "tier"}, as_=STAFF)

    assert (first.status, again.status, again.body["claim_weight"]) == (200, 200, 3)
    # ... answered as a no-op: the caller is told nothing changed
    assert (first.body["changed"], again.body["changed"]) == (True, False)
    assert conn.execute("SELECT count(*) AS n FROM audit_events WHERE workspace_id = %s "
                        "AND kind = 'staff.claim_weight_changed'", (target.id,)).fetchone()["n"] == 1
