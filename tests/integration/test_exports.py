"""Exports of a saved query version: the files read back equal a direct SQL query of the
database; idempotency keys; a crash between upload and record re-runs onto the same key;
duplicate messages; access lost before the run; a version the catalogue no longer allows;
the consumer's malformed messages, retries and final receive; unpublished exports offered
again. Real PostgreSQL, moto S3 and SQS, the real consumer handler."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import UTC, date, datetime, timedelta
from uuid import UUID, uuid4

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.support import sqs_event
from timekeeper import clock, edge
from timekeeper.edge import adapters
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.event_source import SqsEventSource
from timekeeper.local.lambdas import invoke
from timekeeper.platform import access
from timekeeper.platform.directory import add_member, create_workspace, leave_workspace, set_user_status, upsert_user
from timekeeper.reporting import catalogue, store
from timekeeper.reporting import exports as ex
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.topology import EXPORTS

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=EXPORTS.consumer.timeout_s)
ALL_INVOICE_COLUMNS = ["id", "number", "member_id", "member_name", "issue_date", "due_date", "amount_minor",
                       "currency", "status", "voided_on"]
#: Member names and invoice numbers a spreadsheet would read as formulas, and other awkward text.
NAMES = ["=SUM(A1:A9)", "-dash", "+plus", "@at", "\ttab", "Ünïcode, \"quoted\"\nnew line", "plain"]
NUMBERS = ["=HYPERLINK(\"http://evil\")", "-5", "+7", "@cmd", "INV-1", "INV,2", "INV\"3"]


class RefusingPublisher:
    """An exports-queue publisher whose queue refuses everything (an adapter double)."""

    def __init__(self) -> None:
        self.offered: list[ex.ExportMessage] = []

    def publish(self, messages: list[ex.ExportMessage]) -> set[UUID]:
        self.offered.extend(messages)
        return {m.export_id for m in messages}


@pytest.fixture(scope="module")
def tenants(db_url):
    """Workspace A (alice and bob may read queries; 60 invoices with awkward text) and B
    (carol; one invoice)."""
    from timekeeper.db.connection import connect

    with connect(db_url) as conn, conn.transaction():
        a = create_workspace(conn, name="A", timezone="Europe/Berlin", currency="EUR", now=NOW).id
        b = create_workspace(conn, name="B", timezone="America/New_York", now=NOW).id
        for user in ("alice", "bob", "carol"):
            upsert_user(conn, user_id=user, now=NOW)
        add_member(conn, workspace_id=a, user_id="alice", roles=["queries:read"], now=NOW)
        add_member(conn, workspace_id=a, user_id="bob", roles=["queries:write"], now=NOW)
        add_member(conn, workspace_id=b, user_id="carol", roles=["workspace:admin"], now=NOW)
        members = []
        for i, name in enumerate(NAMES):
            members.append(conn.execute(
                "INSERT INTO members (workspace_id, member_number, display_name, joined_on) VALUES (%s, %s, %s, %s) "
                "RETURNING id", (a, f"M{i}", name, date(2026, 1, 1))).fetchone()["id"])
        for i in range(60):
            number = NUMBERS[i] if i < len(NUMBERS) else f"INV-{i:03d}"
            status = ("open", "paid", "void", "draft")[i % 4]
            conn.execute(
                "INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, "
                "status, voided_on) VALUES (%s, %s, %s, %s, %s, %s, 'EUR', %s, %s)",
                (a, members[i % len(members)], number, date(2027, 1, 1) + timedelta(days=i),
                 date(2027, 2, 1) + timedelta(days=i), i * 1234, status,
                 date(2027, 2, 15) if status == "void" else None))
        bm = conn.execute("INSERT INTO members (workspace_id, member_number, display_name, joined_on) "
                          "VALUES (%s, 'M1', 'Other', '2026-01-01') RETURNING id", (b,)).fetchone()["id"]
        conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                     "currency, status) VALUES (%s, %s, 'B-1', '2027-01-01', '2027-01-31', 5, 'USD', 'open')",
                     (b, bm))
    return a, b


@pytest.fixture
def aws(db_url, monkeypatch):
    """moto with the exports queue, its DLQ and the files bucket; the edge configured
    from the environment (as the consumer function's is)."""
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
        yield {"sqs": sqs, "s3": s3, "queue": pair, "bucket": "files"}
        edge.reset()
        clock.install(None)


def save_query(conn, workspace_id, *, columns=ALL_INVOICE_COLUMNS, actor="alice", **extra):
    query, _ = store.create_query(conn, workspace_id=workspace_id, name="Invoices", actor=actor, now=NOW,
                                  definition={"entity": "invoices", "columns": columns,
                                              "sort": [{"column": "number"}], **extra})
    return query


def request(conn, a, query, *, fmt="csv", user="alice", key=None, version=None, publisher=None):
    return ex.request_export(conn, workspace_id=a, query_id=query.id, version=version, format=fmt,
                             requested_by=user, idempotency_key=key, now=NOW,
                             publisher=publisher or adapters.export_publisher())


def drain(aws, now=NOW):
    """Feed what the exports queue holds to the real consumer handler; return its responses."""
    responses = []
    while True:
        got = aws["sqs"].receive_message(QueueUrl=aws["queue"].url, MaxNumberOfMessages=10,
                                         AttributeNames=["All"]).get("Messages", [])
        if not got:
            return responses
        for message in got:
            responses.append(invoke("export_consumer", sqs_event(json.loads(message["Body"]))))
            aws["sqs"].delete_message(QueueUrl=aws["queue"].url, ReceiptHandle=message["ReceiptHandle"])


def body_of(aws, key) -> bytes:
    return aws["s3"].get_object(Bucket=aws["bucket"], Key=key)["Body"].read()


def expected_rows(conn, workspace_id) -> list[list[str]]:
    """The oracle: the invoices as text straight from SQL (sorted as the query sorts),
    formula-guarded as the CSV rule says, amounts in major units (EUR: two decimals)."""
    rows = conn.execute(
        """SELECT i.id::text, i.number, i.member_id::text, m.display_name, i.issue_date::text, i.due_date::text,
                  (i.amount_minor / 100.0)::numeric(20, 2)::text, i.currency::text, i.status, i.voided_on::text
             FROM invoices i JOIN members m ON m.id = i.member_id
            WHERE i.workspace_id = %s ORDER BY i.number, i.id""", (workspace_id,)).fetchall()
    guard = {1, 3, 7}  # text columns: number, member name, currency

    def cell(i, v):
        if v is None:
            return ""
        return "'" + v if i in guard and v[:1] in ("=", "+", "-", "@", "\t", "\r") else v

    return [[cell(i, v) for i, v in enumerate(row.values())] for row in rows]


def test_a_csv_export_reads_back_as_the_database_rows(aws, conn, tenants):
    # Given a saved query of every invoice column
    a, _ = tenants
    query = save_query(conn, a)
    # When alice requests a CSV export and the consumer runs it
    export, created = request(conn, a, query)
    assert created and export.state == "queued" and export.published_at == NOW and export.query_version == 1
    responses = drain(aws)
    # Then the consumer acknowledged it and the export succeeded with the file's facts
    assert responses == [{"batchItemFailures": []}]
    done = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert (done.state, done.attempts, done.row_count) == ("succeeded", 1, 60)
    assert done.object_key == f"exports/{a}/{export.id}.csv"
    data = body_of(aws, done.object_key)
    assert done.byte_size == len(data) and done.sha256 == hashlib.sha256(data).hexdigest()
    # And the file is the header of labels and the rows of a direct SQL query, formula cells quoted
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    assert rows[0] == ["Invoice id", "Number", "Member id", "Member", "Issued", "Due", "Amount",
                       "Currency", "Status", "Voided on"]
    assert rows[1:] == expected_rows(conn, a)
    assert "'=SUM(A1:A9)" in {r[3] for r in rows} and "Ünïcode, \"quoted\"\nnew line" in {r[3] for r in rows}
    head = aws["s3"].head_object(Bucket=aws["bucket"], Key=done.object_key)
    assert head["ContentType"].startswith("text/csv") and head["Metadata"]["sha256"] == done.sha256


def test_an_xlsx_export_reads_back_as_the_database_rows(aws, conn, tenants):
    from openpyxl import load_workbook

    # Given a query of every invoice column, filtered to open and void invoices
    a, _ = tenants
    query = save_query(conn, a, filters=[{"column": "status", "op": "in", "value": ["open", "void"]}])
    # When it is exported to XLSX
    export, _ = request(conn, a, query, fmt="xlsx")
    drain(aws)
    done = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert done.state == "succeeded" and done.row_count == 30
    data = body_of(aws, done.object_key)
    assert done.sha256 == hashlib.sha256(data).hexdigest()
    # Then the sheet holds the labels and the rows: text exact (never a formula), dates date cells,
    # money numbers of major units, NULL empty
    sheet = load_workbook(io.BytesIO(data)).active
    rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert rows[0][:2] == ["Invoice id", "Number"]
    oracle = conn.execute(
        """SELECT i.id::text, i.number, i.member_id::text, m.display_name, i.issue_date::timestamp,
                  i.due_date::timestamp, i.amount_minor / 100.0 AS amount, i.currency::text, i.status,
                  i.voided_on::timestamp
             FROM invoices i JOIN members m ON m.id = i.member_id
            WHERE i.workspace_id = %s AND i.status IN ('open', 'void') ORDER BY i.number, i.id""", (a,)).fetchall()
    assert rows[1:] == [[float(v) if k == "amount" else v for k, v in r.items()] for r in oracle]
    cells = {c.value: c.data_type for row in sheet.iter_rows() for c in row}
    assert cells["=SUM(A1:A9)"] == "s" and cells["=HYPERLINK(\"http://evil\")"] == "s"
    assert all(t != "f" for t in cells.values())


def test_a_repeated_idempotency_key_returns_the_same_export(aws, conn, tenants):
    # Given a query
    a, _ = tenants
    query = save_query(conn, a)
    # When alice requests twice with one key, and bob with the same key
    first, created1 = request(conn, a, query, key="k-1")
    again, created2 = request(conn, a, query, key="k-1")
    bobs, created3 = request(conn, a, query, key="k-1", user="bob")
    # Then alice's second request is her first export (not created), bob's is his own
    assert (created1, created2, created3) == (True, False, True)
    assert again.id == first.id and bobs.id != first.id
    # And one message was published per export created
    got = aws["sqs"].receive_message(QueueUrl=aws["queue"].url, MaxNumberOfMessages=10).get("Messages", [])
    assert sorted(json.loads(m["Body"])["export_id"] for m in got) == sorted([str(first.id), str(bobs.id)])


def test_a_rerun_after_a_crash_between_upload_and_record_reuses_the_key(aws, conn, tenants, db_url):
    # Given an export and a database that fails the recording step once (a trigger refuses 'succeeded')
    a, _ = tenants
    query = save_query(conn, a)
    export, _ = request(conn, a, query)
    conn.execute("""CREATE FUNCTION refuse_success() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'injected crash'; END $$""")
    conn.execute("""CREATE TRIGGER refuse_success BEFORE UPDATE ON exports FOR EACH ROW
                    WHEN (NEW.state = 'succeeded') EXECUTE FUNCTION refuse_success()""")
    try:
        # When the attempt runs: the file is uploaded, the record fails
        with pytest.raises(psycopg.Error):
            ex.run_export(conn, aws["s3"], aws["bucket"], workspace_id=a, export_id=export.id, now=NOW, lease=LEASE)
    finally:
        conn.execute("DROP TRIGGER refuse_success ON exports")
        conn.execute("DROP FUNCTION refuse_success()")
    key = ex.object_key(a, export.id, "csv")
    crashed = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert (crashed.state, crashed.attempts, crashed.object_key) == ("running", 1, None)
    assert body_of(aws, key)
    # Then a duplicate within the attempt's lease is refused (it may still be running)
    with pytest.raises(ex.ExportBusy):
        ex.run_export(conn, aws["s3"], aws["bucket"], workspace_id=a, export_id=export.id,
                      now=NOW + timedelta(seconds=1), lease=LEASE)
    # And the retry after the lease writes the same key: one object, the one recorded
    done = ex.run_export(conn, aws["s3"], aws["bucket"], workspace_id=a, export_id=export.id,
                         now=NOW + LEASE, lease=LEASE)
    assert (done.state, done.attempts, done.object_key) == ("succeeded", 2, key)
    listed = aws["s3"].list_objects_v2(Bucket=aws["bucket"], Prefix=f"exports/{a}/{export.id}")["Contents"]
    assert [o["Key"] for o in listed] == [key]
    assert hashlib.sha256(body_of(aws, key)).hexdigest() == done.sha256


def test_a_duplicate_message_after_success_does_nothing(aws, conn, tenants):
    # Given an export that succeeded
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a))
    drain(aws)
    done = ex.get_export(conn, workspace_id=a, export_id=export.id)
    etag = aws["s3"].head_object(Bucket=aws["bucket"], Key=done.object_key)["ETag"]
    conn.execute("INSERT INTO invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, "
                 "currency, status) SELECT workspace_id, member_id, 'LATE-1', issue_date, due_date, 1, 'EUR', "
                 "'open' FROM invoices WHERE workspace_id = %s LIMIT 1", (a,))
    try:
        # When its message is delivered again (later, after a new row)
        response = invoke("export_consumer", sqs_event(ex.ExportMessage(export_id=export.id, workspace_id=a)
                                                       .model_dump(mode="json")))
        # Then it is acknowledged, and neither the row nor the object changed
        assert response == {"batchItemFailures": []}
        assert ex.get_export(conn, workspace_id=a, export_id=export.id) == done
        assert aws["s3"].head_object(Bucket=aws["bucket"], Key=done.object_key)["ETag"] == etag
    finally:
        conn.execute("DELETE FROM invoices WHERE workspace_id = %s AND number = 'LATE-1'", (a,))


