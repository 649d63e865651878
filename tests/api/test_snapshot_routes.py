"""The snapshot routes through the resolver on the real database, through the API's walled
login: staff requests (every refusal reason, 201 for backfills and re-runs, the run really
in the ledger), the staff and reader roles, and the period listings (own workspace,
another workspace's 404, staff's any, overdue)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from tests.api.conftest import NOW, Caller, Reply, enrol, proxy_event
from timekeeper import settings as settings_names
from timekeeper.api import ApiAdapters, create_app
from timekeeper.edge import api as api_edge
from timekeeper.edge import registries
from timekeeper.edge.registries import assemble_snapshot_types
from timekeeper.local.lambdas import LambdaContext
from timekeeper.platform import snapshots as platform_snapshots
from timekeeper.platform.directory import create_workspace
from timekeeper.snapshots import ledger
from timekeeper.snapshots.jobs import JobMessage, run_job
from timekeeper.snapshots.registry import Chunk, SnapshotRegistry, SnapshotType

CREATED = datetime(2026, 12, 15, tzinfo=UTC)
STAFF = "platform:staff"


@pytest.fixture
def db(conn):
    """The owner's connection on a clean ledger (the module's database is shared)."""
    conn.execute("TRUNCATE snapshot_runs, snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows, "
                 "workspace_memberships, workspaces CASCADE")
    return conn


def workspace(db, timezone: str = "Europe/Berlin", **kwargs) -> uuid.UUID:
    return create_workspace(db, name="Workspace", timezone=timezone, currency="EUR", now=CREATED, **kwargs).id


def ledger_runs(db, workspace_id) -> list[ledger.SnapshotRun]:
    return ledger.fetch_runs(db, "SELECT * FROM snapshot_runs WHERE workspace_id = %(w)s "
                                 "ORDER BY snapshot_type, period, version", {"w": workspace_id})


def publish_everything(db, registry: SnapshotRegistry, *, now: datetime = NOW) -> None:
    """Plan every completed month and run every job to publication (the workers' path)."""
    ledger.plan(db, registry, now=now)
    for _ in range(100):
        with db.transaction():
            jobs = ledger.admit(db, owner="platform", now=now, cap=4, backfill_lane=1)
        if not jobs:
            return
        for job in jobs:
            run_job(db, registry, JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id),
                    now=lambda: now, receive_count=1, max_receives=3)
    raise AssertionError("the jobs did not drain")


def staff(**kwargs) -> Caller:
    """A Platform staff member (their own workspace is elsewhere)."""
    return Caller(user_id="staff-1", roles=STAFF, **kwargs)


def request(target, **overrides) -> dict:
    """A valid backfill request of ``target``'s January ar_aging, with ``overrides``."""
    return {"owner": "platform", "snapshot_type": "ar_aging", "workspace_id": str(target),
            "period": "2027-01", "mode": "backfill", "reason": "customer asked for January", **overrides}


# ------------------------------------------------------------------ staff requests: 201


def test_a_backfill_is_201_and_recorded_in_the_target_workspace(db, call):
    # Given a workspace whose January was never planned
    target = workspace(db)
    # When staff request a backfill of it
    reply = call("POST", "/snapshots/runs", request(target), as_=staff())
    # Then 201 with version 1, planned, and the run is in the ledger with the reason and requester
    assert reply.status == 201, reply.body
    body = reply.body
    assert (body["workspace_id"], body["period"], body["version"], body["mode"], body["state"]) == (
        str(target), "2027-01", 1, "backfill", "planned")
    [run] = ledger_runs(db, target)
    assert str(run.id) == body["id"]
    assert (run.period, run.mode, run.reason, run.requested_by) == (
        date(2027, 1, 1), "backfill", "customer asked for January", "staff-1")
    assert run.created_at == NOW


