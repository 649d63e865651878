"""Snapshot staff's range requests through the API on the real database: the preview and
the request agree (the same planning), refusals with the ledger's reasons, the range cap,
workspaces chosen by name, the range's progress, validation naming the field, and staff
only."""

from __future__ import annotations

import base64
import uuid
from datetime import date

import pytest

from tests.api.conftest import Caller
from tests.api.test_snapshot_routes import CREATED, ledger_runs, publish_everything, refused, staff
from timekeeper.edge.registries import assemble_snapshot_types
from timekeeper.platform.directory import create_workspace
from timekeeper.snapshots import ledger
from timekeeper.snapshots import staff as snapshot_staff


@pytest.fixture
def db(conn):
    """The owner's connection on a clean ledger (the module's database is shared)."""
    conn.execute("TRUNCATE snapshot_runs, snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows, "
                 "workspace_memberships, workspaces CASCADE")
    return conn


def _named(db, name: str) -> uuid.UUID:
    return create_workspace(db, name=name, timezone="Europe/Berlin", currency="EUR", now=CREATED).id


def _range(*workspaces, **overrides) -> dict:
    return {"owner": "platform", "snapshot_type": "ar_aging", "workspaces": [str(w) for w in workspaces],
            "first": "2026-12", "through": "2027-02", "mode": "manual", "reason": "totals corrected", **overrides}


def _outcomes(body: dict) -> list[tuple]:
    return [(i["workspace_name"], i["period"], i["planned"], i["version"], i["refusal"]) for i in body["items"]]


def test_the_preview_shows_exactly_what_the_request_plans_and_refuses(db, call):
    # Given two workspaces whose months are published; Alpha's January finalized, Beta's February re-running
    alpha, beta = _named(db, "Alpha club"), _named(db, "Beta club")
    publish_everything(db, assemble_snapshot_types("development"))
    january = next(r for r in ledger_runs(db, alpha) if r.snapshot_type == "ar_aging" and r.period.month == 1)
    assert call("POST", f"/snapshots/workspaces/{alpha}/runs/{january.id}/finalize", {"reason": "closed"},
                as_=staff()).status == 200
    assert call("POST", "/snapshots/runs", {"owner": "platform", "snapshot_type": "ar_aging", "workspace_id": str(beta),
                                            "period": "2027-02", "mode": "manual", "reason": "x"},
                as_=staff()).status == 201
    before = len(ledger_runs(db, alpha)) + len(ledger_runs(db, beta))
    # When staff preview a re-run of December to February of both
    preview = call("POST", "/snapshots/ranges/preview", _range(beta, alpha), as_=staff())
    # Then it lists each period by workspace name, planned or refused with the reason, and records nothing
    assert preview.status == 200, preview.body
    assert _outcomes(preview.body) == [
        ("Alpha club", "2026-12", True, 2, None), ("Alpha club", "2027-01", False, None, "protected_history"),
        ("Alpha club", "2027-02", True, 2, None),
        ("Beta club", "2026-12", True, 2, None), ("Beta club", "2027-01", True, 2, None),
        ("Beta club", "2027-02", False, None, "active_work")]
    assert (preview.body["planned"], preview.body["refused"], preview.body["group_id"]) == (4, 2, None)
    assert len(ledger_runs(db, alpha)) + len(ledger_runs(db, beta)) == before
    # And the request plans exactly that
    planned = call("POST", "/snapshots/ranges", _range(beta, alpha), as_=staff())
    assert planned.status == 201, planned.body
    assert _outcomes(planned.body) == _outcomes(preview.body)
    group = planned.body["group_id"]
    runs = [r for w in (alpha, beta) for r in ledger_runs(db, w) if r.request_group == uuid.UUID(group)]
    assert sorted(str(r.id) for r in runs) == sorted(i["run_id"] for i in planned.body["items"] if i["planned"])
    assert {(r.mode, r.reason, r.requested_by, r.state) for r in runs} == {
        ("manual", "totals corrected", "staff-1", "planned")}
    # And its progress counts them, admission moving them on (one owner's cap: 4)
    with db.transaction():
        admitted = ledger.admit(db, owner="platform", now=runs[0].created_at, cap=4, backfill_lane=1)
    progress = call("GET", f"/snapshots/ranges/{group}", as_=staff())
    assert progress.status == 200, progress.body
    assert sum(progress.body["counts"].values()) == 4
    assert progress.body["counts"].get("queued", 0) == len([a for a in admitted if a.run_id in {r.id for r in runs}])
    assert {i["workspace_name"] for i in progress.body["items"]} == {"Alpha club", "Beta club"}


