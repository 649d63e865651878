"""Reports read the published snapshots: a catalogue entity per registered snapshot type,
a report section's period choice (latest, a named month, a pinned version) checked field
by field, and the render's recorded basis; real PostgreSQL and moto S3, versions published
by the real run job."""

from __future__ import annotations

from datetime import date
from uuid import UUID, uuid4

import boto3
import pytest
from moto import mock_aws

from tests.integration.report_helpers import NOW, make_tenant
from tests.integration.snapshot_helpers import backdate, publish
from timekeeper.db.connection import connect
from timekeeper.edge.registries import assemble_snapshot_types
from timekeeper.reporting import catalogue, reports, store
from timekeeper.reporting.compiler import compile_query
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.reporting.rendering import SNAPSHOT_UNPUBLISHED, render, request_render
from timekeeper.snapshots.registry import PublishedRows, RowColumn

BUCKET = "timekeeper-files-test"
JAN, FEB = date(2027, 1, 1), date(2027, 2, 1)
AGING = "snapshot.platform.ar_aging"


@pytest.fixture
def s3(monkeypatch):
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(scope="module")
def world(db_url):
    """Two tenants; A has ar_aging published for January (v1) and February (v1, then v2
    after INV-1 was paid in full), B has February v1."""
    with connect(db_url) as c:
        a, b = make_tenant(c, "snap-a"), make_tenant(c, "snap-b")
        backdate(c, a.workspace_id)
        backdate(c, b.workspace_id)
        jan = publish(c, a.workspace_id, JAN)
        feb1 = publish(c, a.workspace_id, FEB)
        invoice = c.execute("SELECT id FROM invoices WHERE workspace_id = %s AND number = 'INV-1'",
                            (a.workspace_id,)).fetchone()["id"]
        c.execute("INSERT INTO payments (workspace_id, invoice_id, received_on, amount_minor, currency, method) "
                  "VALUES (%s, %s, '2027-02-10', 1000, 'EUR', 'card')", (a.workspace_id, invoice))
        feb2 = publish(c, a.workspace_id, FEB)
        b_feb = publish(c, b.workspace_id, FEB)
        query, _ = store.create_query(c, workspace_id=a.workspace_id, name="Aging", actor=a.author, now=NOW,
                                      definition={"entity": AGING, "columns": ["period", "version", "invoice_id",
                                                                               "bucket", "outstanding_minor"]})
    return {"a": a, "b": b, "jan": jan, "feb1": feb1, "feb2": feb2, "b_feb": b_feb, "query": query.id}


def _rows(conn, run_id: UUID) -> set[UUID]:
    return {r["invoice_id"] for r in conn.execute("SELECT invoice_id FROM snapshot_ar_aging WHERE run_id = %s",
                                                   (run_id,)).fetchall()}


def test_the_catalogue_has_an_entity_per_registered_snapshot_type_derived_from_its_rows():
    # Given the deployment's snapshot registry
    registered = list(assemble_snapshot_types("development").all())
    # Then every type has an entity of its published rows, with the version's period and number first
    for snapshot_type in registered:
        entity = catalogue.CATALOGUE[catalogue.snapshot_entity_name(*snapshot_type.key)]
        assert entity.snapshot == snapshot_type.key and entity.table == snapshot_type.rows.table
        assert list(entity.columns) == ["period", "version", *(c.name for c in snapshot_type.rows.columns)]
    aging = catalogue.CATALOGUE[AGING].columns
    assert (aging["outstanding_minor"].type, aging["bucket"].values) == (
        catalogue.ColumnType.MONEY, ("0-30", "31-60", "61-90", "over_90"))


def test_a_snapshot_entity_reads_the_workspaces_current_versions_only(conn, world):
    a = world["a"]
    # When a query of the aging entity runs without a chosen version
    compiled = compile_query({"entity": AGING, "columns": ["period", "version", "invoice_id"]},
                             workspace_id=a.workspace_id)
    got = conn.execute(compiled.statement, compiled.params).fetchall()
    # Then it returns each period's current version's rows (February's v2, not v1), none of B's
    assert {(r["period"], r["version"]) for r in got} == {(JAN, 1), (FEB, 2)}
    assert {r["invoice_id"] for r in got if r["period"] == FEB} == _rows(conn, world["feb2"].id)
    assert _rows(conn, world["feb1"].id) - _rows(conn, world["feb2"].id)  # v2 really differs
    # And a chosen version reads that version's rows, even when no longer current
    pinned = compile_query({"entity": AGING, "columns": ["invoice_id", "version"]}, workspace_id=a.workspace_id,
                           snapshot_run=world["feb1"].id)
    rows = conn.execute(pinned.statement, pinned.params).fetchall()
    assert {r["invoice_id"] for r in rows} == _rows(conn, world["feb1"].id) and {r["version"] for r in rows} == {1}
    # And another workspace's version id reads nothing
    other = compile_query({"entity": AGING, "columns": ["invoice_id"]}, workspace_id=a.workspace_id,
                          snapshot_run=world["b_feb"].id)
    assert conn.execute(other.statement, other.params).fetchall() == []


