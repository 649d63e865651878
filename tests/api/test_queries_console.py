"""The console's saved-query pages against the real API resolver and database: the list,
New query with values typed in the workspace's locale (Preview before Save, a value that
does not parse shown on its field with what was typed kept), a query's page with its
versions, the diff of two and the deliveries that pin them, New version prefilled, and
Delete; roles decide what is offered, another workspace's query is not found."""

from __future__ import annotations

import html
import re
import uuid

from tests.api.conftest import NOW
from tests.api.test_console import Browser, _header
from tests.api.test_queries_authoring import _berlin, _invoices
from timekeeper.db.connection import connect
from timekeeper.reporting import store

WRITER = ("queries:read", "queries:write")
READER = ("queries:read",)


def _browser(console, caller, roles):
    browser = Browser(console)
    assert browser.sign_in(caller, roles)["statusCode"] == 303
    return browser


def _hidden(page: str, name: str) -> str:
    return re.search(rf'name="{re.escape(name)}" value="([^"]*)"', page).group(1)


def _form(page: str, **fields: str) -> dict[str, str]:
    return {"csrf": _hidden(page, "csrf"), "key": _hidden(page, "key"), "entity": "invoices", **fields}


TYPED = {"name": "Large 2026 invoices", "col.number": "1", "col.amount_minor": "1",
         "f0.cond": "issue_date|lte", "f0.value": "31.12.2026", "f1.cond": "amount_minor|gte", "f1.value": "1.234,50",
         "s0.column": "number", "s0.dir": "asc"}


def test_an_analyst_previews_saves_versions_compares_and_deletes_a_query(db_url, console):
    from datetime import date

    analyst = _berlin(db_url)
    _invoices(db_url, analyst.workspace_id, ("INV-1", date(2026, 12, 31), 123450), ("INV-2", date(2026, 6, 1), 5))
    browser = _browser(console, analyst, WRITER)
    listing = browser.request("GET", "/console/queries")["body"]
    assert 'href="/console/queries"' in listing and 'href="/console/queries/new"' in listing
    form = browser.request("GET", "/console/queries/new?entity=invoices")["body"]
    assert "31.12.2026" in form and "1.234,50" in form  # the examples are the workspace's locale's
    assert "Dates as the console shows them, <span dir=\"ltr\">2026-12-31</span>" in form
    # operators in words for the column's type only; every column of the entity ticked
    assert ">Amount is at least</option>" in form and ">Issued is on or after</option>" in form
    assert "before / less than" not in form and "Amount is on or after" not in form
    assert re.search(r'name="col\.number" value="1" checked', form)

    # Preview: the matching row, nothing saved
    preview = browser.request("POST", "/console/queries/new", _form(form, action="preview", **TYPED))
    assert preview["statusCode"] == 200
    assert "INV-1" in preview["body"] and "INV-2" not in preview["body"] and "1.234,50" in preview["body"]
    assert 'value="31.12.2026"' in preview["body"]  # what was typed is kept
    with connect(db_url) as conn:
        assert store.list_queries(conn, workspace_id=analyst.workspace_id) == []

    # A date that does not parse: shown on its field, everything typed kept
    bad = browser.request("POST", "/console/queries/new",
                          _form(form, action="save", **{**TYPED, "f0.value": "31.13.2026"}))
    assert bad["statusCode"] == 422
    assert 'id="err-f0-value"' in bad["body"] and 'value="31.13.2026"' in bad["body"]
    assert 'value="1.234,50"' in bad["body"]

    # Save: the query's page
    saved = browser.request("POST", "/console/queries/new", _form(bad["body"], action="save", **TYPED))
    assert saved["statusCode"] == 303
    query_path = _header(saved, "Location").split("?")[0]
    page = browser.request("GET", query_path)["body"]
    assert "Large 2026 invoices" in page and "No delivery reads this query." in page
    # a first version has nothing to compare with (no "version 1 with version 1")
    assert "Only version 1 so far" in page and 'id="d-left"' not in page
    assert "<dt>Current version</dt><dd>1 (Invoices)</dd>" in page
    # The definition in words: labels, operators in words, values in the workspace's locale, money in major units
    words = page[page.index("<h2>What version 1 asks</h2>"):page.index("<h2>Export now</h2>")]
    assert "<dt>Columns</dt><dd><bdi>Number</bdi>, <bdi>Amount</bdi></dd>" in words
    assert "<li><bdi>Issued</bdi> is on or before <bdi>31.12.2026</bdi></li>" in words
    assert "<li><bdi>Amount</bdi> is at least <bdi>1.234,50</bdi></li>" in words
    assert "Number ascending" in words and "amount_minor" not in words.split("<details>")[0]
    assert "<details><summary>The definition as JSON" in words
    # People by name (the user id in a title)
    assert f'<dt>Made by</dt><dd><span title="{analyst.user_id}"><bdi>Member</bdi></span></dd>' in page

    # New version from version 1: prefilled in the locale; then the diff of 1 and 2
    again = browser.request("GET", f"{query_path}/versions/new?from=1")["body"]
    assert 'value="31.12.2026"' in again and 'value="1.234,50"' in again
    version = browser.request("POST", f"{query_path}/versions/new",
                              _form(again, action="save", **{**TYPED, "f1.value": "2.000,00"}))
    assert version["statusCode"] == 303, version["body"]
    page = html.unescape(browser.request("GET", f"{query_path}?left=1&right=2")["body"])
    assert '"value": 123450' in page and '"value": 200000' in page  # the JSON, behind a disclosure
    words = page[page.index('<table class="diff cards">'):page.index("<details><summary>The two definitions")]
    assert words.count('<tr class="replace">') == 1 and "amount_minor" not in words
    assert "<bdi>Amount is at least 1.234,50</bdi>" in words and "<bdi>Amount is at least 2.000,00</bdi>" in words
    assert "<bdi>Invoices</bdi>" in words
    # the list and the versions name the entity by its label
    assert "<td data-label=\"Entity\">Invoices</td>" in browser.request("GET", "/console/queries")["body"]
    assert "Still runs?" in page and "Checks" not in page

    # Delete: the list without it
    page = browser.request("GET", query_path)["body"]
    gone = browser.request("POST", f"{query_path}/delete", {"csrf": _hidden(page, "csrf")})
    assert gone["statusCode"] == 303
    assert "Large 2026 invoices" not in browser.request("GET", "/console/queries")["body"]