@pytest.mark.parametrize("loss", ["left_workspace", "user_deactivated", "missing_role", "not_found"])
def test_access_lost_before_the_run_fails_the_export_with_the_reason(aws, conn, tenants, loss):
    # Given dave, a reader of workspace A, who requested an export
    a, _ = tenants
    upsert_user(conn, user_id="dave", now=NOW)
    add_member(conn, workspace_id=a, user_id="dave", roles=["queries:read"], now=NOW)
    query = save_query(conn, a, actor="dave")
    export, _ = request(conn, a, query, user="dave")
    # When he loses access before the consumer runs it
    if loss == "left_workspace":
        leave_workspace(conn, workspace_id=a, user_id="dave", now=NOW)
    elif loss == "user_deactivated":
        set_user_status(conn, "dave", "deactivated", now=NOW)
    elif loss == "missing_role":
        add_member(conn, workspace_id=a, user_id="dave", roles=["reports:read"], now=NOW)
    else:
        store.delete_query(conn, workspace_id=a, query_id=query.id, now=NOW)
    try:
        assert drain(aws) == [{"batchItemFailures": []}]
        # Then the export failed with the access rule's reason, and no file was written
        failed = ex.get_export(conn, workspace_id=a, export_id=export.id)
        assert (failed.state, failed.error_code, failed.object_key) == ("failed", loss, None)
        assert aws["s3"].list_objects_v2(Bucket=aws["bucket"], Prefix=f"exports/{a}/{export.id}")["KeyCount"] == 0
    finally:
        set_user_status(conn, "dave", "active")
        add_member(conn, workspace_id=a, user_id="dave", roles=["queries:read"], now=NOW)


