"""Rendering reports to PDF: the row keyed by the idempotency key, the access rule at
render time, the object written once per key, deterministic bytes, failure codes, and the
renderer's Lambda handler (malformed events dropped), against PostgreSQL and moto S3."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta
from uuid import uuid4

import boto3
import pytest
from moto import mock_aws
from pypdf import PdfReader

from tests.integration.report_helpers import NOW, definition, make_tenant
from timekeeper import clock, edge
from timekeeper.db.connection import connect
from timekeeper.db.idempotency import KeyReused
from timekeeper.edge import adapters
from timekeeper.local.lambdas import invoke
from timekeeper.platform import directory
from timekeeper.reporting import catalogue, reports, store
from timekeeper.reporting.rendering import (
    CHART_POINT_CAP,
    TABLE_ROW_CAP,
    get_render,
    object_key,
    render,
    request_render,
)

BUCKET = "timekeeper-files-test"


@pytest.fixture
def s3(monkeypatch):
    """moto S3 with the files bucket; ``s3.puts`` lists the keys of every PutObject call."""
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        client.puts = []
        client.meta.events.register("before-call.s3.PutObject",
                                    lambda params, **_: client.puts.append(params["url_path"]))
        yield client


@pytest.fixture(scope="module")
def tenant(db_url):
    with connect(db_url) as c:
        return make_tenant(c, "render")


def _report(conn, tenant, data=None):
    return reports.create_report(conn, workspace_id=tenant.workspace_id, name="r", actor=tenant.author, now=NOW,
                                 definition=data or definition(tenant))[0]


def _request(conn, tenant, report, key=None, user=None):
    return request_render(conn, workspace_id=tenant.workspace_id, report_id=report.id,
                          idempotency_key=key or str(uuid4()), requested_by=user or tenant.reader, now=NOW)


def _object(s3, key) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _text(pdf: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


def test_a_render_writes_a_pdf_with_the_reports_content(conn, tenant, s3):
    # Given a report of a table, a bar chart and a line chart, and a render requested
    report = _report(conn, tenant)
    requested = _request(conn, tenant, report, key="delivery-run-1")
    assert (requested.state, requested.report_version, requested.attempts) == ("requested", 1, 0)

    # When the renderer runs it
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id,
                  now=NOW + timedelta(seconds=5))

    # Then it succeeded, and the object under the key derived from the idempotency key is a
    # PDF whose recorded hash and size are the object's
    assert done.state == "succeeded" and done.error_code is None and done.attempts == 1
    digest = hashlib.sha256(b"delivery-run-1").hexdigest()
    assert done.object_key == object_key(tenant.workspace_id, "delivery-run-1") == \
        f"reports/{tenant.workspace_id}/{digest}.pdf"
    pdf = _object(s3, done.object_key)
    assert pdf.startswith(b"%PDF-")
    assert done.sha256 == hashlib.sha256(pdf).hexdigest() and done.byte_size == len(pdf)
    assert done.page_count == len(PdfReader(io.BytesIO(pdf)).pages) >= 1
    text = _text(pdf)
    for expected in ("Monthly invoices", "All invoices", "Amount by invoice", "Amount trend", "INV-5", "Member M3",
                     "€99.00"):
        assert expected in text, expected
    head = s3.head_object(Bucket=BUCKET, Key=done.object_key)
    assert head["ContentType"] == "application/pdf" and head["Metadata"]["sha256"] == done.sha256


def test_a_repeated_render_with_the_same_key_writes_the_object_once(conn, tenant, s3):
    # Given a succeeded render
    report = _report(conn, tenant)
    first = _request(conn, tenant, report, key="same-key")
    render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=first.id, now=NOW)
    # When the same key is requested and rendered again
    again = _request(conn, tenant, report, key="same-key")
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=again.id, now=NOW)
    # Then it is the same row, nothing ran again, and S3 saw one PutObject
    assert again.id == first.id and done.state == "succeeded" and done.attempts == 1
    assert len(s3.puts) == 1
    # And the key cannot be reused for another report
    with pytest.raises(KeyReused):
        _request(conn, tenant, _report(conn, tenant), key="same-key")


def test_the_pdf_is_deterministic_so_a_retry_after_a_crash_rewrites_the_same_bytes(conn, tenant, s3):
    # Given a render that uploaded its PDF, then "crashed" before recording it
    report = _report(conn, tenant)
    requested = _request(conn, tenant, report, key="crash-after-upload")
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW)
    first = _object(s3, done.object_key)
    conn.execute("UPDATE report_renders SET state = 'rendering', object_key = NULL, sha256 = NULL, byte_size = NULL, "
                 "finished_at = NULL WHERE id = %s", (requested.id,))
    # When the retry runs, later
    retried = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id,
                     now=NOW + timedelta(minutes=3))
    # Then it overwrote the same key with identical bytes
    assert retried.state == "succeeded" and retried.attempts == 2
    assert s3.puts == [f"/{done.object_key}"] * 2
    assert _object(s3, retried.object_key) == first and retried.sha256 == done.sha256


def test_a_table_shows_at_most_the_cap_and_says_so(conn, s3):
    # Given a query returning more rows than a table shows
    big = make_tenant(conn, "big", invoices=TABLE_ROW_CAP + 5)
    data = {"title": "Everything", "sections": [
        {"heading": "Every invoice", "query_id": str(big.invoices_query)},
        {"heading": "Bars", "query_id": str(big.invoices_query), "display": "bar_chart", "label_column": "number",
         "value_column": "amount_minor"}]}
    report = _report(conn, big, data)
    # When rendered
    done = render(conn, s3, BUCKET, workspace_id=big.workspace_id, render_id=_request(conn, big, report).id, now=NOW)
    # Then the table stops at the cap, the chart at its cap, and the PDF says both
    text = _text(_object(s3, done.object_key))
    assert f"INV-{TABLE_ROW_CAP:05d}" in text and f"INV-{TABLE_ROW_CAP + 1:05d}" not in text
    assert f"showing the first {TABLE_ROW_CAP:,} rows only" in text
    assert f"showing the first {CHART_POINT_CAP:,} points only" in text


@pytest.mark.parametrize(("loss", "code"), [
    ("deactivated", "user_deactivated"), ("left", "left_workspace"), ("role", "missing_role"),
    ("stranger", "not_a_member"), ("deleted", "not_found"),
])
def test_a_requester_without_access_at_render_time_fails_with_the_rules_reason(conn, tenant, s3, loss, code):
    # Given a render requested by someone who then loses access
    user = f"loser-{uuid4().hex[:8]}"
    with conn.transaction():
        directory.upsert_user(conn, user_id=user, now=NOW)
        directory.add_member(conn, workspace_id=tenant.workspace_id, user_id=user, roles=["reports:read"], now=NOW)
    report = _report(conn, tenant)
    requested = _request(conn, tenant, report, user="nobody-at-all" if loss == "stranger" else user)
    with conn.transaction():
        if loss == "deactivated":
            directory.set_user_status(conn, user, "deactivated", now=NOW)
        elif loss == "left":
            directory.leave_workspace(conn, workspace_id=tenant.workspace_id, user_id=user, now=NOW)
        elif loss == "role":
            directory.add_member(conn, workspace_id=tenant.workspace_id, user_id=user, roles=["queries:read"],
                                 now=NOW)
        elif loss == "deleted":
            reports.delete_report(conn, workspace_id=tenant.workspace_id, report_id=report.id, now=NOW)
    # When rendered
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW)
    # Then it failed with the access rule's reason, and nothing was written
    assert (done.state, done.error_code) == ("failed", code)
    assert done.object_key is None and s3.puts == []
    # And rendering it again changes nothing
    assert render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW) == done


def test_a_query_version_that_no_longer_compiles_fails_with_definition_invalid(conn, s3, monkeypatch):
    # Given a report over a query, and the catalogue then drops a column the query selects
    t = make_tenant(conn, f"drop-{uuid4().hex[:6]}")
    report = _report(conn, t)
    requested = _request(conn, t, report)
    invoices = catalogue.CATALOGUE["invoices"]
    trimmed = {k: v for k, v in invoices.columns.items() if k != "member_name"}
    monkeypatch.setitem(catalogue.CATALOGUE, "invoices", catalogue.Entity(
        name=invoices.name, label=invoices.label, table=invoices.table, columns=trimmed, joins=invoices.joins))
    # When rendered
    done = render(conn, s3, BUCKET, workspace_id=t.workspace_id, render_id=requested.id, now=NOW)
    # Then it failed with definition_invalid naming the section
    assert (done.state, done.error_code) == ("failed", "definition_invalid")
    assert done.error_message.startswith("sections[0]") and "columns[1]" in done.error_message
    assert s3.puts == []


def test_a_chart_column_gone_from_the_current_query_version_fails_with_definition_invalid(conn, tenant, s3):
    # Given a report charting an unpinned query, whose next version drops the value column
    with conn.transaction():
        query, _ = store.create_query(conn, workspace_id=tenant.workspace_id, name="q", actor=tenant.author, now=NOW,
                                      definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
    data = {"title": "t", "sections": [{"heading": "h", "query_id": str(query.id), "display": "bar_chart",
                                        "label_column": "number", "value_column": "amount_minor"}]}
    report = _report(conn, tenant, data)
    store.add_version(conn, workspace_id=tenant.workspace_id, query_id=query.id, actor=tenant.author, now=NOW,
                      definition={"entity": "invoices", "columns": ["number"]})
    # When rendered, then it fails naming the section's field
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=_request(conn, tenant, report).id,
                  now=NOW)
    assert (done.state, done.error_code) == ("failed", "definition_invalid")
    assert done.error_message.startswith("sections[0].value_column")


def test_the_render_pins_the_version_current_at_the_first_request(conn, tenant, s3):
    # Given a render requested at version 1, then the report is edited
    report = _report(conn, tenant)
    requested = _request(conn, tenant, report, key=f"pin-{uuid4()}")
    reports.update_report(conn, workspace_id=tenant.workspace_id, report_id=report.id,
                          definition=definition(tenant, "Version two"), actor=tenant.author, now=NOW)
    # When rendered (and requested again with the same key)
    again = _request(conn, tenant, report, key=requested.idempotency_key)
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW)
    # Then version 1 was rendered
    assert again.report_version == done.report_version == 1
    assert "Monthly invoices" in _text(_object(s3, done.object_key))


def test_an_unexpected_fault_raises_until_the_last_attempt_then_is_recorded(conn, tenant, s3):
    # Given a render whose upload fails (no such bucket)
    requested = _request(conn, tenant, _report(conn, tenant))
    # Then the first attempts raise for the invoker to retry
    for attempt in (1, 2):
        with pytest.raises(Exception):  # noqa: B017,PT011 - botocore's NoSuchBucket
            render(conn, s3, "no-such-bucket", workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW,
                   max_attempts=3)
        assert get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id).attempts == attempt
    # And the last one records the failure
    done = render(conn, s3, "no-such-bucket", workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW,
                  max_attempts=3)
    assert (done.state, done.error_code, done.attempts) == ("failed", "unexpected_error", 3)
    assert "NoSuchBucket" in done.error_message


def test_attempts_that_died_without_a_record_end_as_attempts_exhausted(conn, tenant, s3):
    requested = _request(conn, tenant, _report(conn, tenant))
    conn.execute("UPDATE report_renders SET state = 'rendering', attempts = 3 WHERE id = %s", (requested.id,))
    done = render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=requested.id, now=NOW, max_attempts=3)
    assert (done.state, done.error_code, done.attempts) == ("failed", "attempts_exhausted", 3)
    assert s3.puts == []


def test_another_workspace_cannot_request_or_render_a_report(conn, tenant, s3):
    other = make_tenant(conn, f"other-{uuid4().hex[:6]}")
    report = _report(conn, tenant)
    with pytest.raises(reports.ReportNotFound):
        request_render(conn, workspace_id=other.workspace_id, report_id=report.id, idempotency_key="k",
                       requested_by=other.reader, now=NOW)
    requested = _request(conn, tenant, report)
    from timekeeper.reporting.rendering import RenderNotFound

    with pytest.raises(RenderNotFound):
        render(conn, s3, BUCKET, workspace_id=other.workspace_id, render_id=requested.id, now=NOW)


# ------------------------------------------------------------------------------ the handler


@pytest.fixture
def renderer_env(db_url, s3, monkeypatch):
    for key, value in {"POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": db_url, "FILES_BUCKET": BUCKET}.items():
        monkeypatch.setenv(key, value)
    edge.reset()
    clock.install(lambda: NOW + timedelta(minutes=1))
    yield s3
    edge.reset()
    clock.install(None)


def test_the_handler_renders_the_named_render(conn, tenant, renderer_env):
    requested = _request(conn, tenant, _report(conn, tenant))
    result = invoke("report_renderer", {"workspace_id": str(tenant.workspace_id), "render_id": str(requested.id)})
    assert result["state"] == "succeeded" and result["error_code"] is None
    done = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    assert _object(renderer_env, done.object_key).startswith(b"%PDF-")


@pytest.mark.parametrize("event", [
    {}, {"workspace_id": "nope", "render_id": str(uuid4())}, {"render_id": str(uuid4())},
    {"workspace_id": str(uuid4()), "render_id": str(uuid4()), "extra": 1}, ["not", "an", "object"],
])
def test_the_handler_drops_a_malformed_event(renderer_env, event):
    # When the handler gets a malformed event, then it returns (no retry) and writes nothing
    assert invoke("report_renderer", event) == {"dropped": "malformed"}
    assert renderer_env.puts == []


def test_the_handler_drops_an_event_naming_no_render(renderer_env):
    event = {"workspace_id": str(uuid4()), "render_id": str(uuid4())}
    assert invoke("report_renderer", json.loads(json.dumps(event))) == {"dropped": "render_not_found"}


def test_the_local_stack_runs_requested_renders_through_the_real_handler(db_url, conn, tenant):
    # Given the local stack (in-process moto with the files bucket) on this database
    from timekeeper.local.stack import start_local_stack

    stack = start_local_stack(database="unused", reset=False, aws_server=False, database_url=db_url)
    try:
        requested = _request(conn, tenant, _report(conn, tenant))
        # When a caller asks the edge's renderer client for it, as the API and delivery do
        adapters.renderer_client().request(workspace_id=tenant.workspace_id, render_id=requested.id)
        stack.renderer.wait()
        # Then the real handler rendered it in the background into the local files bucket
        done = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
        assert done.state == "succeeded", done
        pdf = stack.aws.client("s3").get_object(Bucket=stack.aws.files_bucket, Key=done.object_key)["Body"].read()
        assert hashlib.sha256(pdf).hexdigest() == done.sha256
        assert stack.renderer.failed == []
    finally:
        stack.stop()


def test_a_last_attempt_whose_connection_is_cut_is_still_settled(conn, tenant, renderer_env):
    # Given a render on its last attempt (two earlier attempts raised), and a cut of the
    # renderer's database connection (its server process terminated) while the PDF uploads
    requested = _request(conn, tenant, _report(conn, tenant))
    conn.execute("UPDATE report_renders SET state = 'rendering', attempts = 2 WHERE id = %s", (requested.id,))

    def cut_the_renderers_connection(**_):
        pid = adapters.renderer_database().current().info.backend_pid
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    adapters.s3_client().meta.events.register("before-call.s3.PutObject", cut_the_renderers_connection)
    # When the renderer runs it: recording the result meets the lost connection
    result = invoke("report_renderer", {"workspace_id": str(tenant.workspace_id), "render_id": str(requested.id)})
    # Then the render is settled all the same (on a fresh connection), not left rendering
    done = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    assert (done.state, done.attempts) == ("succeeded", 3), done
    assert result["state"] == "succeeded"


# ------------------------------------------------------------------------------ the sweep


class _Renderer:
    """A renderer client that records what it was asked for (``refuse``: raises instead)."""

    def __init__(self, refuse: bool = False) -> None:
        self.asked: list[tuple] = []
        self.refuse = refuse

    def request(self, *, workspace_id, render_id) -> None:
        self.asked.append((workspace_id, render_id))
        if self.refuse:
            raise RuntimeError("throttled")


def _sweep(conn, renderer, at):
    from timekeeper.reporting.rendering import sweep_renders
    from timekeeper.topology import REPORT_RENDERER as R

    return sweep_renders(conn, renderer, now=at, lease=R.lease, reoffer_after=R.reoffer_after,
                         max_attempts=R.max_attempts)


def _unfinished(conn):
    """Settle every unfinished render of earlier tests, so a sweep sees this test's only."""
    conn.execute("UPDATE report_renders SET state = 'failed' WHERE state IN ('requested', 'rendering')")


