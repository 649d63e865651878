"""Every route's success and refusal paths, through the resolver with API Gateway REST
proxy events, on the real database (the API's row-level-security connection)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.api.conftest import DAILY, NOW, Caller, new_schedule
from tests.support import ListPublisher
from timekeeper.db.connection import connect
from timekeeper.schedules import service

# ----------------------------------------------------------------------------- create


def test_create_returns_201_with_the_schedule_and_its_first_due_instant(call):
    # Given a valid body
    # When it is posted
    reply = call("POST", "/schedules", new_schedule())
    # Then the schedule exists, active, due at the next 02:30 New York time (07:30 UTC)
    assert reply.status == 201
    body = reply.body
    assert reply.headers["location"] == f"/schedules/{body['id']}"
    assert body["status"] == "active" and body["definition_version"] == 1
    assert body["next_due_at"] == "2027-03-02T07:30:00Z"
    assert body["timezone"] == "America/New_York" and body["recurrence"] == DAILY
    assert body["warnings"] == []


def test_create_paused_has_no_due_instant(call):
    reply = call("POST", "/schedules", new_schedule(active=False))
    assert reply.status == 201
    assert reply.body["status"] == "paused" and reply.body["next_due_at"] is None


def test_create_returns_the_rules_warnings(call):
    # A cron day 31 skips short months (POSIX meaning): valid, with a warning
    reply = call("POST", "/schedules", new_schedule(recurrence={"cron": "0 9 31 * *", "timezone": "UTC"}))
    assert reply.status == 201
    assert reply.body["warnings"] and "31" in reply.body["warnings"][0]


@pytest.mark.parametrize(("recurrence", "field"), [
    ({"cron": "99 * * * *", "timezone": "UTC"}, "recurrence.cron"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "recurrence.timezone"),
    ({"calendar": {"frequency": "daily", "times": ["25:00"]}, "timezone": "UTC"}, "recurrence.calendar.times[0]"),
    ({"interval": {"minutes": 0}, "anchor": "2027-01-01T00:00:00Z"}, "recurrence.interval.minutes"),
    ({}, "recurrence"),
    ({"cron": "0 9 * * *", "timezone": None}, "recurrence.timezone"),
])
def test_create_with_an_invalid_recurrence_is_422_naming_the_field(call, recurrence, field):
    # When the rule does not validate
    reply = call("POST", "/schedules", new_schedule(recurrence=recurrence))
    # Then 422 with the field and the reason, and nothing was created
    assert reply.status == 422
    assert reply.body["code"] == "invalid_recurrence"
    assert reply.body["field"] == field
    assert reply.body["message"]
    assert call("GET", "/schedules").body["items"] == []


@pytest.mark.parametrize(("body", "field"), [
    (new_schedule(work_kind="mail.everyone"), "work_kind"),
    (new_schedule(owner="payroll"), "owner"),
    (new_schedule(name="x" * 201), "name"),
    (new_schedule(name="nul\x00byte"), "name"),
    (new_schedule(active="yes"), "active"),
    (new_schedule(subject_id="not-a-uuid"), "subject_id"),
    (new_schedule(colour="red"), "colour"),
    ({"owner": "accounting", "recurrence": DAILY}, "work_kind"),
])
def test_create_with_an_invalid_body_is_422_naming_the_field(call, body, field):
    reply = call("POST", "/schedules", body)
    assert reply.status == 422
    assert reply.body["code"] == "validation_error"
    assert reply.body["field"] == field


def test_create_accepts_only_the_owners_registered_work_kinds(call):
    # Every accounting work kind can be scheduled (the document lists them); the two that
    # need a subject are refused for the missing subject only, never for the kind
    for kind in ("reconciliation.sweep", "billing.prepare"):
        assert call("POST", "/schedules", new_schedule(work_kind=kind)).status == 201
    for kind in ("batch.roll", "batch.auto_close"):
        reply = call("POST", "/schedules", new_schedule(work_kind=kind))
        assert (reply.status, reply.body["field"]) == (422, "subject_id")


@pytest.mark.parametrize(("raw", "headers", "status", "code"), [
    ("{not json", None, 422, "validation_error"),
    (None, None, 422, "validation_error"),
    ("owner=accounting", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
    ("--x", {"Content-Type": "multipart/form-data"}, 415, "unsupported_media_type"),
])
def test_create_with_a_body_that_is_not_json_is_refused(call, raw, headers, status, code):
    reply = call("POST", "/schedules", raw, headers=headers)
    assert reply.status == status
    assert reply.body["code"] == code
    if status == 422:
        assert reply.body["field"] == "body"


# ------------------------------------------------------------------------------- list


def test_list_filters_by_owner_and_status(call):
    # Given an active and a paused schedule
    active = call("POST", "/schedules", new_schedule(name="a")).body
    paused = call("POST", "/schedules", new_schedule(name="p", active=False)).body
    # Then each filter returns its own
    assert [s["id"] for s in call("GET", "/schedules?status=active").body["items"]] == [active["id"]]
    assert [s["id"] for s in call("GET", "/schedules?status=paused").body["items"]] == [paused["id"]]
    assert len(call("GET", "/schedules?owner=accounting").body["items"]) == 2
    assert call("GET", "/schedules?status=disabled").body["items"] == []


def test_list_pages_with_a_cursor_oldest_first(call, clock_now):
    # Given five schedules created a minute apart
    ids = []
    for i in range(5):
        clock_now["now"] = NOW + timedelta(minutes=i)
        ids.append(call("POST", "/schedules", new_schedule(name=f"s{i}")).body["id"])
    # When listed two at a time
    seen, cursor, pages = [], None, 0
    while True:
        reply = call("GET", "/schedules?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert reply.status == 200
        seen += [s["id"] for s in reply.body["items"]]
        pages += 1
        cursor = reply.body["next_cursor"]
        if cursor is None:
            break
    # Then every schedule appears once, in creation order, over three pages
    assert seen == ids and pages == 3


def test_list_with_schedules_created_in_the_same_instant_pages_by_id(call):
    ids = sorted(call("POST", "/schedules", new_schedule()).body["id"] for _ in range(3))
    first = call("GET", "/schedules?limit=2").body
    second = call("GET", f"/schedules?limit=2&cursor={first['next_cursor']}").body
    assert [s["id"] for s in first["items"] + second["items"]] == ids
    assert second["next_cursor"] is None


@pytest.mark.parametrize(("query", "field"), [
    ("cursor=bogus", "cursor"), ("limit=0", "limit"), ("limit=201", "limit"), ("status=deleted", "status"),
    ("owner=payroll", "owner"), ("stauts=active", "stauts"),
])
def test_list_with_invalid_parameters_is_422(call, query, field):
    reply = call("GET", f"/schedules?{query}")
    assert reply.status == 422
    assert reply.body["field"] == field


# -------------------------------------------------------------------------------- get


def test_get_shows_the_latest_run_the_next_five_occurrences_and_the_history(call, db_url, clock_now):
    # Given a New York 02:30 daily schedule created before the spring gap, with a manual run
    clock_now["now"] = datetime(2027, 3, 11, 12, 0, tzinfo=UTC)
    schedule = call("POST", "/schedules", new_schedule()).body
    run_id = call("POST", f"/schedules/{schedule['id']}/run").body["run_id"]
    # When it is read
    reply = call("GET", f"/schedules/{schedule['id']}")
    # Then the next five occurrences are in UTC and New York time; 2027-03-14 02:30 does not
    # exist and runs at 03:30 EDT (07:30 UTC), keeping its date
    assert reply.status == 200
    upcoming = reply.body["next_occurrences"]
    assert [o["at"] for o in upcoming] == ["2027-03-12T07:30:00Z", "2027-03-13T07:30:00Z", "2027-03-14T07:30:00Z",
                                           "2027-03-15T06:30:00Z", "2027-03-16T06:30:00Z"]
    assert upcoming[0]["local"] == "2027-03-12T02:30:00-05:00"
    assert upcoming[2] == {"at": "2027-03-14T07:30:00Z", "local": "2027-03-14T03:30:00-04:00",
                           "local_date": "2027-03-14", "local_time": "02:30", "timezone": "America/New_York",
                           "shifted": True, "repeated": False, "skipped": False, "window_end": None, "due_at": None}
    # And the latest run and the history name the manual run and who asked for it
    assert reply.body["latest_run"]["id"] == run_id
    assert reply.body["latest_run"]["trigger"] == "manual" and reply.body["latest_run"]["state"] == "queued"
    assert reply.body["latest_run"]["requested_by"] == "user-1"
    assert [e["kind"] for e in reply.body["history"]["events"]] == ["run_requested", "created"]


def test_get_hides_the_text_of_an_unexpected_fault(call, db_url, caller):
    # Given a run settled failed by an unexpected error whose text quotes SQL
    schedule = call("POST", "/schedules", new_schedule()).body
    run_id = call("POST", f"/schedules/{schedule['id']}/run").body["run_id"]
    secret = 'psycopg.errors.SyntaxError: syntax error at "SELECT password FROM users"'
    with connect(db_url) as owner:
        from timekeeper.schedules.settlement import settle_run

        with owner.transaction():
            settle_run(owner, run_id=run_id, state="failed", outcome_code="unexpected_error", error=secret, now=NOW,
                       failure_threshold=5)
    # When the schedule is read
    reply = call("GET", f"/schedules/{schedule['id']}")
    # Then neither the run nor its history event shows the text
    assert reply.status == 200
    assert "SELECT" not in str(reply.body) and "psycopg" not in str(reply.body)
    assert reply.body["latest_run"]["state"] == "failed"
    assert "unexpectedly" in reply.body["latest_run"]["error"]


def test_get_of_an_unknown_schedule_is_404_and_a_malformed_id_422(call):
    assert call("GET", f"/schedules/{uuid.uuid4()}").status == 404
    reply = call("GET", "/schedules/not-a-uuid")
    assert reply.status == 422 and reply.body["field"] == "schedule_id"


def test_a_paused_schedule_has_no_next_occurrences(call):
    schedule = call("POST", "/schedules", new_schedule(active=False)).body
    assert call("GET", f"/schedules/{schedule['id']}").body["next_occurrences"] == []


# ----------------------------------------------------------------------------- update


def test_update_bumps_the_version_and_recomputes_the_next_due_instant(call, clock_now):
    schedule = call("POST", "/schedules", new_schedule()).body
    clock_now["now"] = NOW + timedelta(hours=1)
    reply = call("PATCH", f"/schedules/{schedule['id']}",
                 {"recurrence": {"cron": "0 18 * * *", "timezone": "Europe/London"}, "name": "evening"})
    assert reply.status == 200
    assert reply.body["definition_version"] == 2 and reply.body["name"] == "evening"
    assert reply.body["next_due_at"] == "2027-03-01T18:00:00Z"
    assert reply.body["timezone"] == "Europe/London"


def test_update_with_an_invalid_recurrence_is_422_and_changes_nothing(call):
    schedule = call("POST", "/schedules", new_schedule()).body
    reply = call("PATCH", f"/schedules/{schedule['id']}",
                 {"recurrence": {"calendar": {"frequency": "monthly", "times": ["09:00"]}, "timezone": "UTC"}})
    assert reply.status == 422
    assert reply.body["code"] == "invalid_recurrence" and reply.body["field"].startswith("recurrence.calendar")
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["definition_version"] == 1


@pytest.mark.parametrize(("body", "field"), [({}, "body"), ({"name": None}, "name"), ({"owner": "x"}, "owner")])
def test_update_with_an_invalid_body_is_422(call, body, field):
    schedule = call("POST", "/schedules", new_schedule()).body
    reply = call("PATCH", f"/schedules/{schedule['id']}", body)
    assert reply.status == 422 and reply.body["field"] == field


def test_the_owner_chooses_which_failures_they_hear_of_at_create_and_by_update(call, clock_now):
    # Given a schedule created without a choice, and one created hearing of every failure
    plain = call("POST", "/schedules", new_schedule()).body
    loud = call("POST", "/schedules", {**new_schedule(), "notify_on": "every_failure"})
    # Then the first tells its owner of a streak's first failure, the second of each
    assert plain["notify_on"] == "first_failure"
    assert loud.status == 201 and loud.body["notify_on"] == "every_failure"
    # When the first's owner asks to hear of its pause only
    clock_now["now"] = NOW + timedelta(hours=1)
    reply = call("PATCH", f"/schedules/{plain['id']}", {"notify_on": "pause_only"})
    # Then that is kept, and the definition (its version, its next due instant) is not changed
    assert reply.status == 200 and reply.body["notify_on"] == "pause_only"
    assert (reply.body["definition_version"], reply.body["next_due_at"]) == (1, plain["next_due_at"])
    assert call("GET", f"/schedules/{plain['id']}").body["schedule"]["notify_on"] == "pause_only"


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_an_unknown_failure_notice_choice_is_422_naming_the_field(call, method):
    schedule = call("POST", "/schedules", new_schedule()).body
    if method == "POST":
        reply = call("POST", "/schedules", {**new_schedule(), "notify_on": "never"})
    else:
        reply = call("PATCH", f"/schedules/{schedule['id']}", {"notify_on": "never"})
    assert reply.status == 422 and reply.body["field"] == "notify_on"


def test_update_of_an_unknown_schedule_is_404(call):
    assert call("PATCH", f"/schedules/{uuid.uuid4()}", {"name": "x"}).status == 404


# ---------------------------------------------------------------------- pause, resume


def test_pause_then_resume_from_now_without_backlog(call, clock_now):
    schedule = call("POST", "/schedules", new_schedule()).body
    # When paused (twice: idempotent)
    paused = call("POST", f"/schedules/{schedule['id']}/pause")
    assert paused.status == 200
    assert paused.body["status"] == "paused" and paused.body["pause_reason"] == "paused_by_owner"
    assert paused.body["next_due_at"] is None
    assert call("POST", f"/schedules/{schedule['id']}/pause").body == paused.body
    # And resumed three days later
    clock_now["now"] = NOW + timedelta(days=3)
    resumed = call("POST", f"/schedules/{schedule['id']}/resume")
    # Then it is due at the next occurrence after now: the paused days flood nothing
    assert resumed.status == 200
    assert resumed.body["status"] == "active" and resumed.body["pause_reason"] is None
    assert resumed.body["next_due_at"] == "2027-03-05T07:30:00Z"
    assert resumed.body["consecutive_failures"] == 0


def test_resume_of_a_schedule_whose_saved_rule_no_longer_validates_is_409(call, db_url):
    schedule = call("POST", "/schedules", new_schedule(active=False)).body
    with connect(db_url) as owner:
        owner.execute("UPDATE schedules SET recurrence = '{\"cron\": \"0 9 * * *\", \"timezone\": \"Gone/Zone\"}' "
                      "WHERE id = %s", (schedule["id"],))
    reply = call("POST", f"/schedules/{schedule['id']}/resume")
    assert reply.status == 409
    assert reply.body["code"] == "definition_invalid" and reply.body["field"] == "recurrence"
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["status"] == "paused"


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_and_resume_of_an_unknown_schedule_are_404(call, action):
    assert call("POST", f"/schedules/{uuid.uuid4()}/{action}").status == 404


# ----------------------------------------------------------------------------- delete


def test_delete_is_204_and_the_schedule_disappears_from_reads(call):
    schedule = call("POST", "/schedules", new_schedule()).body
    reply = call("DELETE", f"/schedules/{schedule['id']}")
    assert reply.status == 204 and reply.body is None
    assert call("GET", f"/schedules/{schedule['id']}").status == 410
    assert call("GET", "/schedules").body["items"] == []
    # And deleting again is a 404
    assert call("DELETE", f"/schedules/{schedule['id']}").status == 404


# ---------------------------------------------------------------------------- run now


def test_run_now_is_202_with_the_run_id_and_publishes_after_commit(app, call, publisher, db_url):
    schedule = call("POST", "/schedules", new_schedule()).body
    reply = call("POST", f"/schedules/{schedule['id']}/run")
    assert reply.status == 202
    run_id = reply.body["run_id"]
    assert reply.body == {"run_id": run_id, "schedule_id": schedule["id"], "created": True}
    # The message went to the owner's pipeline, for a committed run
    assert [str(m.run_id) for m in publisher.sent] == [run_id]
    assert app.published_to == ["accounting"]
    with connect(db_url) as owner:
        run = owner.execute("SELECT trigger, state, requested_by, offered_at FROM schedule_runs WHERE id = %s",
                            (run_id,)).fetchone()
    assert run["trigger"] == "manual" and run["state"] == "queued" and run["requested_by"] == "user-1"
    assert run["offered_at"] is not None


def test_run_now_with_the_same_idempotency_key_returns_the_same_run(call, publisher):
    schedule = call("POST", "/schedules", new_schedule()).body
    first = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "k-1"})
    again = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "k-1"})
    other = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "k-2"})
    assert first.status == again.status == other.status == 202
    assert again.body["run_id"] == first.body["run_id"]
    assert first.body["created"] is True and again.body["created"] is False
    assert other.body["run_id"] != first.body["run_id"]
    # One message per run: the repeat published nothing
    assert [str(m.run_id) for m in publisher.sent] == [first.body["run_id"], other.body["run_id"]]
    runs = call("GET", f"/schedules/{schedule['id']}").body["history"]["runs"]
    assert len(runs) == 2


def test_run_now_refused_by_the_queue_is_released_for_the_dispatcher(call, publisher, db_url):
    schedule = call("POST", "/schedules", new_schedule()).body
    publisher.refuse_all = True
    reply = call("POST", f"/schedules/{schedule['id']}/run")
    assert reply.status == 202
    with connect(db_url) as owner:
        run = owner.execute("SELECT offered_at, released_at FROM schedule_runs WHERE id = %s",
                            (reply.body["run_id"],)).fetchone()
    assert run["offered_at"] is None and run["released_at"] is not None
    events = call("GET", f"/schedules/{schedule['id']}").body["history"]["events"]
    assert events[0]["kind"] == "released" and events[0]["reason"] == "publish_refused"


def test_run_now_works_on_a_paused_schedule(call):
    schedule = call("POST", "/schedules", new_schedule(active=False)).body
    assert call("POST", f"/schedules/{schedule['id']}/run").status == 202


@pytest.mark.parametrize("key", ["", "x" * 201, "with space"])
def test_run_now_with_an_invalid_idempotency_key_is_422(call, key):
    schedule = call("POST", "/schedules", new_schedule()).body
    reply = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": key})
    assert reply.status == 422 and reply.body["field"].lower() == "idempotency-key"


def test_run_now_of_an_unknown_schedule_is_404(call, publisher):
    assert call("POST", f"/schedules/{uuid.uuid4()}/run").status == 404
    assert publisher.sent == []


# ------------------------------------------------------------------ errors in general


def test_an_unknown_route_is_404_and_a_wrong_method_405(call):
    reply = call("GET", "/nowhere")
    assert reply.status == 404 and reply.body == {"code": "not_found", "message": "no such route"}
    reply = call("PUT", f"/schedules/{uuid.uuid4()}")
    assert reply.status == 405 and reply.headers["allow"] == "DELETE, GET, PATCH"
    assert reply.body["code"] == "method_not_allowed"


def test_an_unexpected_fault_is_a_generic_500_and_its_text_is_not_logged(db_url, caller, caplog):
    # Given an API whose database adapter fails with a driver error quoting SQL
    import psycopg

    from tests.api.conftest import proxy_event
    from timekeeper.api import ApiAdapters, create_app
    from timekeeper.edge import registries
    from timekeeper.local.lambdas import LambdaContext

    def broken():
        raise psycopg.errors.SyntaxError('syntax error at "SELECT password FROM users"')

    app = create_app(ApiAdapters(connection=broken, publisher_for=lambda _: ListPublisher(),
                                 registry=registries.work_kinds, now=lambda: NOW))
    # When a route needs it
    response = app.resolve(proxy_event("GET", "/schedules", claims=caller.claims()), LambdaContext("api"))
    # Then the caller gets a generic 500 and the log has the type and place, not the text
    assert response["statusCode"] == 500
    assert response["body"] == '{"code":"internal_error","message":"internal error"}'
    logged = " ".join(str(record.__dict__) for record in caplog.records)
    assert "SyntaxError" in logged and "frames" in logged
    assert "SELECT" not in logged


def test_a_database_connection_lost_under_a_request_is_a_503_to_retry_not_a_500(api_conn, caller):
    # Given an API whose connection's socket is cut under the driver (a failover, a network fault)
    import socket

    from tests.api.conftest import proxy_event
    from timekeeper.api import ApiAdapters, create_app
    from timekeeper.edge import registries
    from timekeeper.local.lambdas import LambdaContext

    with socket.fromfd(api_conn.pgconn.socket, socket.AF_UNIX, socket.SOCK_STREAM) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)
    app = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: ListPublisher(),
                                 registry=registries.work_kinds, now=lambda: NOW))
    # When a route reads through it
    response = app.resolve(proxy_event("GET", "/schedules", claims=caller.claims()), LambdaContext("api"))
    # Then the caller is told to retry (503 with Retry-After), not given an internal error
    assert response["statusCode"] == 503
    assert json.loads(response["body"])["code"] == "database_unavailable"
    assert response["multiValueHeaders"]["Retry-After"] == ["1"]


def test_a_workspace_id_that_is_not_a_uuid_is_401(call):
    reply = call("GET", "/schedules", as_=Caller(workspace_id="acme"))
    assert reply.status == 401 and reply.body["code"] == "unauthenticated"


def test_service_objects_created_outside_the_api_are_listed(call, caller, db_url):
    # The API reads what the owner modules' services write (same tables, same rules)
    with connect(db_url) as owner:
        service.create_schedule(owner, workspace_id=caller.workspace_id, owner="accounting",
                                work_kind="billing.prepare", recurrence=DAILY, actor="loader", now=NOW)
    items = call("GET", "/schedules").body["items"]
    assert [s["work_kind"] for s in items] == ["billing.prepare"]


def test_a_run_now_key_belongs_to_one_request_of_one_requester(call, caller, publisher):
    schedule = call("POST", "/schedules", new_schedule()).body
    other = call("POST", "/schedules", new_schedule()).body
    first = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "mine"})
    assert first.status == 202
    # The same request replays the same run
    again = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "mine"})
    assert (again.status, again.body["run_id"], again.body["created"]) == (202, first.body["run_id"], False)
    # The key on another schedule's URL is a conflict naming the key
    refused = call("POST", f"/schedules/{other['id']}/run", headers={"Idempotency-Key": "mine"})
    assert (refused.status, refused.body["code"], refused.body["field"]) == (
        409, "idempotency_key_reused", "Idempotency-Key")
    # Another user of the workspace sending the same key gets a run of their own
    bob = Caller(user_id="bob", workspace_id=caller.workspace_id)
    theirs = call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "mine"}, as_=bob)
    assert theirs.status == 202 and theirs.body["run_id"] != first.body["run_id"] and theirs.body["created"]
