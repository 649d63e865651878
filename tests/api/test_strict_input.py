"""Input the API used to read leniently is refused: zones that are not geographic IANA
zones (the host's ``localtime``, ``Factory``, ``posixrules``, the ``right/`` and ``posix/``
trees), blank schedule names, ids not written as canonical UUIDs, a trailing slash on a
path, and version numbers written other than as plain decimals."""

from __future__ import annotations

import uuid

import pytest

from tests.api.conftest import new_query, new_schedule


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "right/UTC", "posix/Europe/Berlin"])
def test_a_zone_that_is_not_a_geographic_iana_zone_is_refused(call, zone):
    reply = call("POST", "/schedules", new_schedule(recurrence={"cron": "30 2 * * *", "timezone": zone}))
    assert (reply.status, reply.body["field"]) == (422, "recurrence.timezone"), reply.body


@pytest.mark.parametrize("zone", ["Europe/Berlin", "UTC", "America/Argentina/Buenos_Aires", "Etc/GMT+5"])
def test_iana_zones_are_still_taken(call, zone):
    reply = call("POST", "/schedules", new_schedule(recurrence={"cron": "30 2 * * *", "timezone": zone}))
    assert reply.status == 201, reply.body


@pytest.mark.parametrize("name", ["", " ", "\t \n"])
def test_a_blank_schedule_name_is_refused_on_create_and_update(call, name):
    created = call("POST", "/schedules", new_schedule(name=name))
    assert (created.status, created.body["field"]) == (422, "name"), created.body
    schedule_id = call("POST", "/schedules", new_schedule()).body["id"]
    updated = call("PATCH", f"/schedules/{schedule_id}", {"name": name})
    assert (updated.status, updated.body["field"]) == (422, "name"), updated.body


def _spellings(value: uuid.UUID) -> list[str]:
    text = str(value)
    return [text.upper(), value.hex, "{" + text + "}", f"urn:uuid:{text}"]


def test_an_id_written_non_canonically_is_refused(call):
    schedule_id = uuid.UUID(call("POST", "/schedules", new_schedule()).body["id"])
    assert call("GET", f"/schedules/{schedule_id}").status == 200
    for spelling in _spellings(schedule_id):
        reply = call("GET", f"/schedules/{spelling}")
        assert (reply.status, reply.body["field"]) == (422, "schedule_id"), spelling
        deleted = call("DELETE", f"/schedules/{spelling}")
        assert deleted.status == 422, spelling
    subject = uuid.uuid4()
    for spelling in _spellings(subject):
        reply = call("POST", "/schedules", new_schedule(subject_id=spelling))
        assert (reply.status, reply.body["field"]) == (422, "subject_id"), spelling
    assert call("GET", f"/schedules/{schedule_id}").status == 200


def test_a_trailing_slash_names_no_route(call):
    schedule_id = call("POST", "/schedules", new_schedule()).body["id"]
    for method, target in (("DELETE", f"/schedules/{schedule_id}/"), ("GET", f"/schedules/{schedule_id}/"),
                           ("GET", "/schedules/"), ("POST", f"/schedules/{schedule_id}/pause/")):
        reply = call(method, target)
        assert (reply.status, reply.body["code"]) == (404, "not_found"), (method, target)
    assert call("GET", f"/schedules/{schedule_id}").status == 200  # not deleted


@pytest.mark.parametrize("spelling", ["1.0", "+1", "01", " 1", "1e0", "١"])
def test_a_version_is_a_plain_decimal(call, member, spelling):
    query_id = call("POST", "/queries", new_query(), as_=member).body["query"]["id"]
    assert call("GET", f"/queries/{query_id}/versions/1", as_=member).status == 200
    reply = call("GET", f"/queries/{query_id}/versions/{spelling}", as_=member)
    assert (reply.status, reply.body["field"]) == (422, "version"), reply.body


@pytest.mark.parametrize(("calendar", "twice"), [
    ({"frequency": "daily", "times": ["09:00", "18:00", "09:00"]}, "calendar.times lists 09:00"),
    ({"frequency": "weekly", "weekdays": ["MO", "FR", "MO"], "times": ["09:00"]}, "calendar.weekdays lists MO"),
])
def test_a_time_or_weekday_listed_twice_runs_once_and_the_caller_is_told(call, calendar, twice):
    # Given a calendar rule that lists one time (or weekday) twice
    reply = call("POST", "/schedules", new_schedule(recurrence={"calendar": calendar, "timezone": "UTC"}))
    # Then it is taken (a stored definition written so stays valid) with a warning naming
    # the repeat, and the repeat is no second occurrence
    assert reply.status == 201, reply
    assert any(twice in warning for warning in reply.body["warnings"]), reply.body["warnings"]
    detail = call("GET", f"/schedules/{reply.body['id']}").body
    instants = [o["at"] for o in detail["next_occurrences"]]
    assert len(instants) == len(set(instants)) == 5, detail["next_occurrences"]