def test_a_staff_request_answers_once_per_idempotency_key(db, call):
    target, who = workspace(db), staff()
    key = {"Idempotency-Key": "backfill-january"}
    first = call("POST", "/snapshots/runs", request(target), as_=who, headers=key)
    assert (first.status, first.headers.get("idempotent-replayed")) == (201, None), first.body
    # The same key with another body is refused, naming the header
    other = call("POST", "/snapshots/runs", request(target, reason="another reason"), as_=who, headers=key)
    assert (other.status, other.body["code"], other.body["field"]) == (409, "idempotency_key_reused",
                                                                       "Idempotency-Key")
    # The same request again answers the first answer, marked as a replay, and plans nothing more
    again = call("POST", "/snapshots/runs", request(target), as_=who, headers=key)
    assert (again.status, again.body, again.headers.get("idempotent-replayed")) == (201, first.body, "true")
    assert len(ledger_runs(db, target)) == 1


def test_a_re_run_of_a_published_period_is_201_with_the_next_version(db, call):
    # Given a workspace whose months are published
    target = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    # When staff request a manual re-run of February
    reply = call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual",
                                                    reason="  totals were corrected  "), as_=staff())
    # Then version 2 is planned (the reason stripped); version 1 stays current until it publishes
    assert reply.status == 201, reply.body
    assert (reply.body["version"], reply.body["mode"], reply.body["reason"]) == (2, "manual", "totals were corrected")
    february = [r for r in ledger_runs(db, target) if r.snapshot_type == "ar_aging" and r.period == date(2027, 2, 1)]
    assert [(r.version, r.state, r.is_current) for r in february] == [(1, "published", True), (2, "planned", False)]


def test_the_request_is_judged_at_the_adapters_clock(db, call, clock_now):
    # Given a workspace and a clock in April (March has ended in Berlin)
    target = workspace(db)
    clock_now["now"] = datetime(2027, 4, 2, tzinfo=UTC)
    # When staff backfill March
    reply = call("POST", "/snapshots/runs", request(target, period="2027-03"), as_=staff())
    # Then it is recorded at that instant
    assert reply.status == 201, reply.body
    assert ledger_runs(db, target)[0].created_at == datetime(2027, 4, 2, tzinfo=UTC)


# ------------------------------------------------------------ staff requests: refusals


def refused(reply, status: int, code: str, field: str | None = None) -> None:
    assert (reply.status, reply.body["code"]) == (status, code), reply.body
    assert reply.body["message"]
    assert reply.body.get("field") == field


def test_a_month_that_has_not_ended_is_period_not_complete(db, call):
    target = workspace(db)
    refused(call("POST", "/snapshots/runs", request(target, period="2027-03"), as_=staff()),
            409, "period_not_complete", "period")
    assert ledger_runs(db, target) == []


def test_period_not_complete_is_judged_in_the_workspaces_timezone(db, call, clock_now):
    # Given 05:00 UTC on March 1st: February has ended in Berlin, not yet in Honolulu
    clock_now["now"] = datetime(2027, 3, 1, 5, tzinfo=UTC)
    honolulu, berlin = workspace(db, "Pacific/Honolulu"), workspace(db)
    refused(call("POST", "/snapshots/runs", request(honolulu, period="2027-02"), as_=staff()),
            409, "period_not_complete", "period")
    assert call("POST", "/snapshots/runs", request(berlin, period="2027-02"), as_=staff()).status == 201


def test_a_period_with_a_run_in_progress_is_active_work(db, call):
    # Given the planner's version 1 of February waiting for admission
    target = workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    # When staff request a re-run of it
    reply = call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual"), as_=staff())
    # Then active_work, and no version was added
    refused(reply, 409, "active_work")
    assert max(r.version for r in ledger_runs(db, target)) == 1


def test_a_second_re_run_while_the_first_waits_is_active_work(db, call):
    target = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    first = call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual"), as_=staff())
    assert first.status == 201
    refused(call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual"), as_=staff()),
            409, "active_work")


def test_a_captured_current_version_is_protected_history(db, call):
    # Given February published and captured into a delivered report
    target = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    db.execute("UPDATE snapshot_runs SET protection = 'captured' WHERE is_current AND period = '2027-02-01' "
               "AND snapshot_type = 'ar_aging'")
    refused(call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual"), as_=staff()),
            409, "protected_history")
    # (another type's February is not protected)
    assert call("POST", "/snapshots/runs", request(target, period="2027-02", mode="manual",
                                                   snapshot_type="membership_counts"), as_=staff()).status == 201