def test_the_sweep_settles_a_render_whose_last_attempt_died_unrecorded_once_its_lease_ran_out(conn, tenant):
    # Given a render whose third and last attempt started at NOW and never recorded an outcome
    _unfinished(conn)
    requested = _request(conn, tenant, _report(conn, tenant))
    conn.execute("UPDATE report_renders SET state = 'rendering', attempts = 3, started_at = %s WHERE id = %s",
                 (NOW, requested.id))
    renderer = _Renderer()
    # When the sweep runs inside the attempt's lease, then it leaves the render alone
    assert _sweep(conn, renderer, NOW + timedelta(seconds=299)).settled == 0
    assert get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id).state == "rendering"
    # And once the lease ran out it settles it failed, asking the renderer for nothing
    assert _sweep(conn, renderer, NOW + timedelta(seconds=300)).settled == 1
    done = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    assert (done.state, done.error_code, done.attempts) == ("failed", "attempts_exhausted", 3)
    assert done.finished_at == NOW + timedelta(seconds=300) and renderer.asked == []


def test_the_sweep_asks_again_for_a_render_nothing_ran_then_settles_it_after_as_many_asks_as_attempts(conn, tenant):
    # Given a render requested at NOW whose invocation was lost (nothing ever started it)
    _unfinished(conn)
    requested = _request(conn, tenant, _report(conn, tenant))
    renderer = _Renderer()
    idle = timedelta(seconds=900 + 300)  # the invocation's maximum event age and one timeout
    # When the sweep runs before nothing of Lambda's can still run it, then it waits
    assert _sweep(conn, renderer, NOW + idle - timedelta(seconds=1)).reoffered == 0
    # And then it asks the renderer again, once a re-offer period
    at = NOW + idle
    assert _sweep(conn, renderer, at).reoffered == 1
    assert renderer.asked == [(tenant.workspace_id, requested.id)]
    assert _sweep(conn, renderer, at + idle - timedelta(seconds=1)).reoffered == 0
    # And an ask the renderer refuses is counted too: the third re-offer is the last
    refusing = _Renderer(refuse=True)
    assert _sweep(conn, refusing, at + idle).refused == 1
    assert _sweep(conn, renderer, at + 2 * idle).reoffered == 1
    done = _sweep(conn, renderer, at + 3 * idle)
    assert (done.settled, done.reoffered) == (1, 0)
    row = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    assert (row.state, row.error_code) == ("failed", "attempts_exhausted")