def test_a_dropped_catalogue_column_fails_the_export_definition_invalid(aws, conn, tenants, monkeypatch):
    # Given an export of a version that selects voided_on
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a))
    # When the catalogue no longer has the column by the time it runs
    invoices = catalogue.CATALOGUE["invoices"]
    trimmed = {k: v for k, v in invoices.columns.items() if k != "voided_on"}
    monkeypatch.setitem(catalogue.CATALOGUE, "invoices",
                        catalogue.Entity(name=invoices.name, label=invoices.label, table=invoices.table,
                                         columns=trimmed, joins=invoices.joins))
    # Then the consumer settles it failed with definition_invalid (no exception escapes)
    assert drain(aws) == [{"batchItemFailures": []}]
    failed = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert (failed.state, failed.error_code) == ("failed", "definition_invalid")
    assert "columns[9]" in failed.error_message


def test_requests_are_refused_by_the_access_rule_and_for_unknown_versions(aws, conn, tenants, monkeypatch):
    a, b = tenants
    query = save_query(conn, a)
    # carol is not a member of A; another workspace's query is not found; version 7 does not exist
    with pytest.raises(access.AccessDenied) as refused:
        request(conn, a, query, user="carol")
    assert refused.value.reason == "not_a_member"
    with pytest.raises(access.AccessDenied) as elsewhere:
        ex.request_export(conn, workspace_id=b, query_id=query.id, version=None, format="csv", requested_by="carol",
                          idempotency_key=None, now=NOW, publisher=adapters.export_publisher())
    assert elsewhere.value.reason == "not_found"
    with pytest.raises(store.QueryNotFound):
        request(conn, a, query, version=7)
    with pytest.raises(ValueError):
        request(conn, a, query, fmt="pdf")
    # And a version the catalogue no longer allows is refused at once
    monkeypatch.setitem(catalogue.CATALOGUE, "invoices", catalogue.Entity(
        name="invoices", label="Invoices", table="invoices",
        columns={k: v for k, v in catalogue.CATALOGUE["invoices"].columns.items() if k != "voided_on"},
        joins=catalogue.CATALOGUE["invoices"].joins))
    with pytest.raises(InvalidDefinition):
        request(conn, a, query)
    assert conn.execute("SELECT count(*) AS n FROM exports WHERE query_id = %s", (query.id,)).fetchone()["n"] == 0