def test_a_re_run_of_a_period_without_runs_is_not_planned(db, call):
    target = workspace(db)
    refused(call("POST", "/snapshots/runs", request(target, mode="manual"), as_=staff()), 409, "not_planned", "mode")


def test_a_backfill_of_a_period_with_runs_is_already_planned(db, call):
    target = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    refused(call("POST", "/snapshots/runs", request(target, mode="backfill"), as_=staff()),
            409, "already_planned", "mode")


def test_a_run_committed_while_the_request_waits_is_active_work(db, call, db_url):
    # Given the planner inserting January's version 1, not yet committed
    target = workspace(db)
    planner = psycopg.connect(db_url)
    planner.execute("INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, "
                    "created_at, updated_at) VALUES ('platform', 'ar_aging', %s, '2027-01-01', 1, 'planned', "
                    "'planned', %s, %s)", (target, NOW, NOW))
    # When staff request a backfill of January meanwhile (it sees no runs, and its insert waits)
    replies = []
    staff_request = threading.Thread(
        target=lambda: replies.append(call("POST", "/snapshots/runs", request(target), as_=staff())))
    staff_request.start()
    deadline = time.monotonic() + 15
    while not db.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                         "AND application_name = 'timekeeper-api' AND wait_event_type = 'Lock'").fetchone()["n"]:
        assert staff_request.is_alive() and time.monotonic() < deadline, "the request did not wait for the insert"
        time.sleep(0.02)
    planner.commit()
    planner.close()
    staff_request.join(timeout=20)
    # Then the request is refused as active work, never a server error, and only the planner's row exists
    [reply] = replies
    refused(reply, 409, "active_work")
    assert [(r.version, r.mode) for r in ledger_runs(db, target)] == [(1, "planned")]


def test_an_unknown_type_is_unsupported_type_naming_the_field(db, call):
    target = workspace(db)
    refused(call("POST", "/snapshots/runs", request(target, snapshot_type="headcount"), as_=staff()),
            422, "unsupported_type", "snapshot_type")
    refused(call("POST", "/snapshots/runs", request(target, owner="payroll"), as_=staff()),
            422, "unsupported_type", "owner")


def test_an_unknown_workspace_is_unknown_workspace_naming_the_field(db, call):
    refused(call("POST", "/snapshots/runs", request(uuid.uuid4()), as_=staff()),
            422, "unknown_workspace", "workspace_id")


@pytest.mark.parametrize(("state", "code"), [({"status": "loading"}, "workspace_loading"),
                                           ({"status": "disabled"}, "workspace_disabled"),
                                           ({"snapshots_enabled": False}, "policy_disabled")])
def test_a_workspace_the_planner_skips_is_refused_naming_the_workspace(db, call, state, code):
    target = workspace(db, **state)
    for mode in ("backfill", "manual"):
        refused(call("POST", "/snapshots/runs", request(target, mode=mode), as_=staff()), 422, code, "workspace_id")
    assert ledger_runs(db, target) == []


@dataclass
class NeverRuns:
    """A generator for a registered type whose runs are never started in these tests."""

    def choose_mode(self, conn, run):
        raise AssertionError("not started here")

    def generate(self, conn, run, cursor) -> Chunk:
        raise AssertionError("not started here")

    def validate(self, conn, run) -> dict:
        raise AssertionError("not started here")


@pytest.fixture
def app_with(api_conn, clock_now):
    """``app_with(registry)``: the API over the module's database with that snapshot registry."""

    def build(registry: SnapshotRegistry):
        return create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: None,
                                      registry=registries.work_kinds, now=lambda: clock_now["now"],
                                      snapshot_registry=lambda: registry))

    return build


