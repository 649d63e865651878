"""A work kind whose schedules need settings of their own lives only behind its own route:
the generic schedules routes refuse to create, change or run ``queries.deliver`` (422 naming
``work_kind`` and pointing to ``/query-schedules``) and write nothing, and they do not see
its schedules at all (not listed; get, pause, resume and delete are 404), so its access
rule cannot be bypassed with the generic token roles. ``/query-schedules`` pauses, resumes
and deletes them. Every other registered work kind is a generic one. Real PostgreSQL
through the API's own login."""

from __future__ import annotations

from dataclasses import replace

from tests.api.conftest import new_schedule
from timekeeper.edge import registries

DELIVERY = {"name": "Daily invoices", "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
            "format": "csv", "subject_template": "{{ schedule_name }}",
            "body_template": "<a href='{{ link }}'>file</a>"}
REFUSAL = {"code": "validation_error", "field": "work_kind",
           "message": "queries.deliver schedules have settings of their own: use /query-schedules"}


def test_create_of_a_delivery_through_the_generic_route_is_422_naming_owner(call, analyst, publisher):
    who, _ = analyst
    # When a queries.deliver schedule is created through POST /schedules (no delivery settings)
    reply = call("POST", "/schedules", new_schedule(owner="queries", work_kind="queries.deliver"), as_=who)
    # Then it is refused as the document says (no owner but accounting has generic work kinds),
    # naming owner, and nothing was written
    assert (reply.status, reply.body) == (422, {"code": "validation_error", "field": "owner",
                                                "message": "Input should be 'accounting'"})
    assert call("GET", "/schedules", as_=who).body["items"] == []
    assert call("GET", "/query-schedules", as_=who).body["items"] == []


def test_a_query_schedule_is_changed_and_run_only_through_its_own_route(call, analyst, publisher):
    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "source": {"kind": "query", "query_id": str(query_id)},
                                                "recipients": [who.user_id]}, as_=who)
    assert created.status == 201, created.body
    schedule_id = created.body["id"]
    before = call("GET", f"/query-schedules/{schedule_id}", as_=who).body
    # When the generic routes change it or run it now
    patched = call("PATCH", f"/schedules/{schedule_id}", {"name": "renamed", "recurrence": {"cron": "0 8 * * *"}},
                   as_=who)
    ran = call("POST", f"/schedules/{schedule_id}/run", headers={"Idempotency-Key": "k1"}, as_=who)
    # Then both are the same 422, and the schedule is unchanged with no run and no message
    assert (patched.status, patched.body) == (422, REFUSAL)
    assert (ran.status, ran.body) == (422, REFUSAL)
    assert call("GET", f"/query-schedules/{schedule_id}", as_=who).body == before
    assert call("GET", f"/query-schedules/{schedule_id}/runs", as_=who).body["items"] == []
    assert publisher.sent == []
    # Its own routes do both
    assert call("PATCH", f"/query-schedules/{schedule_id}", {"name": "renamed"}, as_=who).body["name"] == "renamed"
    assert call("POST", f"/query-schedules/{schedule_id}/run", as_=who).status == 202
    assert len(publisher.sent) == 1
    # The generic routes do not see it: not listed, and every action on it is a 404
    assert call("GET", "/schedules", as_=who).body["items"] == []
    for method, path in (("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")):
        reply = call(method, f"/schedules/{schedule_id}{path}", as_=who)
        assert (reply.status, reply.body["code"]) == (404, "not_found"), (method, path, reply.body)
    assert call("GET", f"/query-schedules/{schedule_id}", as_=who).body["status"] == "active"
    # Its own routes pause, resume and delete it
    assert call("POST", f"/query-schedules/{schedule_id}/pause", as_=who).body["status"] == "paused"
    assert call("POST", f"/query-schedules/{schedule_id}/pause", as_=who).body["status"] == "paused"
    assert call("POST", f"/query-schedules/{schedule_id}/resume", as_=who).body["status"] == "active"
    assert call("DELETE", f"/query-schedules/{schedule_id}", as_=who).status == 204
    assert call("GET", f"/query-schedules/{schedule_id}", as_=who).status == 410


def test_a_non_member_with_every_schedules_role_cannot_touch_a_query_schedule(call, analyst, publisher):
    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "source": {"kind": "query", "query_id": str(query_id)},
                                                "recipients": [who.user_id]}, as_=who)
    schedule_id = created.body["id"]
    # Given a caller whose token has every generic schedules role in this workspace but who
    # is not a member of it (the access rule refuses them)
    outsider = replace(who, user_id="someone-else")
    # When they use the generic routes on the query schedule
    assert call("GET", "/schedules", as_=outsider).body["items"] == []
    for method, path in (("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("DELETE", ""), ("POST", "/run")):
        reply = call(method, f"/schedules/{schedule_id}{path}", as_=outsider)
        assert reply.status in (404, 422), (method, path, reply.body)
    # ... and its own routes: the access rule refuses them
    for method, path in (("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")):
        reply = call(method, f"/query-schedules/{schedule_id}{path}", as_=outsider)
        assert reply.status == 403, (method, path, reply.body)
    # Then nothing changed and nothing ran
    assert call("GET", f"/query-schedules/{schedule_id}", as_=who).body["status"] == "active"
    assert publisher.sent == []


def test_every_work_kind_is_generic_but_the_ones_with_a_route_of_their_own():
    registry = registries.work_kinds()
    routed = {(kind.owner, kind.name): kind.route
              for owner in ("accounting", "queries") for name in registry.names(owner)
              if (kind := registry.get(owner, name)).route is not None}
    # Delivery is the one kind whose schedules carry settings the generic routes do not take
    # (accounting kinds are generic: their input is the declared subject, checked by POST /schedules)
    assert routed == {("queries", "queries.deliver"): "/query-schedules"}
