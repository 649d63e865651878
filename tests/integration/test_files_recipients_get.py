"""The files recipients get, read as a recipient would: money per currency and the
workspace's locale (CSV decimals in major units, XLSX numbers with a currency number
format, PDF Babel strings), dates and instants in the workspace's zone (XLSX date cells,
the zone named), the formula guard still holding, and the report PDF's workspace name,
data time and "Page x of y". Exports run through the real exports consumer handler,
renders through the renderer's ``render``; real PostgreSQL and moto S3 and SQS."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from uuid import UUID

import boto3
import psycopg
import pytest
from moto import mock_aws
from openpyxl import load_workbook
from pypdf import PdfReader

from tests.support import sqs_event
from timekeeper import clock, edge
from timekeeper.db.connection import connect
from timekeeper.edge import adapters
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.lambdas import invoke
from timekeeper.platform.directory import (
    InvalidLocale,
    add_member,
    create_workspace,
    get_workspace,
    set_workspace_locale,
    upsert_user,
)
from timekeeper.reporting import exports as ex
from timekeeper.reporting import reports, store
from timekeeper.reporting.rendering import render, request_render
from timekeeper.topology import EXPORTS

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
#: Each workspace's invoices: (number, member name, amount in minor units, currency).
INVOICES = [("INV-1", "=SUM(A1:A9)", 4800, "EUR"), ("INV-2", "Plain", 1250, "USD"),
            ("INV-3", "@cmd", 4800, "JPY"), ("INV-4", "-dash", 5, "EUR")]
COLUMNS = ["number", "member_name", "issue_date", "amount_minor", "currency", "created_at"]


@pytest.fixture(scope="module")
def workspaces(db_url):
    """Berlin (de_DE, EUR, Europe/Berlin) and New York (en_US, USD, America/New_York),
    each with a reader and the same four invoices recorded at 2027-03-01 12:00 UTC, and a
    saved query of every file-relevant invoice column."""
    out = {}
    with connect(db_url) as conn, conn.transaction():
        upsert_user(conn, user_id="reader", now=NOW)
        for key, name, zone, currency, locale in (("berlin", "Berliner Ruderclub", "Europe/Berlin", "EUR", "de_DE"),
                                                  ("new_york", "Hudson Rowing", "America/New_York", "USD", "en_US")):
            ws = create_workspace(conn, name=name, timezone=zone, currency=currency, locale=locale, now=NOW).id
            add_member(conn, workspace_id=ws, user_id="reader",
                       roles=["queries:read", "reports:read", "reports:write", "queries:write"], now=NOW)
            for number, member, amount, cur in INVOICES:
                member_id = conn.execute(
                    "INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                    "VALUES (%s, %s, %s, '2026-01-01') RETURNING id", (ws, number, member)).fetchone()["id"]
                conn.execute(
                    "INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                    "currency, status, created_at) VALUES (%s, %s, %s, '2027-02-27', '2027-03-29', %s, %s, 'open', %s)",
                    (ws, member_id, number, amount, cur, NOW))
            query, _ = store.create_query(conn, workspace_id=ws, name="Invoices", actor="reader", now=NOW,
                                          definition={"entity": "invoices", "columns": COLUMNS,
                                                      "sort": [{"column": "number"}]})
            out[key] = (ws, query.id)
    return out


@pytest.fixture
def aws(db_url, monkeypatch):
    """moto with the exports queue and the files bucket; the edge configured from the
    environment, as the consumer function's is."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": db_url, "FILES_BUCKET": "files"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs, s3 = boto3.client("sqs"), boto3.client("s3")
        s3.create_bucket(Bucket="files")
        pair = create_pipeline_queues(sqs, EXPORTS)
        monkeypatch.setenv(EXPORTS.queue_url_variable, pair.url)
        edge.reset()
        clock.install(lambda: NOW)
        yield {"sqs": sqs, "s3": s3, "queue": pair}
        edge.reset()
        clock.install(None)


def exported(conn, aws, workspace_id: UUID, query_id: UUID, fmt: str) -> bytes:
    """Request an export, feed the queue to the real consumer handler, return the file."""
    export, _ = ex.request_export(conn, workspace_id=workspace_id, query_id=query_id, version=None, format=fmt,
                                  requested_by="reader", idempotency_key=None, now=NOW,
                                  publisher=adapters.export_publisher())
    for message in aws["sqs"].receive_message(QueueUrl=aws["queue"].url, MaxNumberOfMessages=10).get("Messages", []):
        assert invoke("export_consumer", sqs_event(json.loads(message["Body"]))) == {"batchItemFailures": []}
        aws["sqs"].delete_message(QueueUrl=aws["queue"].url, ReceiptHandle=message["ReceiptHandle"])
    done = ex.get_export(conn, workspace_id=workspace_id, export_id=export.id)
    assert done.state == "succeeded", done.error_message
    return aws["s3"].get_object(Bucket="files", Key=done.object_key)["Body"].read()