def send(app, method: str, target: str, body=None, *, as_: Caller, db) -> Reply:
    """Resolve one request on ``app`` as ``as_`` (a member of their workspace: enrolled on
    ``db``, the owner's connection)."""
    enrol(db, as_.user_id, as_.workspace_id)
    response = app.resolve(proxy_event(method, target, claims=as_.claims(), body=body),
                           LambdaContext(function_name="timekeeper-api"))
    return Reply(response["statusCode"], json.loads(response["body"]), {})


def test_a_type_disabled_in_production_is_type_disabled(db, app_with):
    # Given the production registry (the self-test type is enabled in development only)
    app = app_with(assemble_snapshot_types("production"))
    target = workspace(db)
    # Then a self-test backfill is refused, and a production type is accepted
    refused(send(app, "POST", "/snapshots/runs", request(target, snapshot_type="selftest"), as_=staff(), db=db),
            422, "type_disabled", "snapshot_type")
    assert send(app, "POST", "/snapshots/runs", request(target), as_=staff(), db=db).status == 201
    assert [r.snapshot_type for r in ledger_runs(db, target)] == ["ar_aging"]


def test_the_development_registry_accepts_the_self_test(db, call):
    target = workspace(db)
    assert call("POST", "/snapshots/runs", request(target, snapshot_type="selftest"), as_=staff()).status == 201


# ---------------------------------------------------------------------- staff roles


@pytest.mark.parametrize("roles", ["schedules:read,schedules:write,schedules:run,schedules:admin,snapshots:read",
                                   "", "platform:staffer", "PLATFORM:STAFF"])
def test_a_caller_without_a_staff_role_is_403_and_nothing_is_recorded(db, call, roles):
    target = workspace(db)
    reply = call("POST", "/snapshots/runs", request(target), as_=Caller(roles=roles, workspace_id=target))
    refused(reply, 403, "forbidden")
    assert ledger_runs(db, target) == []


def test_a_request_without_claims_is_401(db, call):
    reply = call("POST", "/snapshots/runs", request(workspace(db)), claims=None)
    refused(reply, 401, "unauthenticated")


def test_staff_of_another_type_may_not_request_this_one(db, app_with):
    # Given a registry with another owner's type whose staff role is billing:staff
    registry = assemble_snapshot_types("development")
    registry.register(SnapshotType(owner="billing", name="ledger_close", label="Close", generator=NeverRuns(),
                                   staff_roles=frozenset({"billing:staff"})))
    app = app_with(registry)
    target = workspace(db)
    billing_staff = Caller(user_id="b-1", roles="billing:staff")
    # Then billing staff may request their type, not the Platform's
    assert send(app, "POST", "/snapshots/runs", request(target, owner="billing", snapshot_type="ledger_close"),
                as_=billing_staff, db=db).status == 201
    refused(send(app, "POST", "/snapshots/runs", request(target), as_=billing_staff, db=db), 403, "forbidden")
    assert [r.owner for r in ledger_runs(db, target)] == ["billing"]


# ------------------------------------------------------------------------ validation


@pytest.mark.parametrize(("change", "field"), [
    ({"period": "2027-13"}, "period"),
    ({"period": "2027-1"}, "period"),
    ({"period": "2027-01-01"}, "period"),
    ({"period": "0000-01"}, "period"),
    ({"period": 202701}, "period"),
    ({"period": None}, "period"),
    ({"reason": ""}, "reason"),
    ({"reason": "   \n\t "}, "reason"),
    ({"reason": "x" * 501}, "reason"),
    ({"reason": "nul\x00byte"}, "reason"),
    ({"reason": None}, "reason"),
    ({"mode": "planned"}, "mode"),
    ({"workspace_id": "not-a-uuid"}, "workspace_id"),
    ({"snapshot_type": "AR Aging"}, "snapshot_type"),
    ({"owner": ""}, "owner"),
    ({"colour": "red"}, "colour"),
])
def test_a_malformed_request_is_422_naming_the_field(db, call, change, field):
    target = workspace(db)
    body = request(target, **change)
    reply = call("POST", "/snapshots/runs", body, as_=staff())
    refused(reply, 422, "validation_error", field)
    assert ledger_runs(db, target) == []