def test_a_range_plans_at_most_the_cap_and_refuses_the_rest(db, call, monkeypatch):
    monkeypatch.setattr(snapshot_staff, "MAX_RANGE_PLANNED", 2)
    alpha = _named(db, "Alpha club")
    reply = call("POST", "/snapshots/ranges", _range(alpha, mode="backfill"), as_=staff())
    assert reply.status == 201, reply.body
    assert [(i["planned"], i["refusal"]) for i in reply.body["items"]] == [(True, None), (True, None),
                                                                           (False, "range_cap")]
    assert len(ledger_runs(db, alpha)) == 2


def test_a_range_request_answers_once_per_idempotency_key(db, call):
    alpha, who = _named(db, "Alpha club"), staff()
    body, key = _range(alpha, mode="backfill", first="2027-01", through="2027-02"), {"Idempotency-Key": "k1"}
    first = call("POST", "/snapshots/ranges", body, as_=who, headers=key)
    assert (first.status, first.body["planned"], first.headers.get("idempotent-replayed")) == (201, 2, None)
    assert first.body["group_id"] is not None
    # The same key with another body is refused, naming the header
    other = call("POST", "/snapshots/ranges", {**body, "reason": "another reason"}, as_=who, headers=key)
    assert (other.status, other.body["code"], other.body["field"]) == (409, "idempotency_key_reused",
                                                                       "Idempotency-Key")
    # The same request again answers the first answer (the same group), marked as a replay, planning nothing
    again = call("POST", "/snapshots/ranges", body, as_=who, headers=key)
    assert (again.status, again.body, again.headers.get("idempotent-replayed")) == (201, first.body, "true")
    assert len(ledger_runs(db, alpha)) == 2


def test_a_range_that_plans_nothing_is_200_with_no_group(db, call):
    alpha = _named(db, "Alpha club")
    body = _range(alpha, mode="backfill", first="2027-01", through="2027-02")
    assert call("POST", "/snapshots/ranges", body, as_=staff()).status == 201
    # Every month already planned: nothing is created, so not 201 Created
    nothing = call("POST", "/snapshots/ranges", body, as_=staff())
    assert (nothing.status, nothing.body["group_id"], nothing.body["planned"]) == (200, None, 0), nothing.body
    assert {i["refusal"] for i in nothing.body["items"]} == {"already_planned"}
    assert len(ledger_runs(db, alpha)) == 2


def test_all_workspaces_of_a_type_are_backfilled(db, call):
    alpha, beta = _named(db, "Alpha club"), _named(db, "Beta club")
    body = _range(mode="backfill", first="2027-01", through="2027-01", workspaces="all")
    reply = call("POST", "/snapshots/ranges", body, as_=staff())
    assert reply.status == 201, reply.body
    # (the staff member's own workspace, created after January, is refused for it)
    assert _outcomes(reply.body) == [("Alpha club", "2027-01", True, 1, None), ("Beta club", "2027-01", True, 1, None),
                                     ("Workspace", "2027-01", False, None, "period_before_workspace")]
    assert [len(ledger_runs(db, w)) for w in (alpha, beta)] == [1, 1]


def test_staff_find_workspaces_by_name(db, call):
    _named(db, "Alpha club"), _named(db, "Beta club")
    reply = call("GET", "/snapshots/staff/workspaces?search=ALP", as_=staff())
    assert reply.status == 200, reply.body
    assert [w["name"] for w in reply.body["items"]] == ["Alpha club"]


