"""Hostile request bodies and HTTP details: every refusal is a 4xx with the error body
``{"code", "message", "field"?}``, never a 5xx."""

from __future__ import annotations

import json
import os
import uuid
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import Caller, new_schedule


def test_a_body_of_deeply_nested_brackets_is_422(call):
    # Given a body of 100,000 nested brackets (deeper than the JSON parser's recursion)
    body = "[" * 100_000 + "]" * 100_000
    # When it is posted
    reply = call("POST", "/schedules", body)
    # Then it is a 422 with the error body naming the body
    assert reply.status == 422, reply.body
    assert reply.body["code"] == "validation_error"
    assert reply.body["field"] == "body"


def test_an_integer_literal_of_5000_digits_is_422(call):
    body = '{"owner": "accounting", "work_kind": "reconciliation.sweep", "name": ' + "9" * 5000 + "}"
    reply = call("POST", "/schedules", body)
    assert reply.status == 422, reply.body
    assert reply.body["code"] == "validation_error"


def test_a_patch_with_deep_nesting_is_422(call):
    created = call("POST", "/schedules", new_schedule())
    reply = call("PATCH", f"/schedules/{created.body['id']}", '{"name": ' + "[" * 50_000 + "]" * 50_000 + "}")
    assert reply.status == 422, reply.body


def test_the_media_type_is_case_insensitive(call):
    reply = call("POST", "/schedules", new_schedule(), headers={"Content-Type": "APPLICATION/JSON"})
    assert reply.status == 201, reply.body


def test_a_bad_cursor_is_invalid_cursor(call):
    reply = call("GET", "/schedules?cursor=not-a-cursor")
    assert reply.status == 422, reply.body
    assert reply.body["code"] == "invalid_cursor"
    assert reply.body["field"] == "cursor"


# ------------------------------------------------------------------ property: never a 5xx

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)

#: Raw JSON text fragments a hostile client sends (kept as text: some cannot be built by json.dumps).
HOSTILE = st.one_of(
    JSON_VALUES.map(json.dumps),
    st.integers(1, 20_000).map(lambda n: "9" * n),  # integers of up to 20,000 digits
    st.integers(1, 400).map(lambda n: f"1{'0' * n}.5e{n}"),
    st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1e-999", "-0", "null", "true", "[]", "{}",
                     '"\\ud800"', '"\\u0000"', '"\\udfff\\ud800"', '"2027-02-30T25:61:00Z"', '"9999-12-31"',
                     '"00000000-0000-0000-0000-000000000000"', '"' + "\N{PILE OF POO}" * 300 + '"']),
    st.integers(1, 150_000).map(lambda n: "[" * n + "]" * n),  # nesting past the parser's recursion
    st.integers(1, 3_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.text().map(json.dumps),  # any unicode, lone surrogates escaped
    st.integers(0, 1_000_000).map(lambda n: '"' + "x" * n + '"'),  # huge strings
)

VALID_FIELDS = {"owner": '"accounting"', "work_kind": '"reconciliation.sweep"', "name": '"n"',
                "recurrence": json.dumps({"cron": "30 2 * * *", "timezone": "America/New_York"})}
PLACES = ["body", "owner", "work_kind", "name", "subject_id", "active", "recurrence", "recurrence.cron",
          "recurrence.timezone", "recurrence.calendar", "recurrence.interval", "recurrence.anchor"]


def _body_with(place: str, fragment: str) -> str:
    """The valid create body with ``fragment`` (raw JSON text) at ``place`` (or as the whole body)."""
    if place == "body":
        return fragment
    fields = dict(VALID_FIELDS)
    if place.startswith("recurrence."):
        fields["recurrence"] = ('{"cron": "30 2 * * *", "timezone": "America/New_York", "'
                                + place.partition(".")[2] + '": ' + fragment + "}")
    else:
        fields[place] = fragment
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