def test_the_pinned_version_is_exported_after_the_query_changes(aws, conn, tenants):
    # Given an export of version 1 (one column), then version 2 saved before it runs
    a, _ = tenants
    query = save_query(conn, a, columns=["number"])
    export, _ = request(conn, a, query)
    store.add_version(conn, workspace_id=a, query_id=query.id, actor="alice", now=NOW,
                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
    # When it runs, then the file has version 1's single column
    drain(aws)
    done = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert done.query_version == 1
    assert body_of(aws, done.object_key).decode().splitlines()[0] == "Number"


def test_a_malformed_message_reaches_the_dlq_without_failing_its_batch_mates(aws, conn, tenants):
    # Given a batch of a malformed message and a good one
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    event = sqs_event("not an export", {"export_id": str(export.id), "workspace_id": str(a)},
                      {"export_id": "x"})
    # When the consumer handler takes it
    response = invoke("export_consumer", event)
    # Then only the malformed items fail, and the good export succeeded
    bad = [event["Records"][0]["messageId"], event["Records"][2]["messageId"]]
    assert response == {"batchItemFailures": [{"itemIdentifier": m} for m in bad]}
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).state == "succeeded"
    # And through the event source mapping of the topology a malformed message reaches the DLQ
    sqs, pair = aws["sqs"], aws["queue"]
    sqs.send_message(QueueUrl=pair.url, MessageBody="not an export")
    source = SqsEventSource(sqs=sqs, queue_url=pair.url, queue_arn=pair.arn,
                            function=lambda e: invoke("export_consumer", e), batch_size=EXPORTS.consumer.batch_size,
                            max_concurrency=EXPORTS.consumer.max_concurrency,
                            visibility_timeout=timedelta(seconds=EXPORTS.consumer.visibility_timeout_s))
    receives = sum(source.poll(NOW + i * source.visibility_timeout + timedelta(seconds=1))
                   for i in range(EXPORTS.consumer.max_receive_count + 1))
    assert receives == EXPORTS.consumer.max_receive_count and source.stats.function_errors == 0
    dead = sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=10).get("Messages", [])
    assert [m["Body"] for m in dead] == ["not an export"]


