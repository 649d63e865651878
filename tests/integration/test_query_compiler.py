"""Saved-query definitions: catalogue checks name the field; compiled statements return
exactly the workspace's matching rows from a real PostgreSQL; user strings never become SQL."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID, uuid4

import pytest

from timekeeper.platform.directory import create_workspace
from timekeeper.reporting import catalogue
from timekeeper.reporting.compiler import compile_query
from timekeeper.reporting.definition import InvalidDefinition, check_definition

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
HOSTILE = ["x'); DROP TABLE invoices; --", "%' OR '1'='1", "\\", "_%", "\"; SELECT pg_sleep(5); --", "'"]


@pytest.fixture(scope="module")
def tenants(db_url):
    """Two workspaces with three members and five invoices in A, one member and invoice in B."""
    from timekeeper.db.connection import connect

    with connect(db_url) as conn, conn.transaction():
        a = create_workspace(conn, name="A", timezone="Europe/Berlin", currency="EUR", now=NOW).id
        b = create_workspace(conn, name="B", timezone="America/New_York", now=NOW).id
        members = {}
        for ws, number, name in [(a, "M1", "Ada Lovelace"), (a, "M2", "Grace 100% Hopper"), (a, "M3", "Alan_Turing"),
                                 (b, "M1", "Ada Lovelace")]:
            members[(ws, number)] = conn.execute(
                "INSERT INTO members (workspace_id, member_number, display_name, joined_on) VALUES (%s, %s, %s, %s) "
                "RETURNING id", (ws, number, name, date(2026, 1, 1))).fetchone()["id"]
        rows = [(a, "M1", "INV-1", date(2027, 1, 5), 1000, "open"), (a, "M1", "INV-2", date(2027, 1, 20), 2500, "paid"),
                (a, "M2", "INV-3", date(2027, 2, 1), 700, "open"), (a, "M3", "INV-4", date(2027, 2, 2), 0, "draft"),
                (a, "M3", "INV-5", date(2027, 2, 3), 9900, "open"), (b, "M1", "INV-1", date(2027, 1, 5), 5, "open")]
        for ws, member, number, issued, amount, status in rows:
            conn.execute(
                "INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, "
                "status) VALUES (%s, %s, %s, %s, %s + 30, %s, 'EUR', %s)",
                (ws, members[(ws, member)], number, issued, issued, amount, status))
    return a, b


def run(conn, definition, workspace_id: UUID) -> list[dict]:
    compiled = compile_query(definition, workspace_id=workspace_id)
    return conn.execute(compiled.statement, compiled.params).fetchall()


def test_filters_sort_and_joins_return_the_workspaces_matching_rows(conn, tenants):
    a, b = tenants
    rows = run(conn, {"entity": "invoices", "columns": ["number", "member_name", "amount_minor"],
                      "filters": [{"column": "status", "op": "eq", "value": "open"},
                                  {"column": "amount_minor", "op": "gte", "value": 700}],
                      "sort": [{"column": "amount_minor", "direction": "desc"}]}, a)
    assert rows == [{"number": "INV-5", "member_name": "Alan_Turing", "amount_minor": 9900},
                    {"number": "INV-1", "member_name": "Ada Lovelace", "amount_minor": 1000},
                    {"number": "INV-3", "member_name": "Grace 100% Hopper", "amount_minor": 700}]
    assert [r["number"] for r in run(conn, {"entity": "invoices", "columns": ["number"]}, b)] == ["INV-1"]


@pytest.mark.parametrize(("op", "value", "expected"), [
    ("between", ["2027-01-20", "2027-02-02"], ["INV-2", "INV-3", "INV-4"]),
    ("lt", "2027-01-20", ["INV-1"]),
    ("ne", "2027-02-03", ["INV-1", "INV-2", "INV-3", "INV-4"]),
])
def test_date_operators(conn, tenants, op, value, expected):
    rows = run(conn, {"entity": "invoices", "columns": ["number"], "filters": [
        {"column": "issue_date", "op": op, "value": value}], "sort": [{"column": "number"}]}, tenants[0])
    assert [r["number"] for r in rows] == expected


def test_text_matching_treats_wildcards_as_plain_characters(conn, tenants):
    a = tenants[0]
    contains = run(conn, {"entity": "members", "columns": ["member_number"],
                          "filters": [{"column": "display_name", "op": "contains", "value": "100%"}]}, a)
    assert [r["member_number"] for r in contains] == ["M2"]
    underscore = run(conn, {"entity": "members", "columns": ["member_number"],
                            "filters": [{"column": "display_name", "op": "contains", "value": "_"}]}, a)
    assert [r["member_number"] for r in underscore] == ["M3"]
    prefix = run(conn, {"entity": "members", "columns": ["member_number"], "sort": [{"column": "member_number"}],
                        "filters": [{"column": "display_name", "op": "starts_with", "value": "a"}]}, a)
    assert [r["member_number"] for r in prefix] == ["M1", "M3"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_strings_are_values_never_sql(conn, tenants, hostile):
    a = tenants[0]
    for op in ("eq", "contains", "starts_with"):
        assert run(conn, {"entity": "invoices", "columns": ["number"],
                          "filters": [{"column": "number", "op": op, "value": hostile}]}, a) == []
    assert run(conn, {"entity": "invoices", "columns": ["number"],
                      "filters": [{"column": "number", "op": "in", "value": [hostile, "INV-1"]}]}, a) == [
        {"number": "INV-1"}]
    assert conn.execute("SELECT count(*) AS n FROM invoices").fetchone()["n"] == 6


@pytest.mark.parametrize("where", ["entity", "columns", "filters.column", "sort.column"])
def test_hostile_identifiers_are_refused_by_the_catalogue(where):
    definition = {"entity": "invoices", "columns": ["number"], "filters": [], "sort": []}
    bad = 'number" FROM invoices; DROP TABLE invoices; --'
    if where == "entity":
        definition["entity"] = "invoices t; --"
        field = "entity"
    elif where == "columns":
        definition["columns"] = [bad[:60]]
        field = "columns[0]"
    elif where == "filters.column":
        definition["filters"] = [{"column": bad[:60], "op": "eq", "value": "x"}]
        field = "filters[0].column"
    else:
        definition["sort"] = [{"column": bad[:60]}]
        field = "sort[0].column"
    with pytest.raises(InvalidDefinition) as caught:
        compile_query(definition, workspace_id=uuid4())
    assert caught.value.field == field


@pytest.mark.parametrize(("definition", "field"), [
    ({"entity": "nope", "columns": ["x"]}, "entity"),
    ({"entity": "invoices", "columns": []}, "columns"),
    ({"entity": "invoices", "columns": ["number", "number"]}, "columns[1]"),
    ({"entity": "invoices", "columns": ["number"], "limit": 0}, "limit"),
    ({"entity": "invoices", "columns": ["number"], "limit": 10**9}, "limit"),
    ({"entity": "invoices", "columns": ["number"], "extra": 1}, "extra"),
    ({"entity": "invoices", "columns": ["number"], "filters": [{"column": "number", "op": "gt", "value": "a"}]},
     "filters[0].op"),
    ({"entity": "invoices", "columns": ["number"], "filters": [{"column": "number", "op": "like", "value": "a"}]},
     "filters[0].op"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "amount_minor", "op": "eq", "value": "100"}]}, "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "amount_minor", "op": "eq", "value": True}]}, "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "issue_date", "op": "eq", "value": "2027-02-30"}]}, "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "status", "op": "eq", "value": "overdue"}]}, "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "status", "op": "in", "value": ["open", 3]}]}, "filters[0].value[1]"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "issue_date", "op": "between", "value": ["2027-02-01", "2027-01-01"]}]},
     "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "voided_on", "op": "is_null", "value": "x"}]}, "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"], "filters": [{"column": "id", "op": "eq", "value": "zzz"}]},
     "filters[0].value"),
    ({"entity": "invoices", "columns": ["number"],
      "filters": [{"column": "amount_minor", "op": "eq", "value": 2**63}]}, "filters[0].value"),
])
def test_invalid_definitions_name_the_field(definition, field):
    with pytest.raises(InvalidDefinition) as caught:
        check_definition(definition)
    assert caught.value.field == field


def test_a_stored_version_naming_a_dropped_column_fails_to_compile(monkeypatch):
    definition = {"entity": "invoices", "columns": ["number", "voided_on"]}
    compile_query(definition, workspace_id=uuid4())
    invoices = catalogue.CATALOGUE["invoices"]
    trimmed = {k: v for k, v in invoices.columns.items() if k != "voided_on"}
    monkeypatch.setitem(catalogue.CATALOGUE, "invoices",
                        catalogue.Entity(name=invoices.name, label=invoices.label, table=invoices.table,
                                         columns=trimmed, joins=invoices.joins))
    with pytest.raises(InvalidDefinition) as caught:
        compile_query(definition, workspace_id=uuid4())
    assert caught.value.field == "columns[1]"


def test_versions_are_immutable_and_old_versions_stay_runnable(conn, tenants):
    from timekeeper.reporting import store

    a, b = tenants
    with conn.transaction():
        query, v1 = store.create_query(conn, workspace_id=a, name="Open invoices", actor="u1", now=NOW,
                                       definition={"entity": "invoices", "columns": ["number"],
                                                   "filters": [{"column": "status", "op": "eq", "value": "open"}],
                                                   "sort": [{"column": "number"}]})
    later = datetime(2027, 3, 2, tzinfo=UTC)
    query2, v2 = store.add_version(conn, workspace_id=a, query_id=query.id, actor="u2", now=later,
                                   definition={"entity": "invoices", "columns": ["number", "amount_minor"],
                                               "filters": [{"column": "status", "op": "eq", "value": "paid"}]})
    assert (v1.version, v2.version, query2.current_version) == (1, 2, 2)
    pinned = store.get_version(conn, workspace_id=a, query_id=query.id, version=1)
    assert pinned.definition == v1.definition
    assert [r["number"] for r in run(conn, pinned.parsed(), a)] == ["INV-1", "INV-3", "INV-5"]
    assert run(conn, store.get_version(conn, workspace_id=a, query_id=query.id).parsed(), a) == [
        {"number": "INV-2", "amount_minor": 2500}]
    with pytest.raises(store.QueryNotFound):
        store.get_query(conn, workspace_id=b, query_id=query.id)
    with pytest.raises(store.QueryNotFound):
        store.get_version(conn, workspace_id=b, query_id=query.id, version=1)
    with pytest.raises(InvalidDefinition):
        store.add_version(conn, workspace_id=a, query_id=query.id, actor="u2", now=later,
                          definition={"entity": "invoices", "columns": ["nope"]})
    assert store.get_query(conn, workspace_id=a, query_id=query.id).current_version == 2
    store.delete_query(conn, workspace_id=a, query_id=query.id, now=later)
    assert store.list_queries(conn, workspace_id=a) == []
    assert store.get_version(conn, workspace_id=a, query_id=query.id, version=1).version == 1
    with pytest.raises(store.QueryNotFound):
        store.get_version(conn, workspace_id=a, query_id=query.id)


def test_a_checked_definition_checks_and_compiles_again(conn, tenants):
    # A stored version's parsed() is checked once; handing it to the compiler checks it again
    a, _ = tenants
    member = conn.execute("SELECT member_id FROM invoices WHERE workspace_id = %s AND number = 'INV-1'",
                          (a,)).fetchone()["member_id"]
    definition = {"entity": "invoices", "columns": ["number"],
                  "filters": [{"column": "due_date", "op": "gt", "value": "2027-02-10"},
                              {"column": "member_id", "op": "in", "value": [str(member)]}]}
    checked = check_definition(definition)
    assert check_definition(checked) is checked
    assert check_definition(checked.model_dump()) == checked  # converted values check as their JSON would
    assert checked.model_dump(mode="json")["filters"][0]["value"] == "2027-02-10"
    assert [r["number"] for r in run(conn, checked, a)] == ["INV-2"]