@pytest.mark.parametrize(("change", "field"), [
    ({"workspaces": None}, "workspaces"),
    ({"workspaces": []}, "workspaces"),
    ({"workspaces": "every"}, "workspaces"),
    ({"workspaces": [str(uuid.uuid4())]}, "workspaces"),
    ({"first": "2027-02", "through": "2026-12"}, "through"),
    ({"first": "2020-01", "through": "2027-02"}, "through"),
    ({"through": "2027-13"}, "through"),
    ({"first": "9990-01", "through": "9999-12"}, "through"),
    ({"first": "9999-12", "through": "9999-12"}, "first"),
    ({"reason": " \u200b "}, "reason"),
    ({"reason": None}, "reason"),
    ({"mode": "everything"}, "mode"),
])
@pytest.mark.parametrize("path", ["/snapshots/ranges/preview", "/snapshots/ranges"])
def test_a_bad_range_is_422_naming_the_field(db, call, change, field, path):
    alpha = _named(db, "Alpha club")
    body = {k: v for k, v in {**_range(alpha), **change}.items() if v is not None}
    reply = call("POST", path, body, as_=staff())
    assert (reply.status, reply.body.get("field")) == (422, field), reply.body
    assert ledger_runs(db, alpha) == []


@pytest.mark.parametrize(("method", "path"), [("POST", "/snapshots/ranges/preview"), ("POST", "/snapshots/ranges"),
                                              ("GET", "/snapshots/staff/workspaces"), ("GET", "/snapshots/ranges"),
                                              ("GET", "/snapshots/ranges/7d0c3f4e-2b1a-4c5d-9e8f-0a1b2c3d4e5f")])
def test_non_staff_are_403(db, call, method, path):
    alpha = _named(db, "Alpha club")
    admin = Caller(roles="schedules:admin,snapshots:read", workspace_id=alpha)
    refused(call(method, path, _range(alpha) if method == "POST" else None, as_=admin), 403, "forbidden")
    assert ledger_runs(db, alpha) == []


def test_an_unknown_range_is_404(db, call):
    refused(call("GET", f"/snapshots/ranges/{uuid.uuid4()}", as_=staff()), 404, "not_found")


# ------------------------------------------------------------ periods across workspaces