def test_an_export_nobody_reads_again_is_offered_by_the_queries_dispatchers_owner_wide_pass(aws, conn, tenants,
                                                                                            monkeypatch):
    # Given an export whose publish the queue refused, and the real queries dispatcher
    # configured as partition 0 is in AWS (its run queue, the topic, the exports queue)
    from tests.support import scheduled_event
    from timekeeper.topology import PIPELINES, QUERIES

    assert PIPELINES[EXPORTS.swept_by] is QUERIES
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    monkeypatch.setenv("RUN_QUEUE_URL_QUERIES", create_pipeline_queues(aws["sqs"], QUERIES).url)
    monkeypatch.setenv("NOTIFICATION_TOPIC_ARN", boto3.client("sns").create_topic(Name="notices")["TopicArn"])
    monkeypatch.setenv("LINK_SIGNING_KEY", "k" * 40)
    edge.reset()
    tick = {"partition": 0, "partitions": QUERIES.dispatch_partitions}
    # When partition 0 ticks before the export is reoffer_after old, then nothing is sent
    invoke("queries_dispatcher", scheduled_event(NOW, tick))
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).published_at is None
    # When it ticks once it is (and nobody read the export), then the pass published it
    later = NOW + EXPORTS.reoffer_after
    clock.install(lambda: later)
    invoke("queries_dispatcher", scheduled_event(later, tick))
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).published_at == later
    # And the consumer runs it from the queue
    drain(aws)
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).state == "succeeded"


