"""What the console's query pages need of the API: a draft's preview read with the
person's own access (row-level security, nothing written), filter values typed in the
workspace's locale (parsed with Babel, a value that does not parse a 422 naming it), the
deliveries that pin a query's versions, and who changed a query last."""

from __future__ import annotations

import uuid
from datetime import date, timedelta

import pytest

from tests.api.conftest import NOW, Caller, seed_member
from timekeeper.db.connection import connect
from timekeeper.platform import directory
from timekeeper.reporting import store
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

#: A draft with a date and a money filter typed as people in Berlin type them.
TYPED = {"entity": "invoices", "columns": ["number", "issue_date", "amount_minor"],
         "filters": [{"column": "issue_date", "op": "lte", "value": "31.12.2026"},
                     {"column": "amount_minor", "op": "gte", "value": "1.234,50"}],
         "sort": [{"column": "number"}]}


def _berlin(db_url: str, **kw) -> Caller:
    """A member (queries:admin) of a new de_DE, EUR, Europe/Berlin workspace."""
    workspace_id = uuid.uuid4()
    with connect(db_url) as conn, conn.transaction():
        directory.create_workspace(conn, workspace_id=workspace_id, name="Berlin", timezone="Europe/Berlin",
                                   currency="EUR", locale="de_DE", now=NOW)
    return seed_member(db_url, workspace_id=workspace_id, **kw)


def _invoices(db_url: str, workspace_id: uuid.UUID, *rows: tuple[str, date, int]) -> None:
    with connect(db_url) as conn, conn.transaction():
        member = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                              "VALUES (%s, 'M1', 'Member', %s) RETURNING id", (workspace_id, date(2026, 1, 1))
                              ).fetchone()["id"]
        for number, issued, amount in rows:
            conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                         "currency, status) VALUES (%s, %s, %s, %s, %s, %s, 'EUR', 'open')",
                         (workspace_id, member, number, issued, issued + timedelta(days=30), amount))


def _counts(db_url: str) -> dict[str, int]:
    with connect(db_url) as conn:
        return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"]
                for t in ("saved_queries", "saved_query_versions", "exports", "invoices", "idempotency_keys")}


@pytest.fixture
def berlin(db_url) -> Caller:
    who = _berlin(db_url)
    _invoices(db_url, who.workspace_id, ("INV-1", date(2026, 12, 31), 123450), ("INV-2", date(2026, 6, 1), 123449),
              ("INV-3", date(2027, 1, 1), 999999), ("INV-4", date(2026, 3, 1), 500000))
    return who


# ------------------------------------------------------------------------------ preview


def test_preview_answers_the_first_rows_typed_in_the_locale_and_writes_nothing(call, berlin, db_url):
    # Given a Berlin workspace with four invoices, two of them on or before 31.12.2026 and >= 1.234,50 EUR
    before = _counts(db_url)
    # When its analyst previews a draft typed as people there type dates and amounts
    reply = call("POST", "/queries/preview", {"definition": TYPED, "values": "locale", "limit": 1}, as_=berlin)
    # Then the first matching row comes back as people read it, and more rows follow
    assert reply.status == 200, reply.body
    assert [c["name"] for c in reply.body["columns"]] == ["number", "issue_date", "amount_minor"]
    assert [c["type"] for c in reply.body["columns"]] == ["text", "date", "money"]
    assert reply.body["rows"] == [["INV-1", "2026-12-31", "1.234,50\xa0€"]]
    assert reply.body["more"] is True
    # And with room for every row, exactly the matching two, and no more
    every = call("POST", "/queries/preview", {"definition": TYPED, "values": "locale", "limit": 50}, as_=berlin)
    assert [r[0] for r in every.body["rows"]] == ["INV-1", "INV-4"] and every.body["more"] is False
    # And nothing was written: no query, version, export or key
    assert _counts(db_url) == before