def test_the_sweep_leaves_a_finished_render_and_one_an_attempt_is_running(conn, tenant, s3):
    # Given a succeeded render, and one whose first attempt started a minute ago
    _unfinished(conn)
    finished = _request(conn, tenant, _report(conn, tenant))
    render(conn, s3, BUCKET, workspace_id=tenant.workspace_id, render_id=finished.id, now=NOW)
    running = _request(conn, tenant, _report(conn, tenant))
    conn.execute("UPDATE report_renders SET state = 'rendering', attempts = 1, started_at = %s WHERE id = %s",
                 (NOW + timedelta(hours=2), running.id))
    # When the sweep runs, then neither is touched
    done = _sweep(conn, _Renderer(), NOW + timedelta(hours=2, minutes=1))
    assert (done.settled, done.reoffered) == (0, 0)


def test_the_queries_dispatchers_owner_wide_pass_runs_the_renders_sweep():
    from timekeeper.edge.registries import RENDERS_SWEEP_TASK, assemble_work_kinds
    from timekeeper.topology import QUERIES, REPORT_RENDERER

    assert REPORT_RENDERER.swept_by == QUERIES.name
    assert RENDERS_SWEEP_TASK in assemble_work_kinds().maintenance(QUERIES.owner)


def test_the_queries_dispatcher_settles_a_render_left_rendering_by_a_cut_on_its_last_attempt(
        conn, tenant, renderer_env, monkeypatch):
    # Given a render whose last attempt started at NOW and lost its connection unrecorded,
    # and the real queries dispatcher configured as partition 0 is in AWS
    from tests.support import scheduled_event
    from timekeeper.local.aws import create_pipeline_queues
    from timekeeper.topology import QUERIES, REPORT_RENDERER

    _unfinished(conn)
    requested = _request(conn, tenant, _report(conn, tenant))
    conn.execute("UPDATE report_renders SET state = 'rendering', attempts = 3, started_at = %s WHERE id = %s",
                 (NOW, requested.id))
    monkeypatch.setenv("RUN_QUEUE_URL_QUERIES", create_pipeline_queues(boto3.client("sqs"), QUERIES).url)
    monkeypatch.setenv("NOTIFICATION_TOPIC_ARN", boto3.client("sns").create_topic(Name="notices")["TopicArn"])
    monkeypatch.setenv("LINK_SIGNING_KEY", "k" * 40)
    edge.reset()
    tick = {"partition": 0, "partitions": QUERIES.dispatch_partitions}
    # When partition 0 ticks once the last attempt's lease ran out
    later = NOW + REPORT_RENDERER.lease
    clock.install(lambda: later)
    invoke("queries_dispatcher", scheduled_event(later, tick))
    # Then the render is settled, not left rendering
    done = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    assert (done.state, done.error_code, done.finished_at) == ("failed", "attempts_exhausted", later)