def test_a_storage_fault_is_retried_and_the_final_receive_settles_the_export_failed(aws, conn, tenants,
                                                                                    monkeypatch):
    # Given an export and a files bucket that does not exist (every upload fails)
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    monkeypatch.setenv("FILES_BUCKET", "no-such-bucket")
    edge.reset()  # the edge reads its settings once
    body = {"export_id": str(export.id), "workspace_id": str(a)}
    # When the first receive fails, then its item fails (retry) and the export waits
    first = invoke("export_consumer", sqs_event(body, receive_count=1))
    assert len(first["batchItemFailures"]) == 1
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).state == "running"
    # When the final receive fails too (after the lease), then the export is settled failed and acknowledged
    clock.install(lambda: NOW + LEASE)
    last = invoke("export_consumer", sqs_event(body, receive_count=EXPORTS.consumer.max_receive_count))
    assert last == {"batchItemFailures": []}
    failed = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert (failed.state, failed.error_code, failed.attempts) == ("failed", "attempts_exhausted", 2)


def test_an_unpublished_export_is_offered_again(aws, conn, tenants):
    # Given an export the queue refused: it stays queued, unpublished
    a, _ = tenants
    refusing = RefusingPublisher()
    export, created = request(conn, a, save_query(conn, a), publisher=refusing)
    assert created and export.published_at is None and len(refusing.offered) == 1
    # When offered again too early, nothing is sent; after reoffer_after it is published
    assert ex.reoffer_exports(conn, adapters.export_publisher(), now=NOW, older_than=EXPORTS.reoffer_after,
                              export_id=export.id) == 0
    later = NOW + EXPORTS.reoffer_after
    assert ex.reoffer_exports(conn, adapters.export_publisher(), now=later, older_than=EXPORTS.reoffer_after,
                              workspace_id=a) >= 1
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).published_at == later
    # And the consumer runs it from the queue
    drain(aws)
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).state == "succeeded"