def test_preview_reads_only_the_callers_workspace(call, berlin, db_url):
    # Given another workspace with invoices of its own
    other = _berlin(db_url)
    _invoices(db_url, other.workspace_id, ("OTHER-1", date(2026, 1, 1), 1))
    # When each previews every invoice
    mine = call("POST", "/queries/preview", {"definition": {"entity": "invoices", "columns": ["number"]}},
                as_=berlin)
    theirs = call("POST", "/queries/preview", {"definition": {"entity": "invoices", "columns": ["number"]}},
                  as_=other)
    # Then each sees its own rows only
    assert sorted(r[0] for r in mine.body["rows"]) == ["INV-1", "INV-2", "INV-3", "INV-4"]
    assert [r[0] for r in theirs.body["rows"]] == ["OTHER-1"]


@pytest.mark.parametrize(("value", "field"), [("31.13.2026", "definition.filters[0].value"),
                                              ("morgen", "definition.filters[0].value")])
def test_a_date_that_does_not_parse_is_a_422_naming_the_filter(call, berlin, value, field):
    draft = {**TYPED, "filters": [{"column": "issue_date", "op": "eq", "value": value}]}
    for target, body in (("/queries/preview", {"definition": draft, "values": "locale"}),
                         ("/queries", {"name": "Q", "definition": draft, "values": "locale"})):
        reply = call("POST", target, body, as_=berlin)
        assert reply.status == 422, reply.body
        assert reply.body["code"] == "definition_invalid" and reply.body["field"] == field
        assert "31.12.2026" in reply.body["message"]


@pytest.mark.parametrize("value", ["1,234.50", "1.234,505", "zwölf"])
def test_an_amount_that_does_not_parse_is_a_422_naming_the_filter(call, berlin, value):
    draft = {**TYPED, "filters": [TYPED["filters"][0], {"column": "amount_minor", "op": "gte", "value": value}]}
    reply = call("POST", "/queries/preview", {"definition": draft, "values": "locale"}, as_=berlin)
    assert reply.status == 422, reply.body
    assert reply.body["code"] == "definition_invalid"
    assert reply.body["field"] == "definition.filters[1].value"


def test_a_list_value_that_does_not_parse_names_its_item(call, berlin):
    draft = {**TYPED, "filters": [{"column": "amount_minor", "op": "between", "value": ["1,00", "x"]}]}
    reply = call("POST", "/queries/preview", {"definition": draft, "values": "locale"}, as_=berlin)
    assert reply.status == 422 and reply.body["field"] == "definition.filters[0].value[1]"


def test_without_locale_values_the_typed_text_is_refused_as_json(call, berlin):
    reply = call("POST", "/queries/preview", {"definition": TYPED}, as_=berlin)
    assert reply.status == 422 and reply.body["field"] == "definition.filters[0].value"


def test_preview_limit_is_at_most_50(call, berlin):
    reply = call("POST", "/queries/preview", {"definition": TYPED, "values": "locale", "limit": 51}, as_=berlin)
    assert reply.status == 422 and reply.body["field"] == "limit"


def test_preview_needs_queries_read_of_token_and_membership(call, db_url):
    body = {"definition": {"entity": "invoices", "columns": ["number"]}}
    no_token_role = seed_member(db_url, token_roles="schedules:read")
    assert call("POST", "/queries/preview", body, as_=no_token_role).status == 403
    no_membership_role = seed_member(db_url, roles=("reports:read",))
    reply = call("POST", "/queries/preview", body, as_=no_membership_role)
    assert reply.status == 403 and reply.body["code"] == "missing_role"


# --------------------------------------------------------------- saving typed values