@pytest.mark.parametrize("missing", ["owner", "snapshot_type", "workspace_id", "period", "mode", "reason"])
def test_a_missing_field_is_422_naming_it(db, call, missing):
    body = request(workspace(db))
    del body[missing]
    refused(call("POST", "/snapshots/runs", body, as_=staff()), 422, "validation_error", missing)


def test_a_reason_of_500_characters_is_accepted(db, call):
    target = workspace(db)
    assert call("POST", "/snapshots/runs", request(target, reason="r" * 500), as_=staff()).status == 201


# ------------------------------------------------------------------- period listings


READER = "snapshots:read"


def test_a_workspace_user_lists_their_own_periods(db, call):
    # Given two workspaces with planned months
    own, other = workspace(db), workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    # When a reader of one lists the periods
    reply = call("GET", "/snapshots/periods", as_=Caller(roles=READER, workspace_id=own))
    # Then they see their workspace's three types x three months, newest first per type
    assert reply.status == 200, reply.body
    assert reply.body["workspace_id"] == str(own) and reply.body["timezone"] == "Europe/Berlin"
    items = reply.body["items"]
    assert {(i["snapshot_type"], i["period"]) for i in items} == {
        (t, p) for t in ("ar_aging", "membership_counts", "selftest") for p in ("2026-12", "2027-01", "2027-02")}
    assert [i["period"] for i in items if i["snapshot_type"] == "ar_aging"] == ["2027-02", "2027-01", "2026-12"]
    other_ids = {str(r.id) for r in ledger_runs(db, other)}
    assert not other_ids & {i["run_id"] for i in items}
    assert items[0].keys() == {"owner", "snapshot_type", "period", "status", "chosen_version", "run_id", "basis",
                               "published_at", "skip_reason", "overdue", "attempts", "failure_code",
                               "latest_version", "latest_state", "latest_failure_code", "versions", "protection"}


def test_the_listing_filters_by_owner_and_type(db, call):
    own = workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    reader = Caller(roles=READER, workspace_id=own)
    aging = call("GET", "/snapshots/periods?owner=platform&snapshot_type=ar_aging", as_=reader).body["items"]
    assert {i["snapshot_type"] for i in aging} == {"ar_aging"} and len(aging) == 3
    assert call("GET", "/snapshots/periods?owner=billing", as_=reader).body["items"] == []
    bad = call("GET", "/snapshots/periods?snapshot_type=AR", as_=reader)
    refused(bad, 422, "validation_error", "snapshot_type")
    refused(call("GET", "/snapshots/periods?period=2027-01", as_=reader), 422, "validation_error", "period")


def test_published_periods_show_the_chosen_version_and_basis(db, call):
    own = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    items = call("GET", "/snapshots/periods?snapshot_type=membership_counts",
                 as_=Caller(roles=READER, workspace_id=own)).body["items"]
    february = items[0]
    assert (february["period"], february["status"], february["chosen_version"]) == ("2027-02", "published", 1)
    assert february["basis"] == {"as_of": "2027-02-28", "memberships": 0, "rows": 0}
    assert february["published_at"] == "2027-03-01T12:00:00Z" and february["overdue"] is False


def test_the_overdue_flag_follows_the_clock_and_the_workspace_timezone(db, call, clock_now):
    # Given every completed month planned (none published) in Berlin
    own = workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    reader = Caller(roles=READER, workspace_id=own)

    def overdue() -> dict[str, bool]:
        items = call("GET", "/snapshots/periods?snapshot_type=ar_aging", as_=reader).body["items"]
        return {i["period"]: i["overdue"] for i in items}

    # At noon on March 1st February ended (Berlin) 13 hours ago: within the 24-hour grace
    assert overdue() == {"2027-02": False, "2027-01": True, "2026-12": True}
    # Just before and at 24 hours after the Berlin month end (Feb 28, 23:00 UTC)
    clock_now["now"] = datetime(2027, 3, 1, 22, 59, 59, tzinfo=UTC)
    assert overdue()["2027-02"] is False
    clock_now["now"] = datetime(2027, 3, 1, 23, tzinfo=UTC)
    assert overdue()["2027-02"] is True


