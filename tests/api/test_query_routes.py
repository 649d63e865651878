"""The saved-query routes and the catalogue, through the resolver with API Gateway REST
proxy events, on the real database (the API's row-level-security login): token roles,
then the access rule in the database; definitions refused naming the field; user strings
never become SQL."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import timedelta

import pytest

from tests.api.conftest import NOW, OPEN_INVOICES, Caller, new_query, proxy_event, seed_member
from timekeeper.api import errors
from timekeeper.api.app import JsonApiResolver
from timekeeper.db.connection import connect
from timekeeper.local.lambdas import LambdaContext
from timekeeper.platform import directory
from timekeeper.platform.access import Decision, require
from timekeeper.reporting import catalogue

PAID = {"entity": "invoices", "columns": ["number"], "filters": [{"column": "status", "op": "eq", "value": "paid"}]}


def _create(call, who: Caller, **overrides):
    reply = call("POST", "/queries", new_query(**overrides), as_=who)
    assert reply.status == 201, reply.body
    return reply.body


def _routes(query_id: uuid.UUID | str) -> list[tuple[str, str, dict | None]]:
    """Every saved-query route (and the catalogue) with a valid body."""
    return [("GET", "/catalogue", None), ("GET", "/queries", None), ("POST", "/queries", new_query()),
            ("GET", f"/queries/{query_id}", None), ("POST", f"/queries/{query_id}/versions", {"definition": PAID}),
            ("GET", f"/queries/{query_id}/versions/1", None), ("DELETE", f"/queries/{query_id}", None)]


# ------------------------------------------------------------------------- round trip


def test_create_list_get_version_and_delete_round_trip(call, member, clock_now):
    # Given a member creates a query
    reply = call("POST", "/queries", new_query(), as_=member)
    # Then it is 201 with the query and its version 1 (the definition as saved)
    assert reply.status == 201, reply.body
    query, version = reply.body["query"], reply.body["version"]
    assert reply.headers["location"] == f"/queries/{query['id']}"
    assert query["name"] == "Open invoices" and query["description"] == "what is still owed"
    assert query["current_version"] == 1 and query["created_by"] == member.user_id
    assert query["created_at"] == "2027-03-01T12:00:00Z"
    assert version["version"] == 1 and version["query_id"] == query["id"] and version["problem"] is None
    assert version["definition"] == {**OPEN_INVOICES, "filters": [{"column": "status", "op": "eq", "value": "open"}]}

    # When it is listed and read
    listed = call("GET", "/queries", as_=member)
    detail = call("GET", f"/queries/{query['id']}", as_=member)
    # Then the list holds it and the detail shows it with its one version
    assert listed.status == 200 and [q["id"] for q in listed.body["items"]] == [query["id"]]
    assert listed.body["next_cursor"] is None
    assert detail.status == 200 and detail.body["query"] == query and detail.body["versions"] == [version]

    # When a new version is saved later, renaming it
    clock_now["now"] = NOW + timedelta(hours=1)
    added = call("POST", f"/queries/{query['id']}/versions", {"definition": PAID, "name": "Paid invoices"},
                 as_=member)
    # Then it is version 2, current, and the query was renamed (the description kept)
    assert added.status == 201, added.body
    assert added.headers["location"] == f"/queries/{query['id']}/versions/2"
    assert added.body["version"]["version"] == 2 and added.body["query"]["current_version"] == 2
    assert added.body["query"]["name"] == "Paid invoices"
    assert added.body["query"]["description"] == "what is still owed"
    assert added.body["query"]["updated_at"] == "2027-03-01T13:00:00Z"

    # And the detail lists both, newest first; version 1 is unchanged
    detail = call("GET", f"/queries/{query['id']}", as_=member).body
    assert [v["version"] for v in detail["versions"]] == [2, 1]
    assert detail["versions"][1] == version
    assert call("GET", f"/queries/{query['id']}/versions/1", as_=member).body == version
    assert call("GET", f"/queries/{query['id']}/versions/2", as_=member).body["definition"]["entity"] == "invoices"
    assert call("GET", f"/queries/{query['id']}/versions/3", as_=member).status == 404

    # When it is deleted
    deleted = call("DELETE", f"/queries/{query['id']}", as_=member)
    # Then 204, and it is 404 on every route from then on, pinned versions included
    assert deleted.status == 204 and deleted.body is None
    assert call("GET", "/queries", as_=member).body["items"] == []
    for method, target, body in _routes(query["id"])[3:]:
        gone = call(method, target, body, as_=member)
        assert (gone.status, gone.body["code"]) == (404, "not_found"), (method, target)


def test_versions_are_numbered_without_gaps_and_never_change(call, member, conn):
    # Given a query with a first version
    created = _create(call, member)
    query_id = created["query"]["id"]
    # When versions are added, one of them refused by the catalogue in between
    call("POST", f"/queries/{query_id}/versions", {"definition": PAID}, as_=member)
    refused = call("POST", f"/queries/{query_id}/versions",
                   {"definition": {"entity": "invoices", "columns": ["nope"]}}, as_=member)
    third = call("POST", f"/queries/{query_id}/versions", {"definition": {**PAID, "limit": 5}}, as_=member)
    # Then the refusal used no number: the versions are 1, 2, 3
    assert refused.status == 422
    assert third.body["version"]["version"] == 3
    rows = conn.execute("SELECT version, definition FROM saved_query_versions WHERE query_id = %s ORDER BY version",
                        (query_id,)).fetchall()
    assert [r["version"] for r in rows] == [1, 2, 3]
    # And version 1 is still exactly what was saved first
    assert rows[0]["definition"] == created["version"]["definition"]
    # And the API's login may not change a version row (it is granted SELECT and INSERT only)
    assert "UPDATE" not in {r["privilege_type"] for r in conn.execute(
        "SELECT privilege_type FROM information_schema.role_table_grants "
        "WHERE grantee = 'timekeeper_api' AND table_name = 'saved_query_versions'").fetchall()}


def test_the_list_is_keyset_paginated_oldest_first(call, member, clock_now):
    # Given five queries created a minute apart
    ids = []
    for i in range(5):
        clock_now["now"] = NOW + timedelta(minutes=i)
        ids.append(_create(call, member, name=f"q{i}")["query"]["id"])
    # When they are read two at a time
    seen, cursor, pages = [], None, 0
    while True:
        page = call("GET", "/queries?limit=2" + (f"&cursor={cursor}" if cursor else ""), as_=member)
        assert page.status == 200, page.body
        seen += [q["id"] for q in page.body["items"]]
        pages += 1
        cursor = page.body["next_cursor"]
        if cursor is None:
            break
    # Then every query comes once, in creation order, in three pages
    assert seen == ids and pages == 3


def test_a_bad_cursor_and_a_limit_out_of_range_are_422(call, member):
    bad = call("GET", "/queries?cursor=zzz", as_=member)
    assert (bad.status, bad.body["code"], bad.body["field"]) == (422, "invalid_cursor", "cursor")
    for limit in ("0", "201", "x"):
        reply = call("GET", f"/queries?limit={limit}", as_=member)
        assert (reply.status, reply.body["field"]) == (422, "limit")
    unknown = call("GET", "/queries?owner=accounting", as_=member)
    assert (unknown.status, unknown.body["field"]) == (422, "owner")


def test_the_catalogue_lists_entities_columns_and_operators_per_type(call, member):
    reply = call("GET", "/catalogue", as_=member)
    assert reply.status == 200
    body = reply.body
    assert [e["name"] for e in body["entities"]] == list(catalogue.CATALOGUE)
    invoices = {c["name"]: c for c in next(e for e in body["entities"] if e["name"] == "invoices")["columns"]}
    assert invoices["status"] == {"name": "status", "label": "Status", "type": "enum",
                                  "values": ["draft", "open", "paid", "void"], "nullable": False}
    assert invoices["voided_on"]["nullable"] is True and invoices["voided_on"]["values"] is None
    types = {t["name"]: t["operators"] for t in body["types"]}
    assert set(types) == {t.value for t in catalogue.ColumnType}
    for kind, operators in catalogue.OPERATORS.items():
        assert set(types[kind.value]) == {o.value for o in operators}
    assert "contains" not in types["money"] and "between" in types["date"]
    takes = {o["name"]: o["value"] for o in body["operators"]}
    assert (takes["between"], takes["in"], takes["is_null"], takes["eq"]) == ("pair", "list", "none", "one")
    assert body["limits"]["max_limit"] == 5_000_000


# --------------------------------------------------------------------- definitions: 422


@pytest.mark.parametrize(("change", "code", "field"), [
    ({"entity": "ledgers"}, "definition_invalid", "definition.entity"),
    ({"columns": ["number", "colour"]}, "definition_invalid", "definition.columns[1]"),
    ({"filters": [{"column": "colour", "op": "eq", "value": "x"}]}, "definition_invalid",
     "definition.filters[0].column"),
    ({"filters": [{"column": "amount_minor", "op": "contains", "value": "1"}]}, "definition_invalid",
     "definition.filters[0].op"),
    ({"filters": [{"column": "status", "op": "eq", "value": "open"},
                  {"column": "amount_minor", "op": "gt", "value": "100"}]}, "definition_invalid",
     "definition.filters[1].value"),
    ({"filters": [{"column": "issue_date", "op": "between", "value": ["2027-01-01", 5]}]}, "definition_invalid",
     "definition.filters[0].value[1]"),
    ({"filters": [{"column": "number", "op": "eq", "value": "nul\x00byte"}]}, "validation_error",
     "definition.filters[0].value"),  # NUL: refused at the edge, the rule for every body
    ({"sort": [{"column": "colour"}]}, "definition_invalid", "definition.sort[0].column"),
    ({"filters": [{"column": "status", "op": "like", "value": "open"}]}, "validation_error",
     "definition.filters[0].op"),
    ({"sort": [{"column": "number", "direction": "sideways"}]}, "validation_error", "definition.sort[0].direction"),
    ({"limit": 0}, "validation_error", "definition.limit"),
    ({"limit": 5_000_001}, "validation_error", "definition.limit"),
    ({"limit": "ten"}, "validation_error", "definition.limit"),
    ({"colour": "red"}, "validation_error", "definition.colour"),
    ({"filters": [{"column": "number", "op": "eq", "value": "x", "negate": True}]}, "validation_error",
     "definition.filters[0].negate"),
    ({"columns": []}, "validation_error", "definition.columns"),
])
def test_an_invalid_definition_is_422_naming_the_field(call, member, conn, change, code, field):
    # Given a definition with one fault
    definition = {**OPEN_INVOICES, **change}
    # When it is saved as a new query and as a new version of an existing one
    existing = _create(call, member)["query"]["id"]
    created = call("POST", "/queries", new_query(name="refused", definition=definition), as_=member)
    added = call("POST", f"/queries/{existing}/versions", {"definition": definition}, as_=member)
    # Then both are 422 naming the field under "definition", and nothing was saved
    for reply in (created, added):
        assert reply.status == 422, reply.body
        assert (reply.body["code"], reply.body["field"]) == (code, field)
        assert reply.body["message"]
    assert conn.execute("SELECT count(*) AS n FROM saved_queries WHERE name = 'refused'").fetchone()["n"] == 0
    assert call("GET", f"/queries/{existing}", as_=member).body["query"]["current_version"] == 1


@pytest.mark.parametrize(("body", "field"), [
    (new_query(name=""), "name"),
    (new_query(name="x" * 201), "name"),
    (new_query(name="nul\x00byte"), "name"),
    (new_query(name="\ud800"), "name"),
    (new_query(description="d" * 2001), "description"),
    (new_query(colour="red"), "colour"),
    ({"name": "no definition"}, "definition"),
    (new_query(definition="SELECT * FROM invoices"), "definition"),
])
def test_an_invalid_body_is_422_naming_the_field(call, member, body, field):
    reply = call("POST", "/queries", body, as_=member)
    assert reply.status == 422, reply.body
    assert (reply.body["code"], reply.body["field"]) == ("validation_error", field)


def test_a_message_never_echoes_the_callers_input(call, member):
    marker = "ZZ-marker-ZZ"
    for definition in ({**OPEN_INVOICES, "entity": marker}, {**OPEN_INVOICES, "columns": [marker]},
                       {**OPEN_INVOICES, "sort": [{"column": marker}]}):
        reply = call("POST", "/queries", new_query(definition=definition), as_=member)
        assert reply.status == 422 and marker not in reply.body["message"], reply.body


# ------------------------------------------------------------------------- injection

INJECTIONS = ["x'); DROP TABLE saved_queries; --", "\"; DROP TABLE invoices; --", "' OR '1'='1",
              "number\" FROM invoices; --", "$$; DELETE FROM workspaces; $$"]
TABLES = ["workspaces", "users", "workspace_memberships", "invoices", "members", "saved_queries",
          "saved_query_versions", "exports", "schedules"]


def _with(place: str, text: str) -> tuple[dict, str | None]:
    """A create body with ``text`` at ``place``; the field a 422 names (None: it is stored)."""
    definition = copy.deepcopy(OPEN_INVOICES)
    body = new_query(definition=definition)
    field = f"definition.{place}"
    if place in ("name", "description"):
        body[place] = text
        field = None
    elif place == "entity":
        definition["entity"] = text[:64]
    elif place == "columns":
        definition["columns"] = ["number", text[:64]]
        field = "definition.columns[1]"
    elif place.startswith("filters[0]."):
        definition["filters"][0][place.rpartition(".")[2]] = text[:64] if place.endswith("column") else text
    elif place.startswith("sort[0]."):
        definition["sort"][0][place.rpartition(".")[2]] = text[:64]
    return body, field


@pytest.mark.parametrize("place", ["name", "description", "entity", "columns", "filters[0].column",
                                   "filters[0].op", "filters[0].value", "sort[0].column", "sort[0].direction"])
@pytest.mark.parametrize("text", INJECTIONS)
def test_an_injection_in_any_user_string_is_refused_or_stored_verbatim(call, member, conn, place, text):
    # Given the sizes of every table before
    before = {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in TABLES}  # noqa: S608
    body, field = _with(place, text)
    # When a query is created with an injection attempt at one place
    reply = call("POST", "/queries", body, as_=member)
    if place in ("name", "description"):
        # Then a free text is stored verbatim and read back unchanged
        assert reply.status == 201, reply.body
        assert call("GET", f"/queries/{reply.body['query']['id']}", as_=member).body["query"][place] == text
        before["saved_queries"] += 1
        before["saved_query_versions"] += 1
    elif place == "filters[0].value":
        # A filter value on an enum column is refused; on a text column it is a stored string
        assert (reply.status, reply.body["field"]) == (422, "definition.filters[0].value"), reply.body
        text_filter = new_query(definition={**OPEN_INVOICES, "filters": [{"column": "number", "op": "eq",
                                                                          "value": text}]})
        stored = call("POST", "/queries", text_filter, as_=member)
        assert stored.status == 201, stored.body
        assert stored.body["version"]["definition"]["filters"][0]["value"] == text
        before["saved_queries"] += 1
        before["saved_query_versions"] += 1
    else:
        # Then an identifier is refused by the catalogue (or the schema), naming the field
        assert reply.status == 422, reply.body
        assert reply.body["field"] == field
    # And every table is intact, with only the rows the successful calls added
    after = {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in TABLES}  # noqa: S608
    assert after == before


# ------------------------------------------------------------------ tenancy and identity


def test_another_workspaces_query_is_404_on_every_route(call, db_url, member):
    # Given a query of workspace B, created by B's member
    other = seed_member(db_url)
    theirs = _create(call, other, name="B's query")["query"]
    # When A's member (every role) names it on each route
    for method, target, body in _routes(theirs["id"])[3:]:
        reply = call(method, target, body, as_=member)
        # Then it is 404, never 403
        assert (reply.status, reply.body["code"]) == (404, "not_found"), (method, target, reply.body)
    assert call("GET", "/queries", as_=member).body["items"] == []
    # And B's query is untouched
    detail = call("GET", f"/queries/{theirs['id']}", as_=other)
    assert detail.status == 200 and detail.body["query"] == theirs and len(detail.body["versions"]) == 1


def test_without_claims_every_route_is_401(call, member):
    query_id = _create(call, member)["query"]["id"]
    for method, target, body in _routes(query_id):
        reply = call(method, target, body, claims=None)
        assert (reply.status, reply.body["code"]) == (401, "unauthenticated"), (method, target)


@pytest.mark.parametrize(("token_roles", "allowed"), [
    ("queries:read", {"GET"}),
    ("queries:write", {"POST", "DELETE"}),
    ("schedules:admin", set()),
    ("", set()),
    ("queries:admin", {"GET", "POST", "DELETE"}),
])
def test_the_tokens_roles_decide_before_the_database(call, db_url, token_roles, allowed):
    # Given a member whose membership allows everything, with a token of limited roles
    full = seed_member(db_url)
    query_id = _create(call, full)["query"]["id"]
    limited = Caller(user_id=full.user_id, workspace_id=full.workspace_id, roles=token_roles)
    for method, target, body in _routes(query_id):
        reply = call(method, target, body, as_=limited)
        if method in allowed:
            assert reply.status in (200, 201, 204), (method, target, reply.body)
        else:
            # Then what the token does not allow is 403 forbidden, naming the role
            assert (reply.status, reply.body["code"]) == (403, "forbidden"), (method, target, reply.body)
            assert "queries:" in reply.body["message"]


def _other_workspace_member(db_url) -> Caller:
    """A user who is an active member (every role) of ANOTHER workspace, calling with a
    token for a fresh workspace they never joined."""
    elsewhere = seed_member(db_url)
    target = seed_member(db_url)  # the workspace exists and has members, just not this user
    return Caller(user_id=elsewhere.user_id, workspace_id=target.workspace_id, roles="queries:admin")


@pytest.mark.parametrize(("make", "reason"), [
    (lambda db_url: seed_member(db_url, status="deactivated"), "user_deactivated"),
    (lambda db_url: seed_member(db_url, left=True), "left_workspace"),
    (lambda db_url: seed_member(db_url, roles=("reports:write", "schedules:admin")), "missing_role"),
    (lambda db_url: Caller(user_id="nobody-" + uuid.uuid4().hex[:8],
                           workspace_id=seed_member(db_url).workspace_id, roles="queries:admin"), "not_a_member"),
    (_other_workspace_member, "not_a_member"),
])
def test_the_access_rule_refuses_with_its_reason_on_every_route(call, db_url, make, reason):
    # Given a caller whose token allows everything but whom the directory does not
    who = make(db_url)
    who = Caller(user_id=who.user_id, workspace_id=who.workspace_id, roles="queries:admin", enrol=False)
    # and a query of that workspace (made by a member who may)
    colleague = seed_member(db_url, workspace_id=who.workspace_id)
    query_id = _create(call, colleague)["query"]["id"]
    # When the caller uses each route
    for method, target, body in _routes(query_id):
        reply = call(method, target, body, as_=who)
        # Then it is 403 with the rule's reason as the code
        assert (reply.status, reply.body["code"]) == (403, reason), (method, target, reply.body)
    # And nothing changed
    detail = call("GET", f"/queries/{query_id}", as_=colleague).body
    assert detail["query"]["current_version"] == 1
    assert len(call("GET", "/queries", as_=colleague).body["items"]) == 1


def test_a_read_only_membership_may_read_but_not_write(call, db_url):
    # Given a member whose membership grants queries:read only (the token allows both)
    reader = seed_member(db_url, roles=("queries:read",))
    writer = seed_member(db_url, workspace_id=reader.workspace_id, roles=("queries:write",))
    query_id = _create(call, writer)["query"]["id"]
    # Then reading works and writing is missing_role
    for method, target, body in _routes(query_id):
        reply = call(method, target, body, as_=reader)
        if method == "GET":
            assert reply.status == 200, (target, reply.body)
        else:
            assert (reply.status, reply.body["code"]) == (403, "missing_role"), (method, target)


def test_access_is_decided_at_each_call_not_when_the_query_was_made(call, db_url, member):
    # Given a member's query
    query_id = _create(call, member)["query"]["id"]
    assert call("GET", f"/queries/{query_id}", as_=member).status == 200
    # When the member leaves the workspace
    with connect(db_url) as conn, conn.transaction():
        directory.leave_workspace(conn, workspace_id=member.workspace_id, user_id=member.user_id,
                                  now=NOW + timedelta(days=1))
    # Then their next call is refused
    reply = call("GET", f"/queries/{query_id}", as_=member)
    assert (reply.status, reply.body["code"]) == (403, "left_workspace")
    # And when they rejoin and are then deactivated, that is what the rule says
    with connect(db_url) as conn, conn.transaction():
        directory.add_member(conn, workspace_id=member.workspace_id, user_id=member.user_id,
                             roles=["queries:admin"], now=NOW + timedelta(days=2))
        directory.set_user_status(conn, member.user_id, "deactivated", now=NOW + timedelta(days=2))
    assert call("GET", f"/queries/{query_id}", as_=member).body["code"] == "user_deactivated"


def test_the_api_login_sees_users_only_through_a_membership_of_the_entered_workspace(api_conn, db_url):
    # Given a user who is a member of workspace A only
    a = seed_member(db_url)
    b = seed_member(db_url)
    # When the API's login looks the user up with each workspace entered
    from timekeeper.platform.access import QUERIES_READ, check_person

    with api_conn.entered(a.workspace_id), api_conn.transaction():
        in_a = directory.member_with_user(api_conn, workspace_id=a.workspace_id, user_id=a.user_id)
        decision_a = check_person(api_conn, workspace_id=a.workspace_id, user_id=a.user_id, permission=QUERIES_READ)
    with api_conn.entered(b.workspace_id), api_conn.transaction():
        in_b = directory.member_with_user(api_conn, workspace_id=b.workspace_id, user_id=a.user_id)
        decision_b = check_person(api_conn, workspace_id=b.workspace_id, user_id=a.user_id, permission=QUERIES_READ)
    # Then A sees the user and their membership; B sees neither (row-level security)
    assert in_a[0] is not None and in_a[1] is not None and decision_a.allowed
    assert in_b == (None, None) and decision_b.reason == "not_a_member"



@pytest.mark.parametrize(("reason", "status"), [("left_workspace", 403), ("missing_role", 403),
                                                ("user_deactivated", 403), ("not_a_member", 403),
                                                ("not_found", 404)])
def test_access_denied_from_any_route_gets_the_same_answer(reason, status):
    # Given a route (of another feature) that asks the rule through access.require
    app = JsonApiResolver(enable_validation=True)
    errors.install_error_handlers(app)

    @app.get("/thing")
    def thing() -> dict:
        require(Decision(False, reason), "read the thing")
        return {}

    # When it refuses
    response = app.resolve(proxy_event("GET", "/thing", claims=Caller().claims()), LambdaContext(function_name="t"))
    # Then the answer is the saved-query routes' answer for that reason
    body = json.loads(response["body"])
    assert response["statusCode"] == status
    assert body["code"] == (reason if status == 403 else "not_found") and body["message"]
