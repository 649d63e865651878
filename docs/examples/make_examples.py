"""Write the example files recipients get into docs/examples/: a CSV and an XLSX export
and a rendered report PDF of one sample workspace, and a PNG of the PDF's first page.

    PYTHONPATH=shared python3 docs/examples/make_examples.py          # from the checkout's root

What runs: the database ``timekeeper_examples`` on the local embedded server (dropped and
made again, migrated), one workspace ("Berliner Ruderclub", Europe/Berlin, de_DE, EUR)
with a dozen invoices in EUR and two in USD (one member named like a spreadsheet
formula), then the product's own ``run_export`` (CSV and XLSX) and ``render`` (the report
PDF) against moto S3 in this process; the objects are downloaded into this folder. The PNG
is ``pdftoppm`` (Debian's poppler-utils) of the PDF's first page at 60 dpi.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "shared")]
HERE = Path(__file__).resolve().parent
NOW = datetime(2027, 3, 1, 7, 30, tzinfo=UTC)
READER = "analyst"


def _workspace(conn):
    from timekeeper.platform.directory import add_member, create_workspace, upsert_user

    with conn.transaction():
        ws = create_workspace(conn, name="Berliner Ruderclub", timezone="Europe/Berlin", currency="EUR",
                              locale="de_DE", now=NOW).id
        upsert_user(conn, user_id=READER, display_name="Analyst", now=NOW)
        add_member(conn, workspace_id=ws, user_id=READER, roles=["queries:write", "reports:write"], now=NOW)
        names = ["Anna Schmidt", "Jörg Müller", "=HYPERLINK(\"http://x\")", "Zoë Weiß", "Ole Hansen"]
        members = [conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                                "VALUES (%s, %s, %s, %s) RETURNING id",
                                (ws, f"M{i + 1:03d}", name, date(2025, 4, 1))).fetchone()["id"]
                   for i, name in enumerate(names)]
        for i in range(14):
            currency = "USD" if i in (4, 9) else "EUR"
            conn.execute(
                "INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, "
                "status, voided_on, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (ws, members[i % len(members)], f"2027-{i + 1:04d}", date(2027, 2, 1) + timedelta(days=2 * i),
                 date(2027, 3, 3) + timedelta(days=2 * i), [4800, 12000, 2550, 125000, 9900, 3000, 750][i % 7],
                 currency, ("open", "paid", "open", "void")[i % 4], date(2027, 2, 20) if i % 4 == 3 else None,
                 datetime(2027, 2, 1, 8, 15, tzinfo=UTC) + timedelta(days=2 * i, minutes=7 * i)))
    return ws


def main() -> None:
    import boto3
    from moto import mock_aws

    from timekeeper.db.connection import connect
    from timekeeper.local.stack import prepare_database
    from timekeeper.reporting import exports as ex
    from timekeeper.reporting import reports, store
    from timekeeper.reporting.rendering import render, request_render

    url = prepare_database("timekeeper_examples", reset=True)
    with mock_aws(), connect(url) as conn:
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="files")
        ws = _workspace(conn)
        query, _ = store.create_query(conn, workspace_id=ws, name="Invoices of February", actor=READER, now=NOW,
                                      definition={"entity": "invoices", "columns": [
                                          "number", "member_name", "issue_date", "due_date", "amount_minor",
                                          "currency", "status", "created_at"], "sort": [{"column": "number"}]})
        for fmt in ("csv", "xlsx"):
            export, _ = ex.request_export(conn, workspace_id=ws, query_id=query.id, version=None, format=fmt,
                                          requested_by=READER, idempotency_key=None, now=NOW,
                                          publisher=_Accepting())
            done = ex.run_export(conn, s3, "files", workspace_id=ws, export_id=export.id, now=NOW)
            (HERE / f"export.{fmt}").write_bytes(s3.get_object(Bucket="files", Key=done.object_key)["Body"].read())
        report, _ = reports.create_report(conn, workspace_id=ws, name="February", actor=READER, now=NOW, definition={
            "title": "Invoices of February", "sections": [
                {"heading": "Invoices", "query_id": str(query.id), "display": "table"},
                {"heading": "Amount by invoice", "query_id": str(query.id), "display": "bar_chart",
                 "label_column": "number", "value_column": "amount_minor"}]})
        requested = request_render(conn, workspace_id=ws, report_id=report.id, idempotency_key="example",
                                   requested_by=READER, now=NOW)
        done = render(conn, s3, "files", workspace_id=ws, render_id=requested.id, now=NOW)
        assert done.state == "succeeded", done.error_message
        (HERE / "report.pdf").write_bytes(s3.get_object(Bucket="files", Key=done.object_key)["Body"].read())
    if shutil.which("pdftoppm"):
        subprocess.run(["pdftoppm", "-png", "-r", "60", "-f", "1", "-l", "1", "-singlefile", str(HERE / "report.pdf"),
                        str(HERE / "report-page-1")], check=True)
    else:
        print("pdftoppm not found (apt-get install poppler-utils): report-page-1.png not made", file=sys.stderr)
    for name in ("export.csv", "export.xlsx", "report.pdf", "report-page-1.png"):
        path = HERE / name
        if path.exists():
            print(f"{path.relative_to(ROOT)}: {path.stat().st_size:,} bytes")


class _Accepting:
    """An exports-queue publisher that takes every message (the example runs the export itself)."""

    def publish(self, messages):
        return set()


if __name__ == "__main__":
    main()