def test_skipped_periods_show_their_reason_and_are_not_overdue(db, call):
    own = workspace(db, status="loading")
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    items = call("GET", "/snapshots/periods", as_=Caller(roles=READER, workspace_id=own)).body["items"]
    assert {(i["status"], i["skip_reason"], i["overdue"]) for i in items} == {("skipped", "workspace_loading", False)}


def test_a_workspace_user_gets_404_for_another_workspaces_periods(db, call):
    own, other = workspace(db), workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    reader = Caller(roles=READER, workspace_id=own)
    refused(call("GET", f"/snapshots/workspaces/{other}/periods", as_=reader), 404, "not_found")
    refused(call("GET", f"/snapshots/workspaces/{uuid.uuid4()}/periods", as_=reader), 404, "not_found")
    # (their own workspace by id is their own listing)
    mine = call("GET", f"/snapshots/workspaces/{own}/periods", as_=reader)
    assert mine.status == 200 and mine.body == call("GET", "/snapshots/periods", as_=reader).body


def test_a_caller_without_the_read_role_is_403(db, call):
    own = workspace(db)
    schedules_only = Caller(roles="schedules:admin,schedules:read", workspace_id=own)
    refused(call("GET", "/snapshots/periods", as_=schedules_only), 403, "forbidden")
    refused(call("GET", f"/snapshots/workspaces/{own}/periods", as_=schedules_only), 403, "forbidden")
    refused(call("GET", f"/snapshots/workspaces/{workspace(db)}/periods", as_=schedules_only), 403, "forbidden")


def test_a_workspace_missing_from_the_directory_is_not_the_callers(db, call):
    # No one is a member of a workspace the directory does not hold: the membership rule
    refused(call("GET", "/snapshots/periods", as_=Caller(roles=READER, enrol=False)), 403, "not_a_member")


def test_staff_list_any_workspaces_periods(db, call):
    # Given two workspaces with planned months
    first, second = workspace(db), workspace(db, "America/New_York")
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    # When staff (whose own workspace is neither) list each
    for target, zone in ((first, "Europe/Berlin"), (second, "America/New_York")):
        reply = call("GET", f"/snapshots/workspaces/{target}/periods?snapshot_type=ar_aging", as_=staff())
        # Then they see that workspace's periods
        assert reply.status == 200, reply.body
        assert (reply.body["workspace_id"], reply.body["timezone"]) == (str(target), zone)
        assert {i["run_id"] for i in reply.body["items"]} == {
            str(r.id) for r in ledger_runs(db, target) if r.snapshot_type == "ar_aging"}
    refused(call("GET", f"/snapshots/workspaces/{uuid.uuid4()}/periods", as_=staff()), 404, "not_found")


def test_the_staff_listing_shows_a_requested_backfill(db, call):
    target = workspace(db)
    call("POST", "/snapshots/runs", request(target), as_=staff())
    items = call("GET", f"/snapshots/workspaces/{target}/periods", as_=staff()).body["items"]
    [item] = [i for i in items if i["status"] != "missing"]
    assert (item["period"], item["status"], item["chosen_version"], item["overdue"]) == (
        "2027-01", "planned", 1, True)
    # The other expected months, never planned, are listed as missing
    assert {(i["chosen_version"], i["run_id"]) for i in items if i is not item} <= {(None, None)}


# -------------------------------------------------------- the walled login's lock grants