def test_typed_values_are_saved_in_their_json_form(call, berlin):
    reply = call("POST", "/queries", {"name": "Large 2026 invoices", "definition": TYPED, "values": "locale"},
                 as_=berlin)
    assert reply.status == 201, reply.body
    assert reply.body["version"]["definition"]["filters"] == [
        {"column": "issue_date", "op": "lte", "value": "2026-12-31"},
        {"column": "amount_minor", "op": "gte", "value": 123450}]
    query_id = reply.body["query"]["id"]
    changed = {**TYPED, "filters": [{"column": "amount_minor", "op": "gte", "value": "2.000"}]}
    added = call("POST", f"/queries/{query_id}/versions", {"definition": changed, "values": "locale"}, as_=berlin)
    assert added.status == 201, added.body
    assert added.body["version"]["definition"]["filters"] == [{"column": "amount_minor", "op": "gte", "value": 200000}]
    bad = call("POST", f"/queries/{query_id}/versions",
               {"definition": {**TYPED, "filters": [{"column": "issue_date", "op": "eq", "value": "32.1.2026"}]},
                "values": "locale"}, as_=berlin)
    assert bad.status == 422 and bad.body["field"] == "definition.filters[0].value"


# ------------------------------------------------------------ what the pages show


def test_list_and_detail_say_entity_who_changed_it_last_and_the_workspace_entry(call, berlin, db_url):
    created = call("POST", "/queries", {"name": "Q", "definition": {"entity": "members", "columns": ["email"]}},
                   as_=berlin).body
    editor = seed_member(db_url, workspace_id=berlin.workspace_id)
    query_id = created["query"]["id"]
    call("POST", f"/queries/{query_id}/versions", {"definition": TYPED, "values": "locale"}, as_=editor)
    listed = call("GET", "/queries", as_=berlin).body
    assert listed["timezone"] == "Europe/Berlin"
    item = listed["items"][0]
    assert item["entity"] == "invoices" and item["updated_by"] == editor.user_id
    assert item["created_by"] == berlin.user_id
    detail = call("GET", f"/queries/{query_id}", as_=berlin).body
    assert detail["query"] == item
    assert detail["entry"] == {"locale": "de_DE", "currency": "EUR", "currency_digits": 2,
                               "timezone": "Europe/Berlin"}
    assert call("GET", "/catalogue", as_=berlin).body["entry"] == detail["entry"]


def test_detail_lists_the_deliveries_that_pin_each_version(call, berlin, db_url):
    created = call("POST", "/queries", {"name": "Q", "definition": {"entity": "invoices", "columns": ["number"]}},
                   as_=berlin).body
    query_id = uuid.UUID(created["query"]["id"])
    call("POST", f"/queries/{query_id}/versions",
         {"definition": {"entity": "invoices", "columns": ["number", "status"]}}, as_=berlin)
    with connect(db_url) as conn:
        for name, version in (("Weekly", 1), ("Daily", 2)):
            create_query_schedule(conn, workspace_id=berlin.workspace_id, actor=berlin.user_id, now=NOW,
                                  new=NewQuerySchedule(name=name, recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                                                       source=Source("query", query_id, version), format="csv",
                                                       recipients=[berlin.user_id], subject_template="S",
                                                       body_template="{{ link }}"))
    pins = call("GET", f"/queries/{query_id}", as_=berlin).body["pinned_by"]
    assert [(p["name"], p["version"]) for p in pins] == [("Daily", 2), ("Weekly", 1)]


def test_another_workspaces_query_is_404_on_detail(call, berlin, db_url):
    other = _berlin(db_url)
    with connect(db_url) as conn, conn.transaction():
        query, _ = store.create_query(conn, workspace_id=other.workspace_id, name="Theirs", actor=other.user_id,
                                      now=NOW, definition={"entity": "invoices", "columns": ["number"]})
    assert call("GET", f"/queries/{query.id}", as_=berlin).status == 404


def test_preview_shows_instants_in_the_workspace_zone_with_utc_beside(call, berlin, db_url):
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE invoices SET created_at = '2027-03-01T12:00:00Z' WHERE workspace_id = %s "
                     "AND number = 'INV-1'", (berlin.workspace_id,))
    draft = {"entity": "invoices", "columns": ["number", "created_at"],
             "filters": [{"column": "number", "op": "eq", "value": "INV-1"}]}
    reply = call("POST", "/queries/preview", {"definition": draft}, as_=berlin)
    assert reply.status == 200, reply.body
    assert reply.body["rows"] == [["INV-1", "2027-03-01 13:00 CET (2027-03-01 12:00 UTC)"]]