def test_a_failure_recorded_by_an_attempt_that_was_taken_over_changes_nothing(conn, tenant):
    from timekeeper.db.attempts import Failure, settle_failed
    from timekeeper.reporting.rendering import RENDER_LIFECYCLE

    # Given a render whose first attempt was taken over by a second one
    requested = _request(conn, tenant, _report(conn, tenant))
    conn.execute("UPDATE report_renders SET state = 'rendering', attempts = 1 WHERE id = %s", (requested.id,))
    first = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    conn.execute("UPDATE report_renders SET attempts = 2 WHERE id = %s", (requested.id,))
    # When the first attempt records its failure late
    left = settle_failed(conn, RENDER_LIFECYCLE, first, Failure("definition_invalid", "late"), now=NOW)
    # Then nothing is written: the row is as the second attempt holds it
    assert (left.state, left.attempts, left.error_code) == ("rendering", 2, None)
    # And the second attempt's failure is recorded, its message cut to the kind's limit
    second = get_render(conn, workspace_id=tenant.workspace_id, render_id=requested.id)
    done = settle_failed(conn, RENDER_LIFECYCLE, second, Failure("definition_invalid", "x" * 5000), now=NOW)
    assert (done.state, done.error_code, len(done.error_message)) == ("failed", "definition_invalid", 1000)
