"""User-defined queries run walled by row-level security: a compiled statement that lost its
workspace filter (a compiler defect, made here on purpose) still reads only the run's
workspace, on the paths production takes (the exports consumer's handler and the report
renderer, as the workers' login), while the same statement run by the workers' login
outside the wall reads every workspace. Under the wall nothing but the catalogue's tables
can be read, and nothing written."""

from __future__ import annotations

import csv
import io
import json

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql

from tests.integration import test_delivery as delivery_tests
from tests.integration.report_helpers import NOW, make_tenant
from tests.integration.test_delivery import aws, env
from tests.support import sqs_event
from timekeeper import clock, edge
from timekeeper.db.connection import QUERY_ROLE, WORKER_LOGIN, connect, login_url, walled_query
from timekeeper.edge import adapters
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.lambdas import invoke
from timekeeper.reporting import catalogue, compiler, rendering, reports
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import exports as ex
from timekeeper.topology import EXPORTS

BUCKET = "files"
#: The delivery tests' fixtures, used here by name.
FIXTURES = (aws, env)


def unscoped_compile(definition, *, workspace_id, **options):
    """The compiler with a defect: the statement it returns has no workspace condition."""
    real = compiler.compile_query(definition, workspace_id=workspace_id, **options)
    text = real.statement.as_string(None)
    assert "t.workspace_id = %(workspace_id)s" in text
    return compiler.CompiledQuery(statement=sql.SQL(text.replace("t.workspace_id = %(workspace_id)s", "true")),
                                  params=real.params, columns=real.columns, workspace_id=real.workspace_id)


@pytest.fixture(scope="module")
def tenants(db_url):
    with connect(db_url) as c:
        return make_tenant(c, "wall-a"), make_tenant(c, "wall-b", invoices=3)


@pytest.fixture
def worker_url(db_url) -> str:
    return login_url(db_url, WORKER_LOGIN)


def _numbers(conn, workspace_id) -> list[str]:
    return [r["number"] for r in conn.execute("SELECT number FROM invoices WHERE workspace_id = %s ORDER BY number",
                                              (workspace_id,)).fetchall()]


def test_the_defect_reads_every_workspace_outside_the_wall(worker_url, tenants):
    # The control: the defective statement, run by the workers' login without the wall
    a, b = tenants
    with connect(worker_url) as conn:
        version = conn.execute("SELECT definition FROM saved_query_versions WHERE query_id = %s",
                               (a.invoices_query,)).fetchone()["definition"]
        compiled = unscoped_compile(version, workspace_id=a.workspace_id)
        with conn.transaction():
            rows = conn.execute(compiled.statement, compiled.params).fetchall()
        seen = {r["number"] for r in rows}
        assert set(_numbers(conn, b.workspace_id)) <= seen and set(_numbers(conn, a.workspace_id)) <= seen


