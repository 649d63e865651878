"""The membership rule every authenticated route passes: the token's user must be an
active, current member of the token's workspace in the directory, whatever issuer signed
the token and whatever roles it carries. A token whose workspace claim names another
tenant's workspace (an identity provider that let the person write the claim, a
misconfigured mapping) is a 403 with the API's error body on every route, before the route
reads anything, never that tenant's data.

The routes come from the resolver's own route table, so a route added later is checked
without touching this file; only the public (signed-link) routes are exempt, and their
list is pinned here."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest

from tests.api.conftest import ALL_ROLES, NOW, Caller, new_schedule, proxy_event, seed_member
from timekeeper.api import ApiAdapters, create_app
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext

#: Every token role the API knows: a refusal below is never for a missing role.
EVERY_ROLE = ",".join([ALL_ROLES, "schedules:admin", "queries:read", "queries:write", "queries:admin",
                       "reports:read", "reports:write", "snapshots:read", "workspace:admin", "platform:staff"])
#: The routes that take no bearer token: their signed link is the credential.
PUBLIC = {("GET", "/downloads/<token>"), ("POST", "/downloads/<token>"), ("GET", "/opt-outs/<token>"),
          ("POST", "/opt-outs/<token>"), ("GET", "/openapi.json")}


def authenticated_routes(app) -> list[tuple[str, str]]:
    """Every (method, Powertools rule) of the resolver but the public ones."""
    routes = {(route.method.upper(), route.path) for route in app._static_routes + app._dynamic_routes}
    assert {(m, r) for m, r in routes if (m, r) in app.public} == PUBLIC
    return sorted(routes - PUBLIC)


def concrete(rule: str, values: dict[str, str]) -> str:
    """``rule`` with each ``<name>`` replaced by ``values[name]`` (a fresh UUID by default)."""
    return re.sub(r"<([^>]+)>", lambda m: values.get(m.group(1), str(uuid.uuid4())), rule)


def _send(app, method: str, path: str, who: Caller, body: Any = None) -> tuple[int, dict, dict]:
    event = proxy_event(method, path, claims=who.claims(), body=body)
    response = app.resolve(event, LambdaContext(function_name="timekeeper-api"))
    headers = {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers.update({k.lower(): v for k, v in (response.get("headers") or {}).items()})
    return response["statusCode"], json.loads(response["body"]) if response.get("body") else {}, headers


@pytest.fixture
def tenant(call):
    """Another tenant's workspace with a schedule in it: ``(workspace id, schedule id)``."""
    owner = Caller(user_id=f"owner-{uuid.uuid4().hex[:8]}", roles=ALL_ROLES)
    created = call("POST", "/schedules", new_schedule(), as_=owner)
    assert created.status == 201, created.body
    return owner.workspace_id, created.body["id"]


def _refused_everywhere(app, who: Caller, schedule_id: str, code: str) -> None:
    values = {"schedule_id": schedule_id, "workspace_id": str(who.workspace_id), "version": "1",
              "closed_on": "2027-03-02", "queue": "accounting", "user_id": "someone"}
    answers = {}
    for method, rule in authenticated_routes(app):
        body = {} if method in ("POST", "PATCH", "PUT") else None
        status, answer, headers = _send(app, method, concrete(rule, values), who, body)
        answers[(method, rule)] = (status, answer.get("code"))
        if status == 403:
            assert set(answer) <= {"code", "message", "field"} and answer["message"], (method, rule, answer)
            assert headers["content-type"] == "application/json", (method, rule)
    assert {route: answer for route, answer in answers.items() if answer != (403, code)} == {}


def test_a_token_naming_another_tenants_workspace_is_refused_on_every_route(app, tenant, db_url):
    # A person who administers a workspace of their own, with every role in their token,
    # signs in with a token whose workspace claim names another tenant's workspace
    workspace, schedule_id = tenant
    own = seed_member(db_url, roles=("workspace:admin",), token_roles=EVERY_ROLE)
    intruder = Caller(user_id=own.user_id, workspace_id=workspace, roles=EVERY_ROLE, enrol=False)
    _refused_everywhere(app, intruder, schedule_id, "not_a_member")
    # Their own workspace's token still passes the rule
    status, _, _ = _send(app, "GET", "/schedules", Caller(user_id=own.user_id, workspace_id=own.workspace_id,
                                                          roles=EVERY_ROLE, enrol=False))
    assert status == 200


@pytest.mark.parametrize("left, status, code", [(True, "active", "left_workspace"),
                                                (False, "deactivated", "user_deactivated")])
def test_a_person_who_left_or_was_deactivated_is_refused_on_every_route(app, tenant, db_url, left, status, code):
    workspace, schedule_id = tenant
    former = seed_member(db_url, workspace_id=workspace, roles=("workspace:admin",), status=status, left=left,
                         token_roles=EVERY_ROLE)
    _refused_everywhere(app, Caller(user_id=former.user_id, workspace_id=workspace, roles=EVERY_ROLE, enrol=False),
                        schedule_id, code)


def test_a_workspace_the_directory_does_not_hold_is_refused(app):
    nobody = Caller(user_id="user-1", workspace_id=uuid.uuid4(), roles=EVERY_ROLE, enrol=False)
    _refused_everywhere(app, nobody, str(uuid.uuid4()), "not_a_member")


def test_the_membership_rule_comes_before_validation_and_unknown_parameters(app, tenant, db_url):
    workspace, schedule_id = tenant
    own = seed_member(db_url, roles=("workspace:admin",), token_roles=EVERY_ROLE)
    intruder = Caller(user_id=own.user_id, workspace_id=workspace, roles=EVERY_ROLE, enrol=False)
    for method, path, body in (("POST", "/schedules", "{not json"), ("GET", "/schedules?bogus=1", None),
                               ("PATCH", f"/schedules/{schedule_id}", {"recurrence": 7}),
                               ("GET", "/no-such-route", None)):
        status, answer, _ = _send(app, method, path, intruder, body)
        assert (status, answer["code"]) == (403, "not_a_member"), (method, path)


def test_a_database_that_does_not_answer_at_the_check_is_a_503_not_a_fault(db_url):
    from timekeeper.api.db import API_ROLE, connect_api
    from timekeeper.db.connection import login_url

    closed = connect_api(login_url(db_url, API_ROLE))
    closed.close()
    app = create_app(ApiAdapters(connection=lambda: closed, publisher_for=lambda _: None,
                                 registry=registries.work_kinds, now=lambda: NOW,
                                 snapshot_registry=registries.snapshot_types))
    status, answer, headers = _send(app, "GET", "/schedules", Caller(roles=EVERY_ROLE, enrol=False))
    assert (status, answer["code"], headers["retry-after"]) == (503, "database_unavailable", "1")