def test_the_consumer_sweeps_unpublished_exports_after_its_batch(aws, conn, tenants):
    # Given an unpublished export older than reoffer_after
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    clock.install(lambda: NOW + EXPORTS.reoffer_after)
    # When the consumer handles any batch (here an empty one)
    invoke("export_consumer", {"Records": []})
    # Then the export was published to the queue
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).published_at == NOW + EXPORTS.reoffer_after
    got = aws["sqs"].receive_message(QueueUrl=aws["queue"].url, MaxNumberOfMessages=10).get("Messages", [])
    assert str(export.id) in {json.loads(m["Body"])["export_id"] for m in got}


def test_an_unknown_export_message_is_dropped(aws, conn, tenants):
    a, _ = tenants
    response = invoke("export_consumer", sqs_event({"export_id": str(uuid4()), "workspace_id": str(a)}))
    assert response == {"batchItemFailures": []}


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_booleans_and_nulls_are_written_as_the_rule_says(aws, conn, tenants, fmt):
    from openpyxl import load_workbook

    # Given membership types, one inactive, one named like a formula
    a, _ = tenants
    conn.execute("DELETE FROM membership_types WHERE workspace_id = %s", (a,))
    conn.execute("INSERT INTO membership_types (workspace_id, name, annual_fee_minor, currency, active) VALUES "
                 "(%s, 'Gold', 12000, 'EUR', true), (%s, '=Silver', 0, 'EUR', false)", (a, a))
    query, _ = store.create_query(conn, workspace_id=a, name="Types", actor="alice", now=NOW, definition={
        "entity": "membership_types", "columns": ["name", "annual_fee_minor", "active"], "sort": [{"column": "name"}]})
    # When exported
    export, _ = request(conn, a, query, fmt=fmt)
    drain(aws)
    data = body_of(aws, ex.get_export(conn, workspace_id=a, export_id=export.id).object_key)
    # Then booleans are true/false in CSV and booleans in XLSX; money is in major units of the
    # workspace's currency (the query did not select the currency column: the header names it)
    if fmt == "csv":
        assert data.decode().splitlines() == ["Name,Annual fee (EUR),Active", "'=Silver,0.00,false",
                                              "Gold,120.00,true"]
    else:
        rows = list(load_workbook(io.BytesIO(data)).active.iter_rows(values_only=True))
        assert rows == [("Name", "Annual fee (EUR)", "Active"), ("=Silver", 0, False), ("Gold", 120, True)]


def test_a_final_receive_whose_connection_is_cut_still_settles_the_export(aws, conn, tenants, monkeypatch):
    # Given an export on its final receive whose upload fails after the consumer's database
    # connection was cut (its server process terminated)
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    monkeypatch.setenv("FILES_BUCKET", "no-such-bucket")
    edge.reset()

    def cut_the_consumers_connection(**_):
        conn.execute("SELECT pg_terminate_backend(%s)", (adapters.database().current().info.backend_pid,))

    adapters.s3_client().meta.events.register("before-call.s3.CreateMultipartUpload", cut_the_consumers_connection)
    adapters.s3_client().meta.events.register("before-call.s3.PutObject", cut_the_consumers_connection)
    body = {"export_id": str(export.id), "workspace_id": str(a)}
    # When the final receive runs it
    last = invoke("export_consumer", sqs_event(body, receive_count=EXPORTS.consumer.max_receive_count))
    # Then the export is settled failed on a new connection and the message acknowledged
    assert last == {"batchItemFailures": []}
    failed = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert (failed.state, failed.error_code) == ("failed", "attempts_exhausted")


