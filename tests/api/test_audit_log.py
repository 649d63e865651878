"""The workspace's audit log: every kind of change writes its event in the change's own
transaction (schedules, deliveries, queries, reports, closures, opt-outs, staff reads,
settings), and ``GET /audit-events`` pages it with a cursor, filtered by kind and person,
for admins only and within their workspace."""

from __future__ import annotations

import uuid

from tests.api.conftest import NOW, new_query, seed_member
from tests.integration.report_helpers import definition, make_tenant
from timekeeper.db.connection import connect
from timekeeper.platform import audit
from timekeeper.reporting import opt_outs, reports
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

TOKEN = "workspace:admin,schedules:admin,queries:read,queries:write"
DAILY = {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}


def admin_of_workspace(db_url):
    return seed_member(db_url, roles=("workspace:admin", "schedules:admin", "queries:admin"), token_roles=TOKEN)


def events(call, admin, query=""):
    reply = call("GET", f"/audit-events{query}", as_=admin)
    assert reply.status == 200, reply.body
    return reply.body


def test_schedule_changes_through_the_api_are_audited_with_before_and_after(db_url, call):
    admin = admin_of_workspace(db_url)
    body = {"owner": "accounting", "work_kind": "reconciliation.sweep", "recurrence": DAILY, "name": "Sweep"}
    schedule_id = call("POST", "/schedules", body, as_=admin).body["id"]
    later = {**DAILY, "cron": "0 8 * * *"}
    assert call("PATCH", f"/schedules/{schedule_id}", {"recurrence": later, "name": "Late sweep"},
                as_=admin).status == 200
    assert call("POST", f"/schedules/{schedule_id}/pause", as_=admin).status == 200
    assert call("POST", f"/schedules/{schedule_id}/resume", as_=admin).status == 200
    assert call("DELETE", f"/schedules/{schedule_id}", as_=admin).status == 204
    log = events(call, admin, "?kind=schedule")["items"]
    assert [e["kind"] for e in log] == ["schedule.deleted", "schedule.resumed", "schedule.paused",
                                        "schedule.updated", "schedule.created"]
    assert {e["subject_id"] for e in log} == {schedule_id} and {e["actor"] for e in log} == {admin.user_id}
    updated = log[3]
    assert updated["before"] == {"recurrence": DAILY, "name": "Sweep"}
    assert updated["after"] == {"recurrence": later, "name": "Late sweep"}
    assert log[4]["after"]["recurrence"] == DAILY and log[4]["actor_name"] == "Member"


def test_a_delivery_and_its_recipients_changes_are_audited_as_deliveries(db_url, call):
    admin = admin_of_workspace(db_url)
    reader = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:read",))
    query_id = call("POST", "/queries", new_query(), as_=admin).body["query"]["id"]
    with connect(db_url) as conn:
        schedule, _ = create_query_schedule(
            conn, workspace_id=admin.workspace_id, actor=admin.user_id,
            new=NewQuerySchedule(name="Daily", recurrence=DAILY, source=Source("query", query_id=uuid.UUID(query_id)),
                                 format="csv", recipients=[admin.user_id], subject_template="{{ schedule_name }}",
                                 body_template='<a href="{{ link }}">x</a>'), now=NOW)
    reply = call("PATCH", f"/query-schedules/{schedule.id}", {"recipients": [admin.user_id, reader.user_id],
                                                              "name": "Renamed"}, as_=admin)
    assert reply.status == 200, reply.body
    log = events(call, admin, "?kind=delivery")["items"]
    assert [e["kind"] for e in log] == ["delivery.updated", "delivery.created"]
    assert log[0]["before"]["recipients"] == [admin.user_id]
    assert sorted(log[0]["after"]["recipients"]) == sorted([admin.user_id, reader.user_id])
    # One change, one event: the schedule's own version bump is not a second one
    assert (log[0]["before"]["name"], log[0]["after"]["name"]) == ("Daily", "Renamed")


def test_query_versions_and_deletion_are_audited(db_url, call):
    admin = admin_of_workspace(db_url)
    query_id = call("POST", "/queries", new_query(), as_=admin).body["query"]["id"]
    narrower = {**new_query()["definition"], "limit": 10}
    assert call("POST", f"/queries/{query_id}/versions", {"definition": narrower}, as_=admin).status == 201
    assert call("DELETE", f"/queries/{query_id}", as_=admin).status == 204
    log = events(call, admin, "?kind=query")["items"]
    assert [e["kind"] for e in log] == ["query.deleted", "query.updated", "query.created"]
    assert log[1]["before"]["version"] == 1 and log[1]["after"]["version"] == 2
    assert log[1]["before"]["definition"]["limit"] == 100 and log[1]["after"]["definition"]["limit"] == 10
    assert log[0]["before"] == {"name": "Open invoices"} and log[0]["actor"] == admin.user_id


