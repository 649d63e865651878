"""Reports: definitions checked against the workspace's saved queries with errors naming
the field, immutable versions, serialized updates, keyset listing, deletion, and no
sight of another workspace's reports or queries."""

from __future__ import annotations

import threading
from datetime import timedelta
from uuid import uuid4

import pytest

from tests.integration.report_helpers import NOW, definition, make_tenant
from timekeeper.db.connection import connect
from timekeeper.reporting import reports, store
from timekeeper.reporting.definition import InvalidDefinition


@pytest.fixture(scope="module")
def tenants(db_url):
    with connect(db_url) as c:
        return make_tenant(c, "a"), make_tenant(c, "b")


def _sections(tenant, *changes):
    base = definition(tenant)
    for index, change in changes:
        base["sections"][index] = {**base["sections"][index], **change}
    return base


@pytest.mark.parametrize(("change", "field"), [
    (lambda t, d: d.update(title=""), "title"),
    (lambda t, d: d.update(sections=[]), "sections"),
    (lambda t, d: d.update(sections=d["sections"] * 7), "sections"),
    (lambda t, d: d.update(extra=1), "extra"),
    (lambda t, d: d["sections"][1].update(display="pie_chart"), "sections[1].display"),
    (lambda t, d: d["sections"][1].pop("label_column"), "sections[1].label_column"),
    (lambda t, d: d["sections"][2].pop("value_column"), "sections[2].value_column"),
    (lambda t, d: d["sections"][0].update(value_column="amount_minor"), "sections[0].value_column"),
    (lambda t, d: d["sections"][0].update(query_version=0), "sections[0].query_version"),
    (lambda t, d: d["sections"][1].update(query_id=str(uuid4())), "sections[1].query_id"),
    (lambda t, d: d["sections"][2].update(query_version=9), "sections[2].query_version"),
    (lambda t, d: d["sections"][1].update(label_column="status"), "sections[1].label_column"),
    (lambda t, d: d["sections"][1].update(value_column="nope"), "sections[1].value_column"),
    (lambda t, d: d["sections"][1].update(value_column="member_name"), "sections[1].value_column"),
])
def test_invalid_definitions_name_the_field(conn, tenants, change, field):
    # Given a valid definition with one thing wrong
    a, _ = tenants
    data = definition(a)
    change(a, data)
    # When it is saved, then the error names the field
    with pytest.raises(InvalidDefinition) as caught:
        reports.create_report(conn, workspace_id=a.workspace_id, name="r", definition=data, actor=a.author, now=NOW)
    assert caught.value.field == field
    assert conn.execute("SELECT count(*) AS n FROM reports WHERE workspace_id = %s AND name = 'r'",
                        (a.workspace_id,)).fetchone()["n"] == 0


def test_another_workspaces_query_is_not_in_this_workspace(conn, tenants):
    # Given B's query named in A's report
    a, b = tenants
    data = _sections(a, (1, {"query_id": str(b.invoices_query)}))
    # Then A cannot save it: the query is not found in A
    with pytest.raises(InvalidDefinition) as caught:
        reports.create_report(conn, workspace_id=a.workspace_id, name="x", definition=data, actor=a.author, now=NOW)
    assert caught.value.field == "sections[1].query_id"


def test_a_deleted_query_is_refused_unless_a_version_of_it_is_pinned(conn, tenants):
    a, _ = tenants
    with conn.transaction():
        query, _ = store.create_query(conn, workspace_id=a.workspace_id, name="gone", actor=a.author, now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"]})
        store.delete_query(conn, workspace_id=a.workspace_id, query_id=query.id, now=NOW)
    unpinned = {"title": "t", "sections": [{"heading": "h", "query_id": str(query.id)}]}
    with pytest.raises(InvalidDefinition) as caught:
        reports.create_report(conn, workspace_id=a.workspace_id, name="x", definition=unpinned, actor=a.author,
                              now=NOW)
    assert caught.value.field == "sections[0].query_id"
    pinned = {"title": "t", "sections": [{"heading": "h", "query_id": str(query.id), "query_version": 1}]}
    report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="x", definition=pinned,
                                      actor=a.author, now=NOW)
    assert report.current_version == 1