def test_csv_keeps_machine_readable_amounts_local_instants_and_the_formula_guard(aws, conn, workspaces):
    # Given Berlin's query of invoices in three currencies
    ws, query = workspaces["berlin"]
    # When it is exported to CSV
    rows = list(csv.reader(io.StringIO(exported(conn, aws, ws, query, "csv").decode(), newline="")))
    # Then amounts are decimals in major units of each row's currency (JPY has none), beside
    # the currency; the instant is ISO 8601 on Berlin's clock with its offset; the zone is named
    assert rows[0] == ["Number", "Member", "Issued", "Amount", "Currency", "Recorded at (Europe/Berlin)"]
    assert rows[1:] == [["INV-1", "'=SUM(A1:A9)", "2027-02-27", "48.00", "EUR", "2027-03-01T13:00:00+01:00"],
                        ["INV-2", "Plain", "2027-02-27", "12.50", "USD", "2027-03-01T13:00:00+01:00"],
                        ["INV-3", "'@cmd", "2027-02-27", "4800", "JPY", "2027-03-01T13:00:00+01:00"],
                        ["INV-4", "'-dash", "2027-02-27", "0.05", "EUR", "2027-03-01T13:00:00+01:00"]]


@pytest.mark.parametrize(("place", "formats", "recorded"), [
    ("berlin", {"EUR": '#,##0.00 "€"', "USD": '#,##0.00 "$"', "JPY": '#,##0 "¥"'}, datetime(2027, 3, 1, 13)),
    ("new_york", {"EUR": '"€"#,##0.00', "USD": '"$"#,##0.00', "JPY": '"¥"#,##0'}, datetime(2027, 3, 1, 7)),
])
def test_xlsx_cells_are_typed_with_currency_and_date_formats(aws, conn, workspaces, place, formats, recorded):
    # Given a workspace's query of invoices in three currencies
    ws, query = workspaces[place]
    zone = "Europe/Berlin" if place == "berlin" else "America/New_York"
    # When it is exported to XLSX and read back
    sheet = load_workbook(io.BytesIO(exported(conn, aws, ws, query, "xlsx"))).active
    header, *rows = list(sheet.iter_rows())
    assert [c.value for c in header] == ["Number", "Member", "Issued", "Amount", "Currency", f"Recorded at ({zone})"]
    # Then the day is a date cell, the instant a date-time cell on the workspace's clock
    for row in rows:
        assert (row[2].value, row[2].is_date, row[2].number_format) == (datetime(2027, 2, 27), True, "yyyy-mm-dd")
        assert (row[5].value, row[5].is_date, row[5].number_format) == (recorded, True, "yyyy-mm-dd hh:mm:ss")
    # And money is a number of major units with its currency's format in the workspace's locale
    amounts = [(r[3].value, r[3].data_type, r[3].number_format) for r in rows]
    assert amounts == [(48, "n", formats["EUR"]), (12.5, "n", formats["USD"]), (4800, "n", formats["JPY"]),
                       (0.05, "n", formats["EUR"])]
    # And text that looks like a formula is a text cell holding the exact text
    assert [(r[1].value, r[1].data_type) for r in rows] == [("=SUM(A1:A9)", "s"), ("Plain", "s"), ("@cmd", "s"),
                                                            ("-dash", "s")]


def test_an_amount_without_its_currency_column_is_in_the_workspaces_currency(aws, conn, workspaces):
    # Given New York's query of amounts without the currency column
    ws, _ = workspaces["new_york"]
    query, _ = store.create_query(conn, workspace_id=ws, name="Amounts", actor="reader", now=NOW, definition={
        "entity": "invoices", "columns": ["number", "amount_minor"], "sort": [{"column": "number"}]})
    # When exported to XLSX
    sheet = load_workbook(io.BytesIO(exported(conn, aws, ws, query.id, "xlsx"))).active
    rows = list(sheet.iter_rows())
    # Then the header names the workspace's currency and every amount is formatted in it
    assert [c.value for c in rows[0]] == ["Number", "Amount (USD)"]
    assert {r[1].number_format for r in rows[1:]} == {'"$"#,##0.00'}


@pytest.fixture
def s3(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket="files")
        yield client