def test_filters_on_the_period_and_the_columns_work_like_any_entity(conn, world):
    a = world["a"]
    compiled = compile_query({"entity": AGING, "columns": ["period"], "filters": [
        {"column": "period", "op": "eq", "value": "2027-01-01"}, {"column": "bucket", "op": "in",
                                                                   "value": ["0-30", "31-60", "61-90", "over_90"]}]},
        workspace_id=a.workspace_id)
    assert {r["period"] for r in conn.execute(compiled.statement, compiled.params).fetchall()} == {JAN}
    with pytest.raises(InvalidDefinition) as caught:
        compile_query({"entity": AGING, "columns": ["bucket"], "filters": [
            {"column": "bucket", "op": "eq", "value": "later"}]}, workspace_id=a.workspace_id)
    assert caught.value.field == "filters[0].value"


def _definition(world, **period) -> dict:
    section = {"heading": "Aging", "query_id": str(world["query"]), "display": "table"}
    if period:
        section["period"] = period
    return {"title": "Receivables", "sections": [section]}


@pytest.mark.parametrize(("period", "field"), [
    ({"choice": "month"}, "sections[0].period.month"),
    ({"choice": "version", "month": "2027-02"}, "sections[0].period.version"),
    ({"choice": "latest", "month": "2027-02"}, "sections[0].period.month"),
    ({"choice": "month", "month": "2027-02", "version": 1}, "sections[0].period.version"),
    ({"choice": "version", "month": "2027-02", "version": 3}, "sections[0].period.version"),
    ({"choice": "version", "month": "2027-13", "version": 1}, "sections[0].period.month"),
    ({"choice": "soon"}, "sections[0].period.choice"),
    ({"choice": "latest", "when": "now"}, "sections[0].period.when"),
])
def test_a_period_choice_is_checked_field_by_field(conn, world, period, field):
    a = world["a"]
    with pytest.raises(InvalidDefinition) as caught:
        reports.create_report(conn, workspace_id=a.workspace_id, name="r", actor=a.author, now=NOW,
                              definition=_definition(world, **period))
    assert caught.value.field == field


def test_a_period_on_a_query_that_reads_no_snapshot_is_refused(conn, world):
    a = world["a"]
    data = {"title": "t", "sections": [{"heading": "h", "query_id": str(a.invoices_query),
                                        "period": {"choice": "latest"}}]}
    with pytest.raises(InvalidDefinition) as caught:
        reports.create_report(conn, workspace_id=a.workspace_id, name="r", actor=a.author, now=NOW, definition=data)
    assert caught.value.field == "sections[0].period"


def _render(conn, s3, world, **period):
    a = world["a"]
    report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="r", actor=a.author, now=NOW,
                                      definition=_definition(world, **period))
    row = request_render(conn, workspace_id=a.workspace_id, report_id=report.id, idempotency_key=str(uuid4()),
                         requested_by=a.reader, now=NOW)
    return render(conn, s3, BUCKET, workspace_id=a.workspace_id, render_id=row.id, now=NOW)


@pytest.mark.parametrize(("period", "expected", "choice"), [
    ({}, "feb2", "latest"),
    ({"choice": "month", "month": "2027-01"}, "jan", "month"),
    ({"choice": "month", "month": "2027-02"}, "feb2", "month"),
    ({"choice": "version", "month": "2027-02", "version": 1}, "feb1", "version"),
])
def test_the_render_shows_the_chosen_version_and_records_its_basis(conn, s3, world, period, expected, choice):
    # When a report over the aging snapshot renders with the period choice
    done = _render(conn, s3, world, **period)
    # Then it showed that version's rows, and its basis says which version, published when
    version = world[expected]
    assert done.state == "succeeded", done.error_message
    assert done.section_row_counts == [len(_rows(conn, version.id))]
    assert done.snapshot_basis == [{
        "owner": "platform", "snapshot_type": "ar_aging", "period": version.period.isoformat(),
        "version": version.version, "published_at": version.published_at.isoformat(), "run_id": str(version.id),
        "choice": choice}]


def test_a_month_not_published_fails_the_render_with_its_reason(conn, s3, world):
    done = _render(conn, s3, world, choice="month", month="2026-12")
    assert (done.state, done.error_code) == ("failed", SNAPSHOT_UNPUBLISHED)
    assert "sections[0].period" in done.error_message and "2026-12" in done.error_message


def test_a_report_without_snapshot_sections_records_no_basis(conn, s3, world):
    a = world["a"]
    report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="plain", actor=a.author, now=NOW,
                                      definition={"title": "t", "sections": [
                                          {"heading": "h", "query_id": str(a.invoices_query)}]})
    row = request_render(conn, workspace_id=a.workspace_id, report_id=report.id, idempotency_key=str(uuid4()),
                         requested_by=a.reader, now=NOW)
    done = render(conn, s3, BUCKET, workspace_id=a.workspace_id, render_id=row.id, now=NOW)
    assert done.state == "succeeded" and done.snapshot_basis is None


def test_a_version_is_chosen_only_for_a_snapshot_entity(world):
    with pytest.raises(ValueError, match="not a snapshot entity"):
        compile_query({"entity": "invoices", "columns": ["number"]}, workspace_id=world["a"].workspace_id,
                      snapshot_run=world["feb1"].id)


@pytest.mark.parametrize("make", [
    lambda: PublishedRows("t", (RowColumn("n", "integer", "N"),), key=("m",)),
    lambda: PublishedRows("t", (RowColumn("period", "date", "P"),), key=("period",)),
    lambda: RowColumn("b", "enum", "Bucket"),
    lambda: RowColumn("n", "float", "N"),
])
def test_a_published_rows_declaration_that_readers_could_not_use_is_refused(make):
    with pytest.raises(ValueError):
        make()