def test_versions_are_appended_and_never_changed(conn, tenants):
    # Given a report with version 1
    a, b = tenants
    report, v1 = reports.create_report(conn, workspace_id=a.workspace_id, name="Invoices", definition=definition(a),
                                       actor=a.author, now=NOW)
    # When it is updated twice
    later = NOW + timedelta(hours=1)
    _, v2 = reports.update_report(conn, workspace_id=a.workspace_id, report_id=report.id,
                                  definition=definition(a, "Second"), actor=a.reader, now=later, name="Renamed")
    current, v3 = reports.update_report(conn, workspace_id=a.workspace_id, report_id=report.id,
                                        definition=definition(a, "Third"), actor=a.author, now=later)
    # Then the versions are 1, 2, 3 and the first is as saved
    assert (v1.version, v2.version, v3.version, current.current_version) == (1, 2, 3, 3)
    assert current.name == "Renamed"
    got, version = reports.get_report(conn, workspace_id=a.workspace_id, report_id=report.id)
    assert version.version == 3 and version.parsed().title == "Third"
    assert reports.get_report_version(conn, workspace_id=a.workspace_id, report_id=report.id,
                                      version=1).definition == v1.definition
    assert v1.parsed().title == "Monthly invoices"
    assert [v.version for v in reports.list_report_versions(conn, workspace_id=a.workspace_id,
                                                            report_id=report.id)] == [1, 2, 3]
    # And an invalid update appends nothing
    with pytest.raises(InvalidDefinition):
        reports.update_report(conn, workspace_id=a.workspace_id, report_id=report.id,
                              definition={"title": "t", "sections": []}, actor=a.author, now=later)
    assert reports.get_report(conn, workspace_id=a.workspace_id, report_id=report.id)[0].current_version == 3
    # And B sees none of it
    with pytest.raises(reports.ReportNotFound):
        reports.get_report(conn, workspace_id=b.workspace_id, report_id=report.id)
    with pytest.raises(reports.ReportNotFound):
        reports.update_report(conn, workspace_id=b.workspace_id, report_id=report.id, definition=definition(b),
                              actor=b.author, now=later)
    with pytest.raises(reports.ReportNotFound):
        reports.delete_report(conn, workspace_id=b.workspace_id, report_id=report.id, now=later)
    # And a version row cannot be changed by the API's login
    assert conn.execute("SELECT has_table_privilege('timekeeper_api', 'report_versions', 'UPDATE') AS u"
                        ).fetchone()["u"] is False


def test_concurrent_updates_get_consecutive_versions(db_url, conn, tenants):
    # Given a report
    a, _ = tenants
    report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="busy", definition=definition(a),
                                      actor=a.author, now=NOW)
    results, errors = [], []

    def edit(i: int) -> None:
        try:
            with connect(db_url) as own:
                results.append(reports.update_report(own, workspace_id=a.workspace_id, report_id=report.id,
                                                     definition=definition(a, f"edit {i}"), actor=a.author,
                                                     now=NOW)[1].version)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    # When eight edits race
    threads = [threading.Thread(target=edit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then each got its own version, without gaps
    assert errors == []
    assert sorted(results) == list(range(2, 10))
    assert reports.get_report(conn, workspace_id=a.workspace_id, report_id=report.id)[0].current_version == 9


def test_listing_pages_by_keyset_and_hides_deleted_reports(conn, tenants):
    # Given a fresh workspace with five reports, one deleted
    c = make_tenant(conn, "c")
    made = []
    for i in range(5):
        made.append(reports.create_report(conn, workspace_id=c.workspace_id, name=f"r{i}", definition=definition(c),
                                          actor=c.author, now=NOW + timedelta(minutes=i))[0])
    reports.delete_report(conn, workspace_id=c.workspace_id, report_id=made[2].id, now=NOW)
    # When listed two at a time
    first = reports.list_reports(conn, workspace_id=c.workspace_id, limit=2)
    second = reports.list_reports(conn, workspace_id=c.workspace_id, limit=2,
                                  after=(first[-1].created_at, first[-1].id))
    third = reports.list_reports(conn, workspace_id=c.workspace_id, limit=2,
                                 after=(second[-1].created_at, second[-1].id))
    # Then the pages follow each other, without the deleted one
    assert [r.name for r in first + second + third] == ["r0", "r1", "r3", "r4"]
    with pytest.raises(reports.ReportNotFound):
        reports.get_report(conn, workspace_id=c.workspace_id, report_id=made[2].id)
    with pytest.raises(reports.ReportNotFound):
        reports.delete_report(conn, workspace_id=c.workspace_id, report_id=made[2].id, now=NOW)
    # And its versions stay readable for the renders that pinned them
    assert reports.get_report_version(conn, workspace_id=c.workspace_id, report_id=made[2].id, version=1)