@pytest.fixture
def exports_aws(worker_url, monkeypatch):
    """moto with the exports queue and the files bucket; the edge as the consumer's, on the
    workers' login."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": worker_url, "FILES_BUCKET": BUCKET}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs, s3 = boto3.client("sqs"), boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        pair = create_pipeline_queues(sqs, EXPORTS)
        monkeypatch.setenv(EXPORTS.queue_url_variable, pair.url)
        edge.reset()
        clock.install(lambda: NOW)
        yield {"sqs": sqs, "s3": s3, "queue": pair}
        edge.reset()
        clock.install(None)


def test_an_unscoped_export_statement_reads_only_the_exports_workspace(exports_aws, conn, tenants, monkeypatch):
    a, b = tenants
    monkeypatch.setattr(ex, "compile_query", unscoped_compile)
    # Given an export of workspace A's invoices query, requested as production requests it
    export, _ = ex.request_export(conn, workspace_id=a.workspace_id, query_id=a.invoices_query, version=None,
                                  format="csv", requested_by=a.author, idempotency_key=None, now=NOW,
                                  publisher=adapters.export_publisher())
    # When the exports consumer's handler runs it, with the defective compiler
    got = exports_aws["sqs"].receive_message(QueueUrl=exports_aws["queue"].url, MaxNumberOfMessages=10)["Messages"]
    assert [invoke("export_consumer", sqs_event(json.loads(m["Body"]))) for m in got] == [{"batchItemFailures": []}]
    # Then the file holds workspace A's invoices and none of B's
    done = ex.get_export(conn, workspace_id=a.workspace_id, export_id=export.id)
    assert done.state == "succeeded"
    body = exports_aws["s3"].get_object(Bucket=BUCKET, Key=done.object_key)["Body"].read().decode()
    numbers = [row[0] for row in list(csv.reader(io.StringIO(body)))[1:]]
    assert numbers == _numbers(conn, a.workspace_id) and done.row_count == len(numbers) == 5
    assert not set(numbers) & set(_numbers(conn, b.workspace_id))


def test_an_unscoped_report_section_reads_only_the_renders_workspace(worker_url, conn, tenants, monkeypatch):
    a, b = tenants
    monkeypatch.setattr(rendering, "compile_query", unscoped_compile)
    seen: list[tuple] = []
    real_section = rendering._section_data

    def recording(*args, **kwargs):
        data = real_section(*args, **kwargs)
        seen.extend(data.rows)
        return data

    monkeypatch.setattr(rendering, "_section_data", recording)
    report = reports.create_report(conn, workspace_id=a.workspace_id, name="wall", actor=a.author, now=NOW,
                                   definition={"title": "Wall", "sections": [
                                       {"heading": "All", "query_id": str(a.invoices_query), "display": "table"}]})[0]
    requested = rendering.request_render(conn, workspace_id=a.workspace_id, report_id=report.id,
                                         idempotency_key="wall-1", requested_by=a.reader, now=NOW)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        with connect(worker_url) as worker:
            done = rendering.render(worker, s3, BUCKET, workspace_id=a.workspace_id, render_id=requested.id, now=NOW)
    assert done.state == "succeeded"
    assert sorted(row[0] for row in seen) == _numbers(conn, a.workspace_id)


@pytest.fixture(scope="module")
def delivery_tenant(db_url):
    with connect(db_url) as c:
        return delivery_tests.make_tenant(c, "ws1")


def test_an_unscoped_delivery_file_holds_only_the_runs_workspace(conn, env, delivery_tenant, tenants,
                                                                  monkeypatch):
    # Given a query delivery of a third workspace, the compiler dropping its workspace filter
    monkeypatch.setattr(dl, "compile_query", unscoped_compile)
    schedule = delivery_tests._schedule(conn, delivery_tenant, recipients=("rita",))
    message = delivery_tests._scheduled_run(conn, env, schedule)
    # When the queries consumer runs it
    delivery_tests._process(conn, env, message)
    # Then the delivered file holds that workspace's invoices only
    source = dl.get_source(conn, workspace_id=delivery_tenant.workspace_id, run_id=message.run_id)
    body = env.s3.get_object(Bucket=delivery_tests.BUCKET, Key=source.object_key)["Body"].read().decode()
    numbers = [row[0] for row in list(csv.reader(io.StringIO(body)))[1:]]
    assert numbers == _numbers(conn, delivery_tenant.workspace_id) == ["INV-0", "INV-1", "INV-2"]
    assert source.row_count == 3 and _numbers(conn, tenants[0].workspace_id)  # other workspaces have rows


def test_under_the_wall_only_the_catalogues_tables_are_readable_and_nothing_writable(worker_url, tenants):
    a, _ = tenants
    with connect(worker_url) as conn:
        with conn.transaction(), walled_query(conn, a.workspace_id):
            assert conn.execute("SELECT current_user AS u").fetchone() == {"u": QUERY_ROLE}
            assert conn.execute("SELECT count(*) AS n FROM invoices").fetchone()["n"] == 5
        # the role ends with the block: the workers' login again
        with conn.transaction():
            assert conn.execute("SELECT current_user AS u").fetchone() == {"u": WORKER_LOGIN}
        for statement in ("SELECT * FROM schedules", "SELECT * FROM saved_queries",
                          "UPDATE invoices SET amount_minor = 0", "DELETE FROM payments"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                with conn.transaction(), walled_query(conn, a.workspace_id):
                    conn.execute(statement)
        with pytest.raises(RuntimeError, match="open transaction"):
            with walled_query(conn, a.workspace_id):
                pass


def test_every_catalogue_table_is_granted_and_walled_for_the_query_role(conn):
    tables = {e.table for e in catalogue.CATALOGUE.values()} | {
        j.table for e in catalogue.CATALOGUE.values() for j in e.joins.values()}
    rows = conn.execute(
        "SELECT c.relname AS t, has_table_privilege(%s, c.oid, 'SELECT') AS can, c.relrowsecurity AS rls, "
        "       EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'query_isolation' "
        "               AND %s::regrole = ANY(p.polroles)) AS walled "
        "  FROM pg_class c WHERE c.relname = ANY(%s)", (QUERY_ROLE, QUERY_ROLE, sorted(tables))).fetchall()
    assert {r["t"]: (r["can"], r["rls"], r["walled"]) for r in rows} == {t: (True, True, True) for t in tables}
