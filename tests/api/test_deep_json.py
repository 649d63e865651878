"""JSON nested a thousand levels deep or more, as lists and as objects, sent to every route
of the API that takes a body and to every form of the console: each is a 4xx naming the
body (the API) or the field (the rule editor), never a 5xx."""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import quote

import pytest

from tests.api.conftest import ALL_ROLES, Caller, new_schedule, proxy_event
from tests.api.test_console import Browser
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.app import openapi_document
from timekeeper.api.models import NUMBER_PATH_PARAMETERS
from timekeeper.edge import registries
from timekeeper.json_input import MAX_DEPTH
from timekeeper.local.lambdas import LambdaContext
from timekeeper.reporting.links import LinkSigner

#: Every role a token may carry: each route reaches its body whatever role it needs.
EVERY_ROLE = ",".join(sorted({*ALL_ROLES.split(","), "schedules:admin", "queries:read", "queries:write",
                              "queries:admin", "reports:read", "reports:write", "snapshots:read",
                              "workspace:admin", "platform:staff", "notices:own"}))


@pytest.fixture
def app(api_conn, publisher, clock_now):
    """The API with its link signer (the public link routes read their token first)."""
    return create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: publisher,
                                  registry=registries.work_kinds, now=lambda: clock_now["now"],
                                  snapshot_registry=registries.snapshot_types, links=lambda: LinkSigner("s" * 40)))


def _deep(kind: str, levels: int) -> str:
    return "[" * levels + "]" * levels if kind == "list" else '{"a":' * levels + "1" + "}" * levels


DEEP_BODIES = [pytest.param(_deep(kind, levels), id=f"{kind}-{levels}")
               for kind in ("list", "dict") for levels in (1_000, 100_000)]


def _example_path(rule: str) -> str:
    """A path the rule (``/schedules/<schedule_id>``) matches: a UUID, or 1 for a number."""
    return re.sub(r"<([^/>]+)>", lambda m: "1" if m.group(1) in NUMBER_PATH_PARAMETERS else str(uuid.uuid4()),
                  rule)


def _body_routes(app) -> list[tuple[str, str]]:
    routes = {(route.method, route.path) for route in (*app._static_routes, *app._dynamic_routes)}
    return sorted((method, rule) for method, rule in routes if method in ("POST", "PUT", "PATCH", "DELETE"))


def _status(app, method: str, target: str, body: str, who: Caller) -> tuple[int, dict | None]:
    """The API's answer to ``body`` at ``method target``: status and the JSON error body (None for a page)."""
    response = app.resolve(proxy_event(method, target, claims=who.claims(), body=body),
                           LambdaContext(function_name="timekeeper-api"))
    headers = {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers.update({k.lower(): v for k, v in (response.get("headers") or {}).items()})
    is_json = headers.get("content-type", "").startswith("application/json")
    return int(response["statusCode"]), json.loads(response["body"]) if is_json and response.get("body") else None


def _takes_a_body(document: dict, method: str, rule: str) -> bool:
    """Whether the API's ``document`` gives ``method rule`` a request body."""
    path = re.sub(r"<([^/>]+)>", r"{\1}", rule)
    return "requestBody" in document["paths"].get(path, {}).get(method.lower(), {})


@pytest.mark.parametrize("body", DEEP_BODIES)
def test_every_api_route_refuses_deep_json_with_a_422_naming_the_body(app, call, body):
    staff = Caller(roles=EVERY_ROLE)
    routes = _body_routes(app)
    assert ("POST", "/rules/preview") in routes and ("PATCH", "/schedules/<schedule_id>") in routes
    document = openapi_document(app)
    with_body = [(method, rule) for method, rule in routes if _takes_a_body(document, method, rule)]
    assert len(with_body) >= 19
    for method, rule in routes:
        status, error = _status(app, method, _example_path(rule), body, staff)
        assert status < 500, (method, rule, status, error)
        if (method, rule) in with_body:  # a route that reads a body names it (or refuses before reading it)
            assert 400 <= status < 500, (method, rule, status, error)
            if status == 422:
                assert error["field"] == "body", (method, rule, error)
                assert "nested too deeply" in error["message"], (method, rule, error)
    for method, target in (("POST", "/rules/preview"), ("POST", "/schedules"), ("POST", "/query-schedules")):
        reply = call(method, target, body, as_=staff)
        assert reply.status == 422 and reply.body["field"] == "body", reply.body


def test_json_as_deep_as_allowed_is_read_and_one_level_deeper_is_refused(call):
    created = call("POST", "/schedules", new_schedule()).body
    fits = '{"name": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    assert call("PATCH", f"/schedules/{created['id']}", fits).body["field"] == "name"  # read, then refused
    deeper = '{"name": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    assert call("PATCH", f"/schedules/{created['id']}", deeper).body == {
        "code": "validation_error", "message": "the body is not valid JSON (nested too deeply)", "field": "body"}


