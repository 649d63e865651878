"""Identity, roles and tenant isolation: a request without claims is 401, a role that does
not allow the action is 403, and another workspace's schedule is 404 on every route that
takes an id -- and is left untouched."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from tests.api.conftest import Caller, new_schedule
from timekeeper.db.connection import connect

OPENAPI_FILE = Path(__file__).resolve().parents[2] / "shared" / "timekeeper" / "api" / "openapi.json"

SCHEDULE = "00000000-0000-4000-8000-000000000000"

#: Every route, the role it needs, and a body that would be valid.
ROUTES = [
    ("GET", "/schedules", "schedules:read", None),
    ("POST", "/schedules", "schedules:write", new_schedule()),
    ("GET", f"/schedules/{SCHEDULE}", "schedules:read", None),
    ("PATCH", f"/schedules/{SCHEDULE}", "schedules:write", {"name": "renamed"}),
    ("POST", f"/schedules/{SCHEDULE}/pause", "schedules:write", None),
    ("POST", f"/schedules/{SCHEDULE}/resume", "schedules:write", None),
    ("DELETE", f"/schedules/{SCHEDULE}", "schedules:write", None),
    ("POST", f"/schedules/{SCHEDULE}/run", "schedules:run", None),
]
ID_ROUTES = [r for r in ROUTES if SCHEDULE in r[1]]
ALL = {"schedules:read", "schedules:write", "schedules:run"}


def _label(route):
    return f"{route[0]} {route[1].replace(SCHEDULE, '{id}')}"


@pytest.mark.parametrize("route", ROUTES, ids=_label)
@pytest.mark.parametrize("claims", [
    None,
    {"workspace_id": str(uuid.uuid4()), "roles": "schedules:admin"},
    {"principalId": "u", "roles": "schedules:admin"},
    {"principalId": "u", "workspace_id": "not-a-uuid", "roles": "schedules:admin"},
    {"principalId": "", "workspace_id": str(uuid.uuid4()), "roles": "schedules:admin"},
], ids=["no-authorizer", "no-user", "no-workspace", "bad-workspace", "empty-user"])
def test_without_valid_claims_every_route_is_401(call, route, claims):
    method, path, _, body = route
    reply = call(method, path, body, claims=claims)
    assert reply.status == 401
    assert reply.body["code"] == "unauthenticated" and set(reply.body) == {"code", "message"}


@pytest.mark.parametrize("route", ROUTES, ids=_label)
def test_a_role_that_does_not_allow_the_action_is_403(call, route):
    method, path, needed, body = route
    # Given a caller with every role but the one the route needs (and an unknown one)
    caller = Caller(roles=",".join(sorted(ALL - {needed})) + ",billing:admin")
    reply = call(method, path, body, as_=caller)
    assert reply.status == 403
    assert reply.body["code"] == "forbidden" and needed in reply.body["message"]


@pytest.mark.parametrize("route", ROUTES, ids=_label)
def test_the_needed_role_alone_or_admin_is_enough(call, route):
    method, path, needed, body = route
    for roles in (needed, "schedules:admin", f" {needed} , other"):
        reply = call(method, path, body, as_=Caller(roles=roles))
        assert reply.status not in (401, 403), (roles, reply)


@pytest.mark.parametrize("route", ID_ROUTES, ids=_label)
def test_another_workspaces_schedule_is_404_and_untouched(call, db_url, publisher, route):
    # Given a schedule of workspace A
    owner_a = Caller()
    schedule = call("POST", "/schedules", new_schedule(), as_=owner_a).body
    with connect(db_url) as owner:
        before = owner.execute("SELECT * FROM schedules WHERE id = %s", (schedule["id"],)).fetchone()
    # When a user of workspace B (every role) calls the route with its id
    method, path, _, body = route
    reply = call(method, path.replace(SCHEDULE, schedule["id"]), body, as_=Caller(roles="schedules:admin"))
    # Then it is a 404 -- never a 403 -- and nothing changed, nothing was run
    assert reply.status == 404
    assert reply.body == {"code": "not_found", "message": "no such schedule in this workspace"}
    with connect(db_url) as owner:
        after = owner.execute("SELECT * FROM schedules WHERE id = %s", (schedule["id"],)).fetchone()
        runs = owner.execute("SELECT count(*) AS n FROM schedule_runs WHERE schedule_id = %s",
                             (schedule["id"],)).fetchone()["n"]
    assert after == before and runs == 0 and publisher.sent == []
    # And for its own user it is there
    assert call("GET", f"/schedules/{schedule['id']}", as_=owner_a).status == 200


def test_the_list_shows_only_the_callers_workspace(call):
    a, b = Caller(), Caller()
    mine = call("POST", "/schedules", new_schedule(name="a"), as_=a).body["id"]
    call("POST", "/schedules", new_schedule(name="b"), as_=b)
    assert [s["id"] for s in call("GET", "/schedules", as_=a).body["items"]] == [mine]


def test_run_now_idempotency_keys_do_not_cross_schedules(call):
    # The same key on a second schedule never answers the first schedule's run: a key names
    # one request, so the second is refused (409 idempotency_key_reused) and makes no run
    first = call("POST", "/schedules", new_schedule()).body["id"]
    second = call("POST", "/schedules", new_schedule()).body["id"]
    assert call("POST", f"/schedules/{first}/run", headers={"Idempotency-Key": "same"}).status == 202
    refused = call("POST", f"/schedules/{second}/run", headers={"Idempotency-Key": "same"})
    assert (refused.status, refused.body["code"]) == (409, "idempotency_key_reused")
    assert call("GET", f"/schedules/{second}").body["history"]["runs"] == []


def test_a_request_s_workspace_log_key_ends_with_the_request(call, caller):
    # Given the product's log handler writing to a buffer
    import contextvars
    import io
    import json

    from timekeeper import observability as obs

    written = io.StringIO()
    previous = obs.logger.registered_handler.setStream(written)
    try:
        # When a request of the caller's workspace is answered and lines are logged afterwards,
        # and, in a context of its own, a line under another workspace's key
        assert call("GET", "/schedules").status == 200
        obs.logger.info("after the request")

        def elsewhere():
            obs.set_log_keys(workspace_id="another-workspace")
            obs.logger.info("in another context")

        contextvars.copy_context().run(elsewhere)
        obs.logger.info("after the other context")
    finally:
        obs.logger.registered_handler.setStream(previous)
    # Then only the line written inside the other context carries a workspace
    lines = {line["message"]: line for line in map(json.loads, written.getvalue().splitlines())}
    assert "workspace_id" not in lines["after the request"]
    assert lines["in another context"]["workspace_id"] == "another-workspace"
    assert "workspace_id" not in lines["after the other context"]


_SOME_ID = uuid.UUID("0f5b5d3e-8c1a-4d7e-9b2a-3c4d5e6f7a8b")  # (the same on every xdist worker)


def _authenticated_operations() -> list[tuple[str, str]]:
    """Every (method, path) of the published document that requires the authorizer, with
    its path parameters filled with values of the right shape."""
    document = json.loads(OPENAPI_FILE.read_text())
    out = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete") and operation.get("security", document.get(
                    "security")):
                filled = re.sub(r"\{[^}]*(version|number)[^}]*\}", "1", path)
                out.append((method.upper(), re.sub(r"\{[^}]+\}", str(_SOME_ID), filled)))
    return out


@pytest.mark.parametrize(("method", "path"), _authenticated_operations(), ids=lambda v: str(v))
@pytest.mark.parametrize("claims", [
    {"principalId": "al\x00ice", "workspace_id": str(_SOME_ID), "roles": "schedules:admin,queries:admin"},
    None,
], ids=["nul-in-user", "no-authorizer"])
def test_authentication_is_answered_before_the_request_is_validated(call, method, path, claims):
    # Given a request that is wrong in every other way too: an unknown query parameter and
    # a body no route takes
    body = None if method in ("GET", "DELETE") else {"no such field": [1, 2, 3], "owner": 7}
    # When a caller without valid claims sends it
    reply = call(method, f"{path}?no_such_parameter=1", body, claims=claims)
    # Then the answer is the 401, not a 422 that describes the request to a stranger
    assert reply.status == 401, (method, path, reply)
    assert reply.body["code"] == "unauthenticated"