def _assert_client_error(reply) -> None:
    assert 400 <= reply.status < 500 or reply.status in (200, 201, 202, 204), (reply.status, reply.body)
    if reply.status >= 400:
        assert set(reply.body) <= {"code", "message", "field"} and reply.body["code"] and reply.body["message"]


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(place=st.sampled_from(PLACES), fragment=HOSTILE, method=st.sampled_from(["POST", "PATCH"]))
def test_hostile_json_bodies_are_never_a_server_error(call, place, fragment, method):
    # Given a body with a hostile JSON fragment in one place (or as the whole body)
    body = _body_with(place, fragment)
    target = "/schedules"
    if method == "PATCH":
        created = call("POST", "/schedules", json.loads(_body_with("name", '"target"')))
        target = f"/schedules/{created.body['id']}"
    # When it is sent to a route that takes a body
    reply = call(method, target, body)
    # Then the answer is a success or a 4xx with the error body, never a 5xx
    _assert_client_error(reply)


QUERY_TEXT = st.one_of(st.text(max_size=30), st.integers(1, 6_000).map(lambda n: "9" * n),
                       st.sampled_from(["-1", "1e3", "NaN", "%00", "0x10", "1.5", "", "%ZZ"]))


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(["limit", "cursor", "owner", "status", "history_limit"]), value=QUERY_TEXT)
def test_hostile_query_parameters_are_never_a_server_error(call, name, value):
    # Given a query parameter with a hostile value
    query = urlencode({name: value})
    # When the list and the detail routes are read with it
    listed = call("GET", f"/schedules?{query}")
    detail = call("GET", f"/schedules/{uuid.uuid4()}?{query}")
    # Then neither is a 5xx
    _assert_client_error(listed)
    _assert_client_error(detail)


# ------------------------------------------------- saved queries: the same, never a 5xx

_FILTER = {"column": '"number"', "op": '"eq"', "value": '"INV-1"'}
_SORT = {"column": '"number"', "direction": '"asc"'}
QUERY_PLACES = ["body", "name", "description", "definition", "definition.entity", "definition.columns",
                "definition.filters", "definition.sort", "definition.limit", "definition.extra", "filter.column",
                "filter.op", "filter.value", "filter.extra", "sort.column", "sort.direction"]