@pytest.mark.parametrize("body", DEEP_BODIES)
def test_the_rule_editor_refuses_deep_json_on_its_field(console, call, caller, body):
    schedule = call("POST", "/schedules", new_schedule()).body
    browser = Browser(console)
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    for intent in ("preview", "save"):
        reply = browser.request("POST", f"{path}/rule", {"csrf": token, "recurrence": body, "intent": intent})
        assert reply["statusCode"] == 422, reply["body"][-500:]
        assert "recurrence: is not valid JSON (nested too deeply)" in reply["body"]
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["definition_version"] == 1


def test_every_console_form_answers_deep_json_and_too_many_fields_below_500(console, caller):
    browser = Browser(console)
    browser.sign_in(caller, roles=tuple(EVERY_ROLE.split(",")))
    token = browser.csrf("/console/schedules")
    names = ("recurrence", "reason", "date", "user_id", "owner_user_id", "schedule_id", "workspace_id", "job_id",
             "report_id", "month", "queue", "key", "id", "editor", "intent")
    rules = sorted({route.path for route in (*console._static_routes, *console._dynamic_routes)
                    if route.method == "POST"})
    assert "/console/schedules/<schedule_id>/rule" in rules
    for rule in rules:
        path = re.sub(r"<action>", "pause", re.sub(r"<kind>", "schedules", _example_path(rule)))
        fields = {"csrf": token, **{name: _deep("dict", 1_000) for name in names}}
        assert browser.request("POST", path, fields)["statusCode"] < 500, path
        crowded = {"csrf": token, **{f"f{i}": "x" for i in range(60)}}
        assert browser.request("POST", path, crowded)["statusCode"] < 500, path


#: Hostile path and query values: a NUL, deep brackets, an impossible month, a long text, bad UTF-8, a traversal.
HOSTILE = ("%00", quote("[" * 1000), "9999-99", "-1", "x" * 3000, "%F0%28%8C%BC", "..%2F..", str(uuid.uuid4()))
PARAMETERS = ("cursor", "status", "month", "owner", "snapshot_type", "workspace", "before", "user_id", "done", "to",
              "date", "show")


def test_every_console_page_answers_hostile_parameters_below_500(console, caller):
    browser = Browser(console)
    browser.sign_in(caller, roles=tuple(EVERY_ROLE.split(",")))
    assert browser.request("GET", "/console/schedules")["statusCode"] == 200  # signed in: the pages answer
    rules = sorted({route.path for route in (*console._static_routes, *console._dynamic_routes)
                    if route.method == "GET"})
    assert "/console/deliveries/<schedule_id>/invitation" in rules
    refused = []
    for rule in rules:
        for value in HOSTILE:
            path = re.sub(r"<[^>]+>", value, rule)
            for query in ("", "?" + "&".join(f"{name}={value}" for name in PARAMETERS)):
                status = browser.request("GET", path + query)["statusCode"]
                if status >= 500:
                    refused.append((path[:80], query[:40], status))
    assert refused == []
