"""``GET /runs?state=failed``: a workspace's failed runs, newest first, paginated, each with
the run its Retry now made; never another workspace's; on the real database (the API's
walled login)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.api.conftest import Caller, enrol
from tests.api.test_run_routes import LONG_AGO, STAFF, seed_run


@pytest.fixture
def db(conn):
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    return conn


@pytest.fixture
def operator(caller):
    return Caller(user_id="operator-1", workspace_id=caller.workspace_id, roles="schedules:read,schedules:run")


def _failed(db, workspace_id, key, queued_at):
    _, run_id = seed_run(db, workspace_id, key=key, state="failed", attempts=5, started_at=queued_at,
                         finished_at=queued_at + timedelta(minutes=1), outcome_code="reconciliation_failed",
                         error="bank feed unreachable")
    db.execute("UPDATE schedule_runs SET queued_at = %s WHERE id = %s", (queued_at, run_id))
    db.commit()
    return run_id


def test_a_workspaces_failed_runs_are_listed_newest_first_with_the_run_their_retry_made(db, call, operator,
                                                                                       publisher):
    # Given three failed runs and a succeeded one of the workspace, and a failed run of another
    runs = [_failed(db, operator.workspace_id, f"f{n}", LONG_AGO - timedelta(hours=n)) for n in range(3)]
    seed_run(db, operator.workspace_id, key="ok", state="succeeded", attempts=1, finished_at=LONG_AGO,
             outcome_code="ok")
    other = uuid.uuid4()
    enrol(db, "someone", other)
    theirs = _failed(db, other, "theirs", LONG_AGO)
    # and the newest failed run retried (its retry succeeds later: it stays listed, naming its retry)
    retried = call("POST", f"/runs/{runs[0]}/retry", {"reason": "feed is back"}, as_=operator)
    assert retried.status == 202, retried.body

    first = call("GET", "/runs?state=failed&limit=2", as_=operator)

    assert first.status == 200, first.body
    assert [r["id"] for r in first.body["items"]] == [str(runs[0]), str(runs[1])]
    newest = first.body["items"][0]
    assert (newest["schedule_name"], newest["state"], newest["outcome_code"], newest["error"], newest["timezone"],
            newest["retried_as"]) == ("Nightly sweep", "failed", "reconciliation_failed", "bank feed unreachable",
                                      "Europe/Berlin", retried.body["run_id"])
    assert first.body["items"][1]["retried_as"] is None
    # The next page holds the third, and is the last
    second = call("GET", f"/runs?state=failed&limit=2&cursor={first.body['next_cursor']}", as_=operator)
    assert [r["id"] for r in second.body["items"]] == [str(runs[2])] and second.body["next_cursor"] is None
    # since keeps the runs requested at or after it
    since = (LONG_AGO - timedelta(minutes=90)).strftime("%Y-%m-%dT%H:%M:%SZ")
    recent = call("GET", f"/runs?state=failed&since={since}", as_=operator)
    assert [r["id"] for r in recent.body["items"]] == [str(runs[0]), str(runs[1])]
    # Another workspace's failed run is never listed, for its members only theirs (staff: their own token's)
    assert str(theirs) not in {r["id"] for r in first.body["items"] + second.body["items"]}
    stranger = Caller(workspace_id=other, roles="schedules:read")
    assert [r["id"] for r in call("GET", "/runs?state=failed", as_=stranger).body["items"]] == [str(theirs)]
    staff = call("GET", "/runs?state=failed", as_=STAFF)
    assert (staff.status, staff.body["items"]) == (200, [])


def test_the_listing_needs_a_role_that_reads_schedules_and_names_a_bad_parameter(db, call, caller):
    reader = Caller(workspace_id=caller.workspace_id, roles="queries:read")
    refused = call("GET", "/runs?state=failed", as_=reader)
    assert (refused.status, refused.body["code"]) == (403, "forbidden")
    for target, field in (("/runs", "state"), ("/runs?state=succeeded", "state"),
                          ("/runs?state=failed&limit=0", "limit"), ("/runs?state=failed&since=yesterday", "since"),
                          ("/runs?state=failed&since=2027-03-01T10:00:00", "since"),
                          ("/runs?state=failed&cursor=nope", "cursor")):
        reply = call("GET", target)
        assert (reply.status, reply.body.get("field")) == (422, field), (target, reply.body)