def _sweep_exports(conn, publisher, at):
    consumer = EXPORTS.consumer
    return ex.sweep_running_exports(conn, publisher, now=at, lease=consumer.lease,
                                    idle_after=consumer.lease + timedelta(seconds=consumer.visibility_timeout_s),
                                    max_attempts=consumer.max_receive_count)


def test_the_sweep_settles_a_running_export_whose_attempts_and_last_lease_ran_out(aws, conn, tenants):
    # Given an export whose consumer died on each of its receives (its message dead-lettered)
    conn.execute("UPDATE exports SET state = 'failed' WHERE state = 'running'")
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    conn.execute("UPDATE exports SET state = 'running', attempts = %s, started_at = %s WHERE id = %s",
                 (EXPORTS.consumer.max_receive_count, NOW, export.id))
    publisher = RefusingPublisher()
    # When the sweep runs inside the last attempt's lease, then it waits
    assert _sweep_exports(conn, publisher, NOW + LEASE - timedelta(seconds=1)).settled == 0
    # And once the lease ran out it settles the export failed, sending nothing
    assert _sweep_exports(conn, publisher, NOW + LEASE).settled == 1
    failed = ex.get_export(conn, workspace_id=a, export_id=export.id)
    assert (failed.state, failed.error_code, failed.finished_at) == ("failed", "attempts_exhausted", NOW + LEASE)
    assert publisher.offered == []


def test_the_sweep_sends_again_a_running_export_whose_message_was_lost(aws, conn, tenants):
    # Given an export whose one attempt died and whose message never came back
    conn.execute("UPDATE exports SET state = 'failed' WHERE state = 'running'")
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a), publisher=RefusingPublisher())
    conn.execute("UPDATE exports SET state = 'running', attempts = 1, started_at = %s WHERE id = %s",
                 (NOW, export.id))
    idle = LEASE + timedelta(seconds=EXPORTS.consumer.visibility_timeout_s)
    # When the sweep runs before the message could have come back, then it waits
    assert _sweep_exports(conn, adapters.export_publisher(), NOW + idle - timedelta(seconds=1)).reoffered == 0
    # And afterwards it sends the message again (once a period), and the consumer finishes it
    assert _sweep_exports(conn, adapters.export_publisher(), NOW + idle).reoffered == 1
    assert _sweep_exports(conn, adapters.export_publisher(), NOW + idle + timedelta(minutes=1)).reoffered == 0
    clock.install(lambda: NOW + idle)
    drain(aws)
    assert ex.get_export(conn, workspace_id=a, export_id=export.id).state == "succeeded"


def test_a_failure_recorded_by_an_export_attempt_that_was_taken_over_changes_nothing(aws, conn, tenants):
    from timekeeper.db.attempts import Failure, settle_failed

    # Given an export whose first attempt was taken over by a second one
    a, _ = tenants
    export, _ = request(conn, a, save_query(conn, a))
    conn.execute("UPDATE exports SET state = 'running', attempts = 1, started_at = %s WHERE id = %s", (NOW, export.id))
    first = ex.get_export(conn, workspace_id=a, export_id=export.id)
    conn.execute("UPDATE exports SET attempts = 2 WHERE id = %s", (export.id,))
    # When the first attempt records its failure late
    left = settle_failed(conn, ex.EXPORT_LIFECYCLE, first, Failure(ex.DEFINITION_INVALID, "late"), now=NOW)
    # Then nothing is written
    assert (left.state, left.attempts, left.error_code) == ("running", 2, None)
    # And the second attempt's failure is recorded
    second = ex.get_export(conn, workspace_id=a, export_id=export.id)
    done = settle_failed(conn, ex.EXPORT_LIFECYCLE, second, Failure(ex.DEFINITION_INVALID, "gone"), now=NOW)
    assert (done.state, done.error_code, done.error_message) == ("failed", ex.DEFINITION_INVALID, "gone")