def test_report_changes_are_audited(db_url):
    with connect(db_url) as conn:
        tenant = make_tenant(conn, f"audit-{uuid.uuid4().hex[:6]}")
        with conn.transaction():
            report, _ = reports.create_report(conn, workspace_id=tenant.workspace_id, name="Monthly",
                                              definition=definition(tenant), actor=tenant.author, now=NOW)
            reports.update_report(conn, workspace_id=tenant.workspace_id, report_id=report.id,
                                  definition=definition(tenant, title="Renamed"), actor=tenant.author, now=NOW)
        log = audit.list_events(conn, workspace_id=tenant.workspace_id, area="report")
    assert [(e.kind, e.subject_id, e.actor) for e in log] == [("report.updated", str(report.id), tenant.author),
                                                              ("report.created", str(report.id), tenant.author)]
    assert log[0].before["definition"]["title"] == "Monthly invoices"
    assert log[0].after["definition"]["title"] == "Renamed"


def test_closures_are_audited(db_url, call):
    admin = admin_of_workspace(db_url)
    assert call("POST", "/closures", {"date": "2027-12-24", "reason": "office closed"}, as_=admin).status == 201
    assert call("DELETE", "/closures/2027-12-24", as_=admin).status == 200
    log = events(call, admin, "?kind=closure")["items"]
    assert [(e["kind"], e["subject_id"]) for e in log] == [("closure.removed", "2027-12-24"),
                                                           ("closure.added", "2027-12-24")]
    assert log[1]["after"]["reason"] == "office closed" and log[0]["before"]["reason"] == "office closed"


def test_opt_outs_and_staff_reads_are_audited(db_url, call):
    admin = admin_of_workspace(db_url)
    person = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:read",))
    with connect(db_url) as conn, conn.transaction():
        opt_outs.record_notice_opt_out(conn, opt_outs.NoticeOptOutLink(admin.workspace_id, person.user_id), now=NOW)
        opt_outs.record_opt_out(conn, opt_outs.OptOutLink(admin.workspace_id, uuid.uuid4(), uuid.uuid4(),
                                                          person.user_id), now=NOW)
        audit.record_staff_read(conn, workspace_id=admin.workspace_id, actor="staff-1", what="snapshot_periods",
                                detail={"month": "2027-02"}, now=NOW)
    log = events(call, admin)["items"]
    assert [(e["kind"], e["actor"]) for e in log] == [("staff.read", "staff-1"), ("opt_out.added", person.user_id),
                                                      ("opt_out.notice_mail", person.user_id)]
    assert log[0]["actor_name"] is None and log[0]["after"] == {"month": "2027-02"}
    assert log[2]["after"] == {"mail": False}
    # Turning notice e-mails back on, signed in, is audited too
    assert call("POST", "/notices/mail", as_=person).status == 200
    assert events(call, admin, "?kind=opt_out")["items"][0]["after"] == {"mail": True}


def seed_events(db_url, workspace_id, count, *, actor="someone"):
    with connect(db_url) as conn, conn.transaction():
        return [audit.record_event(conn, workspace_id=workspace_id, actor=actor if n % 2 else "other",
                                   kind="settings.updated", subject_type="workspace", subject_id=None,
                                   before={"n": n - 1}, after={"n": n}, now=NOW) for n in range(count)]


def test_the_log_pages_with_a_cursor_both_ways_and_filters_by_person(db_url, call):
    admin = admin_of_workspace(db_url)
    ids = seed_events(db_url, admin.workspace_id, 5)
    first = events(call, admin, "?limit=2")
    assert [e["id"] for e in first["items"]] == ids[:-3:-1] and first["newer"] is None
    second = events(call, admin, f"?limit=2&cursor={first['older']}")
    assert [e["id"] for e in second["items"]] == [ids[2], ids[1]]
    third = events(call, admin, f"?limit=2&cursor={second['older']}")
    assert [e["id"] for e in third["items"]] == [ids[0]] and third["older"] is None
    back = events(call, admin, f"?limit=2&cursor={third['newer']}")
    assert [e["id"] for e in back["items"]] == [ids[2], ids[1]]
    top = events(call, admin, f"?limit=2&cursor={back['newer']}")
    assert [e["id"] for e in top["items"]] == [ids[4], ids[3]] and top["newer"] is None
    mine = events(call, admin, "?actor=someone")["items"]
    assert [e["id"] for e in mine] == [ids[3], ids[1]]
    assert events(call, admin, "?kind=schedule")["items"] == []


def test_bad_filters_and_cursors_are_422_naming_the_field(db_url, call):
    admin = admin_of_workspace(db_url)
    for query, field in [("?kind=weather", "kind"), ("?cursor=x12", "cursor"), ("?cursor=o0", "cursor"),
                         ("?cursor=o1x", "cursor"), ("?limit=0", "limit"), ("?limit=101", "limit"),
                         ("?actor=", "actor")]:
        reply = call("GET", f"/audit-events{query}", as_=admin)
        assert (reply.status, reply.body.get("field")) == (422, field), (query, reply.body)


def test_another_workspaces_events_are_never_shown(db_url, call):
    admin, other = admin_of_workspace(db_url), admin_of_workspace(db_url)
    ids = seed_events(db_url, admin.workspace_id, 3)
    assert events(call, other)["items"] == []
    # Even a cursor taken from the other workspace's ids shows nothing of it
    assert events(call, other, f"?cursor=o{ids[-1] + 1}")["items"] == []
    assert events(call, other, f"?cursor=n{ids[0] - 1}")["items"] == []