def test_the_lock_only_grants_give_the_api_login_no_write(db, api_conn):
    # Given a workspace with a run, entered on the API's walled connection
    target = workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    other = workspace(db)
    with api_conn.entered(target):
        # Then it may lock the rows the ledger locks ...
        with api_conn.transaction():
            assert api_conn.execute("SELECT id FROM workspaces WHERE id = %s FOR SHARE", (target,)).fetchone()
            assert len(api_conn.execute("SELECT id FROM snapshot_runs FOR UPDATE").fetchall()) == 9
        # ... but rewriting the tenant key to another workspace breaks the policy,
        for statement, params in (("UPDATE workspaces SET id = %s", (other,)),
                                  ("UPDATE snapshot_runs SET workspace_id = %s", (other,))):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"), \
                    api_conn.transaction():
                api_conn.execute(statement, params)
        # ... and no other column is writable
        for statement in ("UPDATE workspaces SET name = 'x'", "UPDATE workspaces SET status = 'disabled'",
                          "UPDATE snapshot_runs SET state = 'published'", "UPDATE snapshot_runs SET protection = NULL",
                          "DELETE FROM snapshot_runs"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"), \
                    api_conn.transaction():
                api_conn.execute(statement)
    assert {r.state for r in ledger_runs(db, target)} == {"planned"}


def test_the_walled_login_cannot_record_a_run_in_another_workspace_than_the_entered_one(db, api_conn):
    # Given staff's request entered in one workspace but naming another (a scope bug)
    entered, named = workspace(db), workspace(db)
    found = assemble_snapshot_types("development").get("platform", "ar_aging")
    with api_conn.entered(entered):
        # Then the named workspace is invisible: unknown_workspace, nothing written
        with pytest.raises(ledger.RequestRefused) as refusal:
            ledger.request_run(api_conn, snapshot_type=found, workspace_id=named, period=date(2027, 1, 1),
                               mode="backfill", reason="r", requested_by="u", now=NOW)
    assert refusal.value.reason == "unknown_workspace"
    assert ledger_runs(db, named) == [] and ledger_runs(db, entered) == []


def test_the_api_uses_the_deployments_registry(db, api_conn, monkeypatch):
    # Given a production deployment and the edge's adapters (its registry), over this database
    monkeypatch.setenv(settings_names.ENVIRONMENT_VARIABLE, "production")
    registries.snapshot_types.cache_clear()
    try:
        app = create_app(replace(api_edge.edge_adapters(), connection=lambda: api_conn, now=lambda: NOW))
        target = workspace(db)
        # Then the development-only self-test is type_disabled, a production type is accepted
        refused(send(app, "POST", "/snapshots/runs", request(target, snapshot_type="selftest"), as_=staff(), db=db),
                422, "type_disabled", "snapshot_type")
        assert send(app, "POST", "/snapshots/runs", request(target), as_=staff(), db=db).status == 201
        assert platform_snapshots.STAFF_ROLE in registries.snapshot_types().get("platform", "ar_aging").staff_roles
    finally:
        registries.snapshot_types.cache_clear()


def test_now_is_read_once_per_request(db, api_conn):
    # Given a clock that moves a day on every read
    reads: list[datetime] = []

    def clock() -> datetime:
        reads.append(NOW + timedelta(days=len(reads)))
        return reads[-1]

    app = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: None,
                                 registry=registries.work_kinds, now=clock,
                                 snapshot_registry=lambda: assemble_snapshot_types("development")))
    target = workspace(db)
    reply = send(app, "POST", "/snapshots/runs", request(target), as_=staff(), db=db)
    assert reply.status == 201 and len(reads) == 1
    assert ledger_runs(db, target)[0].created_at == reads[0]
    send(app, "GET", f"/snapshots/workspaces/{target}/periods", as_=staff(), db=db)
    assert len(reads) == 2


def test_the_period_listing_pages_through_every_expected_month_with_never_planned_ones_missing(db, call):
    # Given a workspace whose months were planned, then one month's runs removed
    target = workspace(db)
    ledger.plan(db, assemble_snapshot_types("development"), now=NOW)
    db.execute("DELETE FROM snapshot_runs WHERE workspace_id = %s AND period = '2027-01-01'", (target,))
    # When staff page through its ar_aging periods one at a time
    seen, cursor = [], None
    while True:
        query = "snapshot_type=ar_aging&limit=1" + (f"&cursor={cursor}" if cursor else "")
        reply = call("GET", f"/snapshots/workspaces/{target}/periods?{query}", as_=staff())
        assert reply.status == 200, reply.body
        seen += [(i["period"], i["status"]) for i in reply.body["items"]]
        cursor = reply.body["next_cursor"]
        if cursor is None:
            break
    # Then every month appears once, newest first, the removed one as missing
    assert ("2027-01", "missing") in seen and len(seen) == len({p for p, _ in seen})
    assert [p for p, _ in seen] == sorted((p for p, _ in seen), reverse=True)
    # And a malformed cursor is a 422 naming cursor
    bad = call("GET", f"/snapshots/workspaces/{target}/periods?cursor=nope", as_=staff())
    assert bad.status == 422 and "cursor" in str(bad.body)


