"""The routes that close the loops to people, over the API's walled login: the signed-in
person's notices, the owner hand-off (list and reassign ownerless schedules), the audit
trail of a query schedule, staff reads and failed posting jobs."""

from __future__ import annotations

import uuid
from datetime import timedelta

from tests.api.conftest import NOW, seed_member
from timekeeper.db.connection import connect
from timekeeper.platform import directory, notices
from timekeeper.reporting import store
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule
from timekeeper.schedules.notifications import Notice, enqueue_notifications

ADMIN_TOKEN = "workspace:admin,queries:read,queries:write"
DAILY = {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}


def workspace_with_schedule(db_url):
    """A workspace with an admin, an owner (olga) with a query schedule, a reader and a viewer."""
    admin = seed_member(db_url, roles=("workspace:admin",), token_roles=ADMIN_TOKEN)
    ws = admin.workspace_id
    owner = seed_member(db_url, workspace_id=ws, roles=("queries:write",))
    reader = seed_member(db_url, workspace_id=ws, roles=("queries:read",))
    viewer = seed_member(db_url, workspace_id=ws, roles=("schedules:read",))
    with connect(db_url) as conn:
        with conn.transaction():
            query, _ = store.create_query(conn, workspace_id=ws, name="Invoices", actor=owner.user_id, now=NOW,
                                          definition={"entity": "invoices", "columns": ["number"]})
        schedule, _ = create_query_schedule(
            conn, workspace_id=ws, actor=owner.user_id,
            new=NewQuerySchedule(name="Daily", recurrence=DAILY, source=Source("query", query_id=query.id),
                                 format="csv", recipients=[reader.user_id], subject_template="{{ schedule_name }}",
                                 body_template='<a href="{{ link }}">x</a>'), now=NOW)
    return admin, owner, reader, viewer, schedule.id


def test_the_signed_in_person_lists_their_notices_and_marks_them_read(db_url, call):
    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)
    with connect(db_url) as conn:
        with conn.transaction():
            enqueue_notifications(conn, [Notice(schedule_id, admin.workspace_id, "queries", "schedule_paused",
                                                f"paused:{schedule_id}:{n}", {"reason": "consecutive_failures"})
                                         for n in range(3)], now=NOW)
        notices.tell_people(conn, now=NOW)
    # When the owner lists two at a time
    first = call("GET", "/notices?limit=2", as_=owner)
    assert first.status == 200
    assert (len(first.body["items"]), first.body["unread"]) == (2, 3)
    assert first.body["items"][0]["kind"] == "schedule_paused" and first.body["items"][0]["audience"] == "owner"
    second = call("GET", f"/notices?limit=2&before={first.body['next_before']}", as_=owner)
    assert len(second.body["items"]) == 1 and second.body["next_before"] is None
    # And marks one read, then all
    one = first.body["items"][0]["id"]
    assert call("POST", "/notices/read", {"ids": [one]}, as_=owner).body == {"marked": 1}
    assert call("GET", "/notices?unread=true", as_=owner).body["unread"] == 2
    # Another person marks nothing of the owner's, and sees none
    assert call("POST", "/notices/read", {}, as_=admin).body == {"marked": 0}
    assert call("GET", "/notices", as_=admin).body["items"] == []
    assert call("POST", "/notices/read", {}, as_=owner).body == {"marked": 2}
    # Bad input names the field
    bad = call("POST", "/notices/read", {"ids": ["x"]}, as_=owner)
    assert bad.status == 422 and bad.body["field"].startswith("ids")