def test_a_reader_is_offered_no_new_query_version_or_delete(db_url, console):
    reader = _berlin(db_url, roles=("queries:read",), token_roles="queries:read")
    with connect(db_url) as conn, conn.transaction():
        query, _ = store.create_query(conn, workspace_id=reader.workspace_id, name="Theirs", actor="someone",
                                      now=NOW, definition={"entity": "invoices", "columns": ["number"]})
    browser = _browser(console, reader, READER)
    listing = browser.request("GET", "/console/queries")["body"]
    assert "New query" not in listing and "Theirs" in listing
    page = browser.request("GET", f"/console/queries/{query.id}")["body"]
    assert "New version" not in page and "Delete this query" not in page and "Export now" in page
    assert browser.request("GET", "/console/queries/new")["statusCode"] == 403
    assert browser.request("GET", f"/console/queries/{query.id}/versions/new")["statusCode"] == 403


def test_another_workspaces_query_is_not_found(db_url, console):
    other = _berlin(db_url)
    with connect(db_url) as conn, conn.transaction():
        query, _ = store.create_query(conn, workspace_id=other.workspace_id, name="Theirs", actor="x", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"]})
    browser = _browser(console, _berlin(db_url), WRITER)
    assert browser.request("GET", f"/console/queries/{query.id}")["statusCode"] == 404
    assert browser.request("GET", f"/console/queries/{query.id}/versions/new")["statusCode"] == 404
    page = browser.request("GET", "/console/queries")["body"]
    assert browser.request("POST", f"/console/queries/{query.id}/delete",
                           {"csrf": _hidden(page, "csrf")})["statusCode"] == 404
    assert browser.request("GET", f"/console/exports/{uuid.uuid4()}")["statusCode"] == 404


def test_names_and_definitions_are_escaped_and_bidi_isolated(db_url, console):
    analyst = _berlin(db_url)
    hostile = "<b>x</b>\u202e"
    with connect(db_url) as conn, conn.transaction():
        query, _ = store.create_query(conn, workspace_id=analyst.workspace_id, name=hostile, actor="x", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"], "filters": [
                                          {"column": "number", "op": "contains", "value": "<i>y</i>"}]})
    browser = _browser(console, analyst, WRITER)
    for path in ("/console/queries", f"/console/queries/{query.id}", f"/console/queries/{query.id}/versions/new"):
        page = browser.request("GET", path)["body"]
        assert "<b>x</b>" not in page and "<i>y</i>" not in page, path
        assert "<bdi>&lt;b&gt;x&lt;/b&gt;\u202e</bdi>" in page, path


def test_use_this_entity_ticks_all_of_its_columns(db_url, console):
    analyst = _berlin(db_url)
    browser = _browser(console, analyst, WRITER)
    form = browser.request("GET", "/console/queries/new")["body"]
    # the columns ticked for the entity shown before do not carry over: the new entity's all are
    fresh = browser.request("POST", "/console/queries/new",
                            _form(form, action="entity", name="Kept name", **{"col.number": "1"}))["body"]
    ticked = re.findall(r'name="col\.([a-z_]+)" value="1" checked', fresh)
    assert {"number", "amount_minor", "issue_date"} <= set(ticked) and 'value="Kept name"' in fresh