@pytest.mark.parametrize("name", ["\u200b", " \u200b\u2060 ", "\ufeff", "\u3000"])
def test_a_name_of_invisible_characters_is_blank(call, name):
    created = call("POST", "/schedules", new_schedule(name=name))
    assert (created.status, created.body["field"], created.body["message"]) == (
        422, "name", "must not be empty or only white space"), created.body


@pytest.mark.parametrize("control", ["\u202e", "\u202a", "\u2066", "\u200e"])
def test_a_bidirectional_control_in_a_schedule_s_or_query_s_name_is_refused(call, member, control):
    created = call("POST", "/schedules", new_schedule(name=f"nightly {control}peews"))
    assert (created.status, created.body["field"]) == (422, "name"), created.body
    assert "bidirectional control" in created.body["message"] and "pattern" not in created.body["message"]
    query = call("POST", "/queries", new_query(name=f"Open {control}invoices"), as_=member)
    assert (query.status, query.body["field"]) == (422, "name"), query.body
    assert call("POST", "/schedules", new_schedule(name="סריקה לילית")).status == 201


def test_a_text_not_in_its_form_is_refused_in_words_never_with_the_pattern(call, caller):
    from tests.api.conftest import Caller

    admin = Caller(user_id="admin-1", workspace_id=caller.workspace_id, roles="schedules:read,schedules:admin")
    closure = call("POST", "/closures", {"date": "2027-3-2"}, as_=admin)
    assert (closure.status, closure.body["field"], closure.body["message"]) == (422, "date",
                                                                                "must be a date YYYY-MM-DD")
    staff = Caller(user_id="staff-1", roles="platform:staff")
    for period in ("9999-99", "2027-13", "27-01"):
        refused = call("POST", "/snapshots/runs", {"owner": "platform", "snapshot_type": "ar_aging", "mode": "backfill",
                                                   "workspace_id": str(caller.workspace_id), "period": period,
                                                   "reason": "r"}, as_=staff)
        assert (refused.status, refused.body["field"], refused.body["message"]) == (
            422, "period", "must be a month YYYY-MM"), refused.body


@pytest.mark.parametrize("reason", ["   ", "\u200b", " \u200b\u200c\u200d ", "\u2060", "\u00a0\u3000"])
def test_a_staff_reason_of_spaces_or_invisible_characters_is_refused(call, caller, reason):
    from tests.api.conftest import Caller

    staff = Caller(user_id="staff-1", roles="platform:staff")
    refused = call("POST", "/snapshots/runs", {"owner": "platform", "snapshot_type": "ar_aging", "mode": "backfill",
                                               "workspace_id": str(caller.workspace_id), "period": "2027-01",
                                               "reason": reason}, as_=staff)
    assert (refused.status, refused.body["field"]) == (422, "reason"), refused.body
    resumed = call("POST", f"/operations/workspaces/{caller.workspace_id}/schedules/{uuid.uuid4()}/resume",
                   {"reason": reason}, as_=staff)
    assert (resumed.status, resumed.body["field"]) == (422, "reason"), resumed.body


def test_a_closure_far_from_today_or_with_a_blank_reason_is_refused(call, caller):
    from tests.api.conftest import Caller

    # The API's clock: 2027-03-01
    admin = Caller(user_id="admin-1", workspace_id=caller.workspace_id, roles="schedules:read,schedules:admin")
    for day in ("0001-01-01", "9999-12-31", "2016-12-31", "2037-03-02"):
        refused = call("POST", "/closures", {"date": day}, as_=admin)
        assert (refused.status, refused.body["field"], refused.body["message"]) == (
            422, "date", "must be within 10 years of today"), day
    for reason in ("   ", "\u200b", "a\u202eb"):
        refused = call("POST", "/closures", {"date": "2027-03-02", "reason": reason}, as_=admin)
        assert (refused.status, refused.body["field"]) == (422, "reason"), reason
    assert call("GET", "/closures", as_=admin).body["items"] == []
    for day in ("2017-03-01", "2037-02-28"):
        assert call("POST", "/closures", {"date": day, "reason": ""}, as_=admin).status == 201, day