def _object(fields: dict[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


def _query_body_with(place: str, fragment: str) -> str:
    """A valid saved-query body (raw JSON text) with ``fragment`` at ``place``."""
    if place == "body":
        return fragment
    where, _, key = place.partition(".")
    filter_, sort = dict(_FILTER), dict(_SORT)
    if where == "filter":
        filter_[key] = fragment
    if where == "sort":
        sort[key] = fragment
    definition = {"entity": '"invoices"', "columns": '["number", "amount_minor"]',
                  "filters": "[" + _object(filter_) + "]", "sort": "[" + _object(sort) + "]", "limit": "10"}
    if where == "definition" and key:
        definition[key] = fragment
    fields = {"name": '"hostile"', "description": '"d"', "definition": _object(definition)}
    if where == "definition" and not key:
        fields["definition"] = fragment
    elif where in ("name", "description"):
        fields[where] = fragment
    return _object(fields)


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(place=st.sampled_from(QUERY_PLACES), fragment=HOSTILE, new_version=st.booleans())
def test_hostile_json_in_saved_query_bodies_is_never_a_server_error(call, member, place, fragment, new_version):
    # Given a saved-query body with a hostile JSON fragment in one place (or as the whole body)
    body = _query_body_with(place, fragment)
    target = "/queries"
    if new_version:
        created = call("POST", "/queries", json.loads(_query_body_with("name", '"target"')), as_=member)
        assert created.status == 201, created.body
        target = f"/queries/{created.body['query']['id']}/versions"
    # When it is posted as a new query or a new version (the caller may do both)
    reply = call("POST", target, body, as_=member)
    # Then the answer is a success or a 4xx with the error body, never a 5xx
    _assert_client_error(reply)


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(["limit", "cursor", "query_id", "version"]), value=QUERY_TEXT)
def test_hostile_saved_query_parameters_are_never_a_server_error(call, member, name, value):
    # Given a hostile value for a query or path parameter of the saved-query routes
    quoted = quote(value, safe="")
    query_id, version = str(uuid.uuid4()), "1"
    if name == "query_id":
        query_id = quoted
    if name == "version":
        version = quoted
    query = urlencode({name: value}) if name in ("limit", "cursor") else ""
    # When each route is called with it
    replies = [call("GET", f"/queries?{query}", as_=member),
               call("GET", f"/queries/{query_id}", as_=member),
               call("GET", f"/queries/{query_id}/versions/{version}", as_=member),
               call("DELETE", f"/queries/{query_id}", as_=member),
               call("POST", f"/queries/{query_id}/versions",
                    {"definition": {"entity": "invoices", "columns": ["number"]}}, as_=member)]
    # Then none is a 5xx
    for reply in replies:
        _assert_client_error(reply)


@pytest.mark.parametrize("place", ["name", "description", "filter.value", "filter.column", "definition.entity",
                                   "sort.column"])
@pytest.mark.parametrize("fragment", ['"\\u0000"', '"a\\ud800b"', '"\\udfff\\ud800"'])
def test_text_postgresql_cannot_hold_is_a_422_naming_the_field(call, member, place, fragment):
    # Given a NUL character or an unpaired surrogate (valid JSON; no UTF-8 form, or not in text/jsonb)
    reply = call("POST", "/queries", _query_body_with(place, fragment), as_=member)
    # Then it is refused naming the field, never a database error
    assert reply.status == 422, reply.body
    expected = {"filter.value": "definition.filters[0].value", "filter.column": "definition.filters[0].column",
                "sort.column": "definition.sort[0].column"}.get(place, place)
    assert reply.body["field"] == expected


# ------------------------------------------------------------ snapshot routes: never a 5xx

#: A staff member of the Platform's snapshot types who can also read their own workspace's periods.
SNAPSHOT_STAFF = Caller(user_id="staff-1", roles="platform:staff,snapshots:read")
#: A workspace of the directory (created by :func:`snapshot_target`), so that a request
#: with its hostile fragment in a harmless place reaches the ledger and the database.
SNAPSHOT_TARGET = uuid.UUID("5a5a5a5a-0000-4000-8000-000000000001")
SNAPSHOT_FIELDS = {"owner": '"platform"', "snapshot_type": '"ar_aging"', "mode": '"backfill"', "period": '"2027-01"',
                   "reason": '"asked for"', "workspace_id": f'"{SNAPSHOT_TARGET}"'}
SNAPSHOT_PLACES = ["body", *SNAPSHOT_FIELDS]


@pytest.fixture
def snapshot_target(db_url) -> uuid.UUID:
    """:data:`SNAPSHOT_TARGET` in the directory (created once per module database)."""
    from tests.api.conftest import NOW
    from timekeeper.db.connection import connect
    from timekeeper.platform.directory import create_workspace, get_workspace

    with connect(db_url) as conn, conn.transaction():
        if get_workspace(conn, SNAPSHOT_TARGET) is None:
            create_workspace(conn, workspace_id=SNAPSHOT_TARGET, name="Hostile", timezone="Europe/Berlin",
                             now=NOW.replace(year=2026))
    return SNAPSHOT_TARGET


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(place=st.sampled_from(SNAPSHOT_PLACES), fragment=HOSTILE)
def test_hostile_snapshot_requests_are_never_a_server_error(call, snapshot_target, place, fragment):
    # Given a staff request with a hostile JSON fragment in one field (or as the whole body)
    fields = dict(SNAPSHOT_FIELDS)
    if place != "body":
        fields[place] = fragment
    body = fragment if place == "body" else "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    # When it is posted
    reply = call("POST", "/snapshots/runs", body, as_=SNAPSHOT_STAFF)
    # Then the answer is a 4xx with the error body (or the one backfill's 201), never a 5xx
    _assert_client_error(reply)


@settings(max_examples=int(os.environ.get("TK_HOSTILE_EXAMPLES", "120")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(["owner", "snapshot_type", "limit"]), value=QUERY_TEXT,
       path_id=st.one_of(st.uuids().map(str), QUERY_TEXT.filter(lambda v: "/" not in v and "?" not in v)))
def test_hostile_snapshot_listing_parameters_are_never_a_server_error(call, name, value, path_id):
    # Given a hostile query parameter (and a hostile workspace id in the path)
    query = urlencode({name: value})
    # When both listings are read with it, as staff and as a reader
    for caller in (SNAPSHOT_STAFF, Caller(roles="snapshots:read")):
        own = call("GET", f"/snapshots/periods?{query}", as_=caller)
        other = call("GET", f"/snapshots/workspaces/{quote(path_id, safe='')}/periods?{query}", as_=caller)
        # Then neither is a 5xx
        _assert_client_error(own)
        _assert_client_error(other)