def rendered_text(conn, s3, workspace_id: UUID, query_id: UUID) -> tuple[str, int]:
    report, _ = reports.create_report(conn, workspace_id=workspace_id, name="Invoices", actor="reader", now=NOW,
                                      definition={"title": "Invoices this month", "sections": [
                                          {"heading": "Invoices", "query_id": str(query_id), "display": "table"}]})
    requested = request_render(conn, workspace_id=workspace_id, report_id=report.id, idempotency_key=str(report.id),
                               requested_by="reader", now=NOW)
    done = render(conn, s3, "files", workspace_id=workspace_id, render_id=requested.id, now=NOW)
    assert done.state == "succeeded", done.error_message
    pdf = s3.get_object(Bucket="files", Key=done.object_key)["Body"].read()
    pages = PdfReader(io.BytesIO(pdf)).pages
    return "\n".join(page.extract_text() for page in pages).replace("\u00a0", " "), len(pages)


@pytest.mark.parametrize(("place", "name", "money", "local"), [
    ("berlin", "Berliner Ruderclub", ["48,00 €", "12,50 $", "4.800 ¥", "0,05 €"], "2027-03-01 13:00 CET"),
    ("new_york", "Hudson Rowing", ["€48.00", "$12.50", "¥4,800", "€0.05"], "2027-03-01 07:00 EST"),
])
def test_a_report_pdf_names_the_workspace_the_data_time_pages_and_formats_money(conn, s3, workspaces, place, name,
                                                                              money, local):
    # Given a workspace's report of a table of invoices in three currencies
    ws, query = workspaces[place]
    # When it is rendered
    text, pages = rendered_text(conn, s3, ws, query)
    # Then the PDF names the workspace, says when its data is as of on the workspace's clock
    # (the zone named), numbers its pages, and shows Babel's money in the workspace's locale
    assert name in text and "Invoices this month" in text
    assert f"data as of {local}" in text and ("Europe/Berlin" if place == "berlin" else "America/New_York") in text
    assert f"Page 1 of {pages}" in text
    for amount in money:
        assert amount in text, (amount, text)
    assert text.count(local) >= 5  # the heading's data time and every row's recorded instant
    assert "=SUM(A1:A9)" in text  # a PDF shows text as text


def test_a_long_report_numbers_every_page_of_the_total(conn, s3, workspaces, db_url):
    # Given a query of 300 invoices (several pages)
    ws, _ = workspaces["new_york"]
    with connect(db_url) as other, other.transaction():
        member = other.execute("SELECT id FROM members WHERE workspace_id = %s LIMIT 1", (ws,)).fetchone()["id"]
        for i in range(300):
            other.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                          "currency, status, created_at) VALUES (%s, %s, %s, '2027-02-01', '2027-03-01', 100, "
                          "'USD', 'open', %s)", (ws, member, f"BULK-{i:03d}", NOW))
    query, _ = store.create_query(conn, workspace_id=ws, name="Bulk", actor="reader", now=NOW, definition={
        "entity": "invoices", "columns": ["number", "amount_minor"],
        "filters": [{"column": "number", "op": "starts_with", "value": "BULK-"}], "sort": [{"column": "number"}]})
    # When rendered
    text, pages = rendered_text(conn, s3, ws, query.id)
    # Then every page's footer says which page of how many, and names the workspace
    assert pages >= 3
    for page in range(1, pages + 1):
        assert f"Page {page} of {pages}" in text
    assert text.count("Hudson Rowing") >= pages


def test_a_workspace_locale_must_be_one_cldr_knows(conn, workspaces):
    ws, _ = workspaces["new_york"]
    # A locale CLDR does not know, or written another way, is refused before the database sees it
    for bad in ("xx_YY", "de-DE", "", "en_US; DROP TABLE workspaces", "ko_KR"):  # Korean: data not shipped
        with pytest.raises(InvalidLocale):
            set_workspace_locale(conn, ws, bad)
        with pytest.raises(InvalidLocale):
            create_workspace(conn, name="x", timezone="UTC", locale=bad, now=NOW)
    # And the table refuses what is not shaped like a locale identifier, whatever writes it
    with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
        conn.execute("UPDATE workspaces SET locale = 'not a locale' WHERE id = %s", (ws,))
    # A new workspace is en_US unless it says otherwise; a known locale is kept
    assert create_workspace(conn, name="y", timezone="UTC", now=NOW).locale == "en_US"
    set_workspace_locale(conn, ws, "fr_CH")
    assert get_workspace(conn, ws).locale == "fr_CH"
    set_workspace_locale(conn, ws, "en_US")  # as the fixture made it, for the tests after this one