def _run(db, workspace, period: str, state: str, *, version: int = 1, at=None) -> None:
    current = state == "published"
    db.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, skip_reason,
                                   is_current, published_at, created_at, updated_at)
        VALUES ('platform', 'ar_aging', %(w)s, %(p)s, %(v)s, 'planned', %(s)s, %(skip)s, %(cur)s,
                CASE WHEN %(cur)s THEN %(at)s END, %(at)s, %(at)s)""",
               {"w": workspace, "p": f"{period}-01", "v": version, "s": state, "cur": current,
                "skip": "policy_disabled" if state == "skipped" else None, "at": at or CREATED})


def test_staff_see_every_workspaces_periods_what_matters_first_filtered_and_paged(db, call):
    alpha, beta = _named(db, "Alpha club"), _named(db, "Beta club")
    _run(db, alpha, "2026-12", "published", at=CREATED)
    _run(db, alpha, "2027-01", "published", version=1, at=CREATED)
    _run(db, alpha, "2027-01", "failed", version=2, at=CREATED)  # a failed re-run: the period's newest version
    _run(db, beta, "2026-12", "running")
    _run(db, beta, "2027-01", "skipped")
    _run(db, beta, "2027-02", "published", at=CREATED.replace(day=20))
    reply = call("GET", "/snapshots/staff/periods", as_=staff())
    assert reply.status == 200, reply.body
    assert [(i["workspace_name"], i["period"], i["state"]) for i in reply.body["items"]] == [
        ("Alpha club", "2027-01", "failed"), ("Beta club", "2026-12", "running"),
        ("Beta club", "2027-02", "published"), ("Alpha club", "2026-12", "published"),
        ("Beta club", "2027-01", "skipped")]
    # Filters: a part of the name, the status, the months
    named = call("GET", "/snapshots/staff/periods?search=BETA&status=published", as_=staff()).body["items"]
    assert [(i["workspace_name"], i["period"]) for i in named] == [("Beta club", "2027-02")]
    months = call("GET", "/snapshots/staff/periods?first=2027-01&through=2027-01", as_=staff()).body["items"]
    assert {i["period"] for i in months} == {"2027-01"} and len(months) == 2
    # Pages of one, in the same order
    seen, cursor = [], None
    for _ in range(10):
        page = call("GET", "/snapshots/staff/periods?limit=1" + (f"&cursor={cursor}" if cursor else ""),
                    as_=staff()).body
        seen += [(i["workspace_name"], i["period"]) for i in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [(i["workspace_name"], i["period"]) for i in reply.body["items"]]


def _forged(rank: str, at: str = "2026-12-06T16:48:01+00:00") -> str:
    return base64.urlsafe_b64encode(f"{rank}|{at}|d1008f3c-cd3c-46b1-9830-c5b0ff710a6a".encode()).decode()


@pytest.mark.parametrize(("query", "field"), [("status=broken", "status"), ("first=2027-02&through=2027-01", "through"),
                                              ("first=2027-13", "first"), ("cursor=bm9wZQ", "cursor"),
                                              ("limit=0", "limit"), ("search=a\x00b", "search"),
                                              (f"cursor={_forged('99999999999999999999')}", "cursor"),
                                              (f"cursor={_forged('-1')}", "cursor"),
                                              (f"cursor={_forged(chr(0x663))}", "cursor"),
                                              (f"cursor={_forged('0', '2026-12-06T16:48:01')}", "cursor")])
def test_a_bad_staff_period_filter_is_422_naming_it(db, call, query, field):
    reply = call("GET", f"/snapshots/staff/periods?{query}", as_=staff())
    assert (reply.status, reply.body.get("field")) == (422, field), reply.body


def test_a_nul_in_the_workspace_search_is_422_naming_it(db, call):
    reply = call("GET", "/snapshots/staff/workspaces?search=\x00", as_=staff())
    assert (reply.status, reply.body.get("field")) == (422, "search"), reply.body


def test_the_months_stop_at_the_calendars_last():
    assert snapshot_staff.months(date(9999, 11, 1), date(9999, 12, 1)) == [date(9999, 11, 1), date(9999, 12, 1)]


def test_non_staff_may_not_list_every_workspaces_periods(db, call):
    alpha = _named(db, "Alpha club")
    refused(call("GET", "/snapshots/staff/periods", as_=Caller(roles="snapshots:read", workspace_id=alpha)),
            403, "forbidden")


# ------------------------------------------------------------------- audit of requests


def _audited(db, workspace) -> list[dict]:
    return [dict(r) for r in db.execute(
        "SELECT actor, kind, subject_type, subject_id, reason, after FROM audit_events "
        "WHERE workspace_id = %s AND kind LIKE 'staff.snapshot%%requested' ORDER BY id", (workspace,)).fetchall()]


def test_a_staff_request_and_a_range_are_in_each_workspaces_audit_log(db, call):
    # Given two workspaces, Alpha's months published
    alpha, beta = _named(db, "Alpha club"), _named(db, "Beta club")
    publish_everything(db, assemble_snapshot_types("development"))
    # When staff re-run Alpha's February, then request a range over both
    single = call("POST", "/snapshots/runs", {"owner": "platform", "snapshot_type": "ar_aging", "workspace_id":
                                              str(alpha), "period": "2027-02", "mode": "manual",
                                              "reason": " late invoices "}, as_=staff())
    assert single.status == 201, single.body
    planned = call("POST", "/snapshots/ranges", _range(alpha, beta, first="2026-12", through="2027-01"),
                   as_=staff())
    assert planned.status == 201, planned.body
    # Then Alpha's log has the re-run (who, why, type, month, kind) and the range's months there
    group = planned.body["group_id"]
    assert _audited(db, alpha) == [
        {"actor": "staff-1", "kind": "staff.snapshot_requested", "subject_type": "snapshot_run",
         "subject_id": single.body["id"], "reason": "late invoices",
         "after": {"snapshot_type": "platform/ar_aging", "period": "2027-02", "version": 2, "mode": "manual"}},
        {"actor": "staff-1", "kind": "staff.snapshot_range_requested", "subject_type": "snapshot_range",
         "subject_id": group, "reason": "totals corrected",
         "after": {"name": "Receivables aging 2026-12 to 2027-01", "snapshot_type": "platform/ar_aging",
                   "months": "2026-12 to 2027-01", "planned": 2, "mode": "manual"}}]
    # And Beta's log its own part of the range
    assert [(a["kind"], a["after"]["months"], a["after"]["planned"]) for a in _audited(db, beta)] == [
        ("staff.snapshot_range_requested", "2026-12 to 2027-01", 2)]


def test_a_preview_and_a_refused_request_are_not_audited(db, call):
    alpha = _named(db, "Alpha club")
    assert call("POST", "/snapshots/ranges/preview", _range(alpha), as_=staff()).status == 200
    refused(call("POST", "/snapshots/runs", {"owner": "platform", "snapshot_type": "ar_aging", "workspace_id":
                                             str(alpha), "period": "2020-01", "mode": "manual", "reason": "x"},
                 as_=staff()), 422, "period_before_workspace", "period")
    assert _audited(db, alpha) == []


# ------------------------------------------------------------------- finding a range again


def test_staff_find_their_range_requests_again_newest_first_with_progress(db, call):
    # Given two range requests by a named staff member, the second later and over both workspaces
    alpha, beta = _named(db, "Alpha club"), _named(db, "Beta club")
    first = call("POST", "/snapshots/ranges", _range(alpha, mode="backfill", first="2027-01", through="2027-02"),
                 as_=staff())
    db.execute("UPDATE users SET display_name = 'Ada Staff' WHERE id = 'staff-1'")
    db.execute("UPDATE snapshot_runs SET created_at = created_at - interval '1 hour' WHERE request_group = %s",
               (first.body["group_id"],))
    second = call("POST", "/snapshots/ranges", _range(alpha, beta, first="2026-12", through="2026-12",
                                                      mode="backfill"), as_=staff())
    assert (first.status, second.status) == (201, 201), (first.body, second.body)
    # And one run of the first published
    db.execute("UPDATE snapshot_runs SET state = 'published', is_current = true, published_at = created_at "
               "WHERE request_group = %s AND period = '2027-01-01'", (first.body["group_id"],))
    # When staff list the range requests
    reply = call("GET", "/snapshots/ranges?limit=5", as_=staff())
    # Then they are newest first, with who (by name), type, kind, months, workspaces and progress
    assert reply.status == 200, reply.body
    assert [(r["group_id"], r["requested_by_name"], r["snapshot_type"], r["mode"], r["first"], r["through"],
             r["workspaces"], r["runs"], r["done"]) for r in reply.body["items"]] == [
        (second.body["group_id"], "Ada Staff", "ar_aging", "backfill", "2026-12", "2026-12", 2, 2, 0),
        (first.body["group_id"], "Ada Staff", "ar_aging", "backfill", "2027-01", "2027-02", 1, 2, 1)]
    # And the limit holds, and a range's progress names its requester
    assert len(call("GET", "/snapshots/ranges?limit=1", as_=staff()).body["items"]) == 1
    progress = call("GET", f"/snapshots/ranges/{first.body['group_id']}", as_=staff()).body
    assert progress["names"] == {"staff-1": "Ada Staff"}
    refused(call("GET", "/snapshots/ranges?limit=0", as_=staff()), 422, "validation_error", "limit")