def test_an_admin_lists_and_reassigns_an_ownerless_query_schedule_then_the_owner_resumes(db_url, call):
    admin, owner, reader, viewer, schedule_id = workspace_with_schedule(db_url)
    with connect(db_url) as conn, conn.transaction():
        directory.leave_workspace(conn, workspace_id=admin.workspace_id, user_id=owner.user_id, now=NOW)
    # The query schedule shows the reason, and resuming it is refused
    assert call("GET", f"/query-schedules/{schedule_id}", as_=admin).body["pause_reason"] == "ownerless"
    resume = call("POST", f"/query-schedules/{schedule_id}/resume", as_=admin)
    assert (resume.status, resume.body["code"]) == (409, "ownerless")
    # Admins list it; others may not
    listed = call("GET", "/ownerless-schedules", as_=admin)
    assert [(s["id"], s["previous_owner_user_id"]) for s in listed.body["items"]] == [(str(schedule_id),
                                                                                      owner.user_id)]
    assert call("GET", "/ownerless-schedules", as_=reader).status == 403
    not_admin = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:write",),
                            token_roles=ADMIN_TOKEN)  # the token says admin, the membership does not
    assert call("GET", "/ownerless-schedules", as_=not_admin).body["code"] == "missing_role"
    # A new owner who may not read the source is refused, naming the field and the reason
    refused = call("POST", f"/ownerless-schedules/{schedule_id}/reassign", {"owner_user_id": viewer.user_id},
                   as_=admin)
    assert (refused.status, refused.body["field"], refused.body["code"]) == (422, "owner_user_id", "missing_role")
    # A reader may own it (read access to its source): reassigned, paused by its owner
    done = call("POST", f"/ownerless-schedules/{schedule_id}/reassign", {"owner_user_id": reader.user_id},
                as_=admin)
    assert done.status == 200
    assert (done.body["owner_user_id"], done.body["status"], done.body["pause_reason"]) == (
        reader.user_id, "paused", "paused_by_owner")
    assert call("GET", "/ownerless-schedules", as_=admin).body["items"] == []
    again = call("POST", f"/ownerless-schedules/{schedule_id}/reassign", {"owner_user_id": reader.user_id},
                 as_=admin)
    assert (again.status, again.body["code"]) == (409, "not_ownerless")
    # Then the schedule can be resumed, and acts for its new owner
    assert call("POST", f"/query-schedules/{schedule_id}/resume", as_=admin).body["status"] == "active"
    assert call("GET", f"/query-schedules/{schedule_id}", as_=admin).body["owner_user_id"] == reader.user_id
    missing = call("POST", f"/ownerless-schedules/{uuid.uuid4()}/reassign", {"owner_user_id": reader.user_id},
                   as_=admin)
    assert missing.status == 404


def test_the_history_route_shows_each_change_with_actor_and_time(db_url, call, clock_now):
    admin, owner, reader, _, schedule_id = workspace_with_schedule(db_url)
    clock_now["now"] = NOW + timedelta(hours=2)
    patched = call("PATCH", f"/query-schedules/{schedule_id}",
                   {"recipients": [reader.user_id, admin.user_id], "skip_when_empty": True}, as_=admin)
    assert patched.status == 200
    history = call("GET", f"/query-schedules/{schedule_id}/history", as_=admin)
    assert history.status == 200
    latest = history.body["items"][0]
    assert (latest["kind"], latest["reason"], latest["actor"]) == ("updated", "settings_changed", admin.user_id)
    assert latest["at"].startswith("2027-03-01T14:00:00")
    assert set(latest["detail"]["changes"]) == {"recipients", "skip_when_empty"}
    assert [e["kind"] for e in history.body["items"]][-1] == "created"
    assert call("GET", f"/query-schedules/{uuid.uuid4()}/history", as_=admin).status == 404


def test_a_staff_read_of_another_workspace_is_in_that_workspaces_audit_trail(db_url, call):
    admin, *_ = workspace_with_schedule(db_url)
    staff = seed_member(db_url, roles=("queries:read",), token_roles="platform:staff")
    read = call("GET", f"/snapshots/workspaces/{admin.workspace_id}/periods", as_=staff)
    assert read.status == 200
    trail = call("GET", "/staff-reads", as_=admin)
    [entry] = trail.body["items"]
    assert (entry["actor"], entry["what"]) == (staff.user_id, "snapshot_periods")
    # Reading one's own workspace is not a staff read of another's
    call("GET", f"/snapshots/workspaces/{staff.workspace_id}/periods", as_=staff)
    assert call("GET", "/staff-reads", as_=seed_member(db_url, workspace_id=staff.workspace_id,
                                                         roles=("workspace:admin",),
                                                         token_roles=ADMIN_TOKEN)).body["items"] == []


def test_failed_posting_jobs_are_listed_and_retried_by_an_admin(db_url, call):
    admin, *_ = workspace_with_schedule(db_url)
    ws = admin.workspace_id
    with connect(db_url) as conn, conn.transaction():
        batch = conn.execute("INSERT INTO batches (workspace_id, name, status, close_at, opened_at, closed_at) "
                             "VALUES (%s, 'Week 7', 'closed', %s, %s, %s) RETURNING id", (ws, NOW, NOW, NOW)
                             ).fetchone()["id"]
        job = conn.execute("INSERT INTO posting_jobs (workspace_id, batch_id, status, error, attempts, created_at, "
                           "finished_at) VALUES (%s, %s, 'failed', 'does not balance', 1, %s, %s) RETURNING id",
                           (ws, batch, NOW, NOW)).fetchone()["id"]
    listed = call("GET", "/posting-jobs/failed", as_=admin)
    assert [(j["id"], j["error"]) for j in listed.body["items"]] == [(str(job), "does not balance")]
    retried = call("POST", f"/posting-jobs/{job}/retry", as_=admin)
    assert (retried.status, retried.body["status"]) == (202, "pending")
    assert call("GET", "/posting-jobs/failed", as_=admin).body["items"] == []
    assert call("POST", f"/posting-jobs/{uuid.uuid4()}/retry", as_=admin).status == 404
