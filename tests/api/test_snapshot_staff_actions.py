"""Staff actions on one snapshot version through the API on the real database (the API's
walled login): cancel a planned or queued request (recorded with who, why and when; a
running one refused), finalize a published version (a re-run then refused as protected
history), the reason checked as a request's is, 404 across workspaces, 403 for non-staff."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from tests.api.conftest import NOW, Caller
from tests.api.test_snapshot_routes import (
    ledger_runs,
    publish_everything,
    refused,
    request,
    staff,
    workspace,
)
from timekeeper.edge.registries import assemble_snapshot_types
from timekeeper.snapshots import ledger
from timekeeper.snapshots.jobs import JobMessage, JobStatus, run_job


@pytest.fixture
def db(conn):
    """The owner's connection on a clean ledger (the module's database is shared)."""
    conn.execute("TRUNCATE snapshot_runs, snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows, "
                 "workspace_memberships, workspaces CASCADE")
    return conn


def _action(target, run_id, action: str) -> str:
    return f"/snapshots/workspaces/{target}/runs/{run_id}/{action}"


def _backfill(call, target) -> dict:
    reply = call("POST", "/snapshots/runs", request(target), as_=staff())
    assert reply.status == 201, reply.body
    return reply.body


def _february(db, target) -> list[ledger.SnapshotRun]:
    return [r for r in ledger_runs(db, target) if r.snapshot_type == "ar_aging" and r.period == date(2027, 2, 1)]


# ----------------------------------------------------------------------------- cancel


def test_staff_cancel_a_planned_request_with_who_and_why_recorded(db, call):
    # Given a planned backfill of January
    target = workspace(db)
    run = _backfill(call, target)
    # When staff cancel it with a reason
    reply = call("POST", _action(target, run["id"], "cancel"), {"reason": "  asked by mistake "}, as_=staff())
    # Then it is cancelled, with who, why (trimmed) and when, on the run and in the period's versions
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["cancelled_by"], reply.body["cancel_reason"]) == (
        "cancelled", "staff-1", "asked by mistake")
    [stored] = ledger_runs(db, target)
    assert (stored.state, stored.cancelled_at, stored.cancelled_by) == ("cancelled", NOW, "staff-1")
    versions = call("GET", f"/snapshots/workspaces/{target}/periods/platform/ar_aging/2027-01", as_=staff()).body
    assert [(v["state"], v["cancel_reason"]) for v in versions["versions"]] == [("cancelled", "asked by mistake")]
    # And the workspace's audit log has the action with who and why
    audited = db.execute("SELECT actor, kind, subject_id, reason, before ->> 'state' AS was, after ->> 'period' AS "
                         "period FROM audit_events WHERE workspace_id = %s AND kind LIKE 'staff.snapshot%%' "
                         "AND kind <> 'staff.snapshot_requested'", (target,)).fetchall()
    assert [dict(a) for a in audited] == [{"actor": "staff-1", "kind": "staff.snapshot_cancelled",
                                           "subject_id": str(run["id"]), "reason": "asked by mistake",
                                           "was": "planned", "period": "2027-01"}]
    # And the period may be requested again (a cancelled run is not active work)
    again = call("POST", "/snapshots/runs", request(target, mode="manual"), as_=staff())
    assert (again.status, again.body["version"]) == (201, 2)


def test_a_cancelled_queued_runs_job_does_nothing_when_it_arrives(db, call):
    # Given a backfill admitted (queued, its job sent)
    target = workspace(db)
    run = _backfill(call, target)
    with db.transaction():
        [job] = ledger.admit(db, owner="platform", now=NOW, cap=4, backfill_lane=1)
    # When staff cancel it, and the job then arrives
    assert call("POST", _action(target, run["id"], "cancel"), {"reason": "wrong month"}, as_=staff()).status == 200
    result = run_job(db, assemble_snapshot_types("development"),
                     JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id),
                     now=lambda: NOW, receive_count=1, max_receives=3)
    # Then the job is stale and the run stays cancelled, never started
    assert result.status == JobStatus.STALE
    [stored] = ledger_runs(db, target)
    assert (stored.state, stored.attempts, stored.job_id) == ("cancelled", 0, None)


@pytest.mark.parametrize(("state", "code"), [("running", "run_in_progress"), ("retry_wait", "run_in_progress"),
                                             ("failed", "not_cancellable"), ("published", "not_cancellable")])
def test_a_run_that_is_not_waiting_is_not_cancelled(db, call, state, code):
    target = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    [february] = _february(db, target)
    if state != "published":
        # (a published version never changes: a re-run of February is put in that state)
        rerun = call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual"), as_=staff()).body
        db.execute("UPDATE snapshot_runs SET state = %s, retry_due_at = CASE WHEN %s = 'retry_wait' THEN %s END "
                   "WHERE id = %s", (state, state, NOW, rerun["id"]))
        target_run = rerun["id"]
    else:
        target_run = february.id
    reply = call("POST", _action(target, target_run, "cancel"), {"reason": "stop it"}, as_=staff())
    refused(reply, 409, code)
    assert state.replace("_", " ") in reply.body["message"]
    assert {r.state for r in _february(db, target) if str(r.id) == str(target_run)} == {state}


# --------------------------------------------------------------------------- finalize


def test_a_finalized_version_refuses_a_re_run_as_protected_history(db, call):
    # Given February published
    target = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    [february] = _february(db, target)
    # When staff finalize it with a reason
    reply = call("POST", _action(target, february.id, "finalize"), {"reason": "books closed"}, as_=staff())
    # Then it is finalized with who and why, and a re-run of February is refused
    assert reply.status == 200, reply.body
    assert (reply.body["protection"], reply.body["finalized_by"], reply.body["finalize_reason"]) == (
        "finalized", "staff-1", "books closed")
    refused(call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual"), as_=staff()),
            409, "protected_history")
    assert [(r.version, r.protection, r.finalized_at) for r in _february(db, target)] == [(1, "finalized", NOW)]
    kinds = db.execute("SELECT kind, reason FROM audit_events "
                       "WHERE workspace_id = %s AND kind LIKE 'staff.snapshot%%'",
                       (target,)).fetchall()
    assert [(k["kind"], k["reason"]) for k in kinds] == [("staff.snapshot_finalized", "books closed")]
    # And finalizing it again is refused
    refused(call("POST", _action(target, february.id, "finalize"), {"reason": "again"}, as_=staff()),
            409, "already_finalized")


def test_only_a_published_version_is_finalized(db, call):
    target = workspace(db)
    run = _backfill(call, target)
    refused(call("POST", _action(target, run["id"], "finalize"), {"reason": "books closed"}, as_=staff()),
            409, "not_published")
    assert ledger_runs(db, target)[0].protection is None


# ------------------------------------------------------------------ reasons and access


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": "\u200b\u2060"},
                                  {"reason": "x" * 501}])
@pytest.mark.parametrize("action", ["cancel", "finalize"])
def test_a_missing_or_blank_reason_is_422_naming_it(db, call, body, action):
    target = workspace(db)
    run = _backfill(call, target)
    reply = call("POST", _action(target, run["id"], action), body, as_=staff())
    assert (reply.status, reply.body.get("field")) == (422, "reason"), reply.body
    assert ledger_runs(db, target)[0].state == "planned"


@pytest.mark.parametrize("action", ["cancel", "finalize"])
def test_another_workspaces_run_and_an_unknown_run_are_404(db, call, action):
    target, other = workspace(db), workspace(db)
    run = _backfill(call, target)
    refused(call("POST", _action(other, run["id"], action), {"reason": "x"}, as_=staff()), 404, "not_found")
    refused(call("POST", _action(target, uuid.uuid4(), action), {"reason": "x"}, as_=staff()), 404, "not_found")
    refused(call("POST", _action(uuid.uuid4(), run["id"], action), {"reason": "x"}, as_=staff()), 404, "not_found")
    assert ledger_runs(db, target)[0].state == "planned"


@pytest.mark.parametrize("action", ["cancel", "finalize"])
def test_a_member_without_a_staff_role_is_403_in_their_own_workspace(db, call, action):
    target = workspace(db)
    run = _backfill(call, target)
    admin = Caller(roles="schedules:admin,snapshots:read", workspace_id=target)
    refused(call("POST", _action(target, run["id"], action), {"reason": "x"}, as_=admin), 403, "forbidden")
    assert ledger_runs(db, target)[0].state == "planned"
