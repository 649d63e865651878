"""The closure routes: a workspace admin lists, adds and removes closed dates; each change
recomputes the business-day schedules and shows in their history (real database, the
API's row-level-security connection)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Caller, new_schedule

THIRD_BUSINESS_DAY = {"calendar": {"frequency": "monthly", "business_day": 3, "times": ["09:00"],
                                   "holidays": "DE-BE"}, "timezone": "Europe/Berlin"}
ADMIN = "schedules:admin"


@pytest.fixture
def admin(caller) -> Caller:
    return Caller(user_id="admin-1", workspace_id=caller.workspace_id, roles=ADMIN)


def test_an_admin_closes_a_date_and_the_business_day_schedule_moves(call, admin):
    # Given a third-business-day schedule (the API's clock: 2027-03-01 12:00Z; March's is Wednesday the 3rd)
    schedule = call("POST", "/schedules", new_schedule(recurrence=THIRD_BUSINESS_DAY)).body
    assert schedule["next_due_at"] == "2027-03-03T08:00:00Z"
    # When the admin closes Tuesday 2 March
    reply = call("POST", "/closures", {"date": "2027-03-02", "reason": "office move"}, as_=admin)
    # Then it is created, the schedule was recomputed to Thursday the 4th, and its history says why
    assert reply.status == 201, reply.body
    assert reply.body["closure"]["date"] == "2027-03-02" and reply.body["closure"]["created_by"] == "admin-1"
    assert reply.body["changed"] is True and reply.body["schedules_recomputed"] == 1
    detail = call("GET", f"/schedules/{schedule['id']}").body
    assert detail["schedule"]["next_due_at"] == "2027-03-04T08:00:00Z"
    assert detail["next_occurrences"][0]["local_date"] == "2027-03-04"
    [event] = [e for e in detail["history"]["events"] if e["kind"] == "holidays_changed"]
    assert event["reason"] == "closure_added" and event["detail"]["closed_on"] == "2027-03-02"
    # And the list shows it; closing it again is a 200 that keeps the first reason
    assert [c["date"] for c in call("GET", "/closures").body["items"]] == ["2027-03-02"]
    again = call("POST", "/closures", {"date": "2027-03-02", "reason": "other"}, as_=admin)
    assert again.status == 200 and again.body["changed"] is False and again.body["closure"]["reason"] == "office move"
    # When it is reopened the schedule is back on the 3rd; reopening again is a 404
    removed = call("DELETE", "/closures/2027-03-02", as_=admin)
    assert removed.status == 200 and removed.body["schedules_recomputed"] == 1
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["next_due_at"] == "2027-03-03T08:00:00Z"
    assert call("DELETE", "/closures/2027-03-02", as_=admin).status == 404
    assert call("GET", "/closures").body["items"] == []


def test_closures_take_the_admin_role_and_stay_in_their_workspace(call, admin):
    writer = call("POST", "/closures", {"date": "2027-03-02"})  # schedules:read,write,run: not admin
    assert writer.status == 403 and "schedules:admin" in writer.body["message"]
    assert call("DELETE", "/closures/2027-03-02").status == 403
    assert call("POST", "/closures", {"date": "2027-03-02"}, as_=admin).status == 201
    stranger = Caller(roles=ADMIN)
    assert call("GET", "/closures", as_=stranger).body["items"] == []
    assert call("DELETE", "/closures/2027-03-02", as_=stranger).status == 404


@pytest.mark.parametrize(("method", "target", "body", "field"), [
    ("POST", "/closures", {"date": "2027-02-30"}, "date"),
    ("POST", "/closures", {"date": "27-02-03"}, "date"),
    ("POST", "/closures", {"date": "2027-03-02", "reason": "x" * 201}, "reason"),
    ("POST", "/closures", {"date": "2027-03-02", "extra": True}, "extra"),
    ("POST", "/closures", {}, "date"),
    ("DELETE", "/closures/2027-02-30", None, "closed_on"),
    ("DELETE", "/closures/tomorrow", None, "closed_on"),
])
def test_a_bad_closure_is_a_422_naming_the_field(call, admin, method, target, body, field):
    reply = call(method, target, body, as_=admin)
    assert reply.status == 422, reply.body
    assert reply.body["field"] == field


def test_a_schedule_created_after_a_closure_counts_it(call, admin):
    assert call("POST", "/closures", {"date": "2027-03-02"}, as_=admin).status == 201
    schedule = call("POST", "/schedules", new_schedule(recurrence=THIRD_BUSINESS_DAY)).body
    assert schedule["next_due_at"] == "2027-03-04T08:00:00Z"


def test_the_preview_of_an_unsaved_business_day_rule_counts_the_workspaces_closures(call, admin):
    # Given March 2nd closed in the caller's workspace (March 3rd would be the third business day)
    before = call("POST", "/rules/preview", {"recurrence": THIRD_BUSINESS_DAY, "count": 1})
    assert before.status == 200, before.body
    assert before.body["next_occurrences"][0]["at"] == "2027-03-03T08:00:00Z"
    assert call("POST", "/closures", {"date": "2027-03-02"}, as_=admin).status == 201
    # Then the preview moves to March 4th, what the saved schedule will use
    after = call("POST", "/rules/preview", {"recurrence": THIRD_BUSINESS_DAY, "count": 1})
    assert after.body["next_occurrences"][0]["at"] == "2027-03-04T08:00:00Z"
    # And another workspace's preview does not see the closure
    other = call("POST", "/rules/preview", {"recurrence": THIRD_BUSINESS_DAY, "count": 1}, as_=Caller())
    assert other.body["next_occurrences"][0]["at"] == "2027-03-03T08:00:00Z"