def fail_rerun(db, target, *, snapshot_type: str = "ar_aging", period: date = date(2027, 2, 1)) -> None:
    """Record a re-run of ``target``'s published period that failed for good on its fourth
    retryable failure (a lost job), as the dispatcher's reconciliation settles it."""
    db.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, attempts, retryable_failures, failure_code, failure_message,
                                   created_at, updated_at)
        VALUES ('platform', %s, %s, %s, 2, 'manual', 'totals corrected', 'staff-1', 'failed', 4, 4,
                'retries_exhausted', '4 retryable failures; the last: job_lost', %s, %s)""",
               (snapshot_type, target, period, NOW, NOW))


def test_a_failed_re_run_of_a_published_period_shows_in_the_listing_with_its_code_and_attempts(db, call):
    # Given a published February whose staff re-run failed for good
    own = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    fail_rerun(db, own)
    # When a reader lists the periods
    items = call("GET", "/snapshots/periods?snapshot_type=ar_aging",
                 as_=Caller(roles=READER, workspace_id=own)).body["items"]
    february = next(i for i in items if i["period"] == "2027-02")
    # Then the published version stays the chosen one, and the failed re-run is visible
    assert (february["status"], february["chosen_version"], february["attempts"], february["failure_code"]) == (
        "published", 1, 1, None)
    assert (february["latest_version"], february["latest_state"], february["latest_failure_code"],
            february["versions"]) == (2, "failed", "retries_exhausted", 2)


def test_a_periods_versions_list_every_attempt_with_its_failure_code(db, call):
    # Given a published February and its failed re-run
    own = workspace(db)
    publish_everything(db, assemble_snapshot_types("development"))
    fail_rerun(db, own)
    path = f"/snapshots/workspaces/{own}/periods/platform/ar_aging/2027-02"
    # When a reader of the workspace, and staff, read the period
    for caller in (Caller(roles=READER, workspace_id=own), staff()):
        reply = call("GET", path, as_=caller)
        # Then every version is listed, newest first, with its state, attempts and failure code
        assert reply.status == 200, reply.body
        body = reply.body
        assert (body["owner"], body["snapshot_type"], body["period"], body["timezone"]) == (
            "platform", "ar_aging", "2027-02", "Europe/Berlin")
        assert [(v["version"], v["state"], v["current"], v["attempts"], v["retryable_failures"], v["failure_code"])
                for v in body["versions"]] == [(2, "failed", False, 4, 4, "retries_exhausted"),
                                               (1, "published", True, 1, 0, None)]
        assert body["versions"][0]["failure_message"].startswith("4 retryable failures")
        assert body["versions"][0]["mode"] == "manual" and body["versions"][0]["requested_by"] == "staff-1"


def test_a_periods_versions_are_the_callers_own_or_staffs(db, call):
    own, other = workspace(db), workspace(db)
    path = f"/snapshots/workspaces/{other}/periods/platform/ar_aging/2027-02"
    refused(call("GET", path, as_=Caller(roles=READER, workspace_id=own)), 404, "not_found", None)
    refused(call("GET", path, as_=Caller(roles="schedules:read", workspace_id=other)), 403, "forbidden", None)
    # A month never planned has no versions; a malformed month is refused naming it
    assert call("GET", path, as_=staff()).body["versions"] == []
    bad = call("GET", f"/snapshots/workspaces/{other}/periods/platform/ar_aging/2027-13", as_=staff())
    refused(bad, 422, "validation_error", "period")
