"""Delivery retries within the message's receives: an infrastructure fault or an
unfinished render is received again after a short backoff (the visibility timeout set by
the one SQS batch entry), an unfinished render on the last receive is `render_unfinished`,
and the permanent refusals settle at once: `definition_invalid`, `render_failed`,
`delivery_settings_missing`. Real PostgreSQL, moto S3, SES and SQS."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest

from tests.integration import test_delivery as base
from tests.integration.test_delivery import (
    BUCKET,
    NOW,
    _deliveries,
    _process,
    _run,
    _schedule,
    _scheduled_run,
    _u,
)
from tests.support import ListPublisher, ProviderDown, dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.edge import adapters
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import rendering
from timekeeper.reporting.query_schedules import Source
from timekeeper.reporting.work_kinds import register
from timekeeper.schedules import service
from timekeeper.schedules.consumer import RetryLater
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import QUERIES

#: The delivery tests' fixtures: moto, the services and the tenant.
aws, env, tenant = base.aws, base.env, base.tenant


def test_a_failed_submission_is_received_again_after_the_backoff_not_the_dispatchers_reoffer(conn, env, tenant):
    # Given a run whose one recipient's submission fails on the first receive
    schedule = _schedule(conn, tenant, recipients=("ron",))
    message = _scheduled_run(conn, env, schedule)
    env.mailer.fail = {"ws1.ron@x.test"}
    # When the consumer runs it
    with pytest.raises(RetryLater) as first:
        _process(conn, env, message)
    # Then the message is to be received again after the pipeline's first backoff, well inside the
    # dispatcher's re-offer of a stranded run, and the lease is given back for that receive
    assert first.value.delay_s == QUERIES.retry_backoff_s[0] == 30
    assert first.value.delay_s < QUERIES.reoffer_after_s
    # And the second receive, after the backoff, sends it
    _process(conn, env, message, receive_count=2, now=NOW + timedelta(hours=1, minutes=2, seconds=30))
    assert _deliveries(conn, tenant, message.run_id) == {"ron": ("sent", None)}


def test_each_later_receive_waits_the_next_backoff(conn, env, tenant):
    schedule = _schedule(conn, tenant, recipients=("ron",))
    message = _scheduled_run(conn, env, schedule)

    env.services.mailer = ProviderDown()
    delays = []
    for receive in (1, 2):
        with pytest.raises(RetryLater) as caught:
            _process(conn, env, message, receive_count=receive)
        delays.append(caught.value.delay_s)
    assert delays == [30, 120]


def test_an_unfinished_render_is_retried_within_the_receives_and_named_on_the_last(conn, env, tenant):
    schedule = _schedule(conn, tenant, source=Source("report", report_id=tenant.report_id), fmt="pdf",
                         recipients=("rita",), name="Slow report")
    message = _scheduled_run(conn, env, schedule)
    env.renderer.idle = True
    for receive in (1, 2):
        with pytest.raises(RetryLater, match="RenderUnfinished"):
            _process(conn, env, message, receive_count=receive)
    _process(conn, env, message, receive_count=QUERIES.consumer.max_receive_count)
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "render_unfinished")
    assert env.mailer.sent == []


def test_a_query_version_that_no_longer_compiles_fails_definition_invalid_without_retry(conn, env, tenant):
    # Given a schedule whose pinned query version names a column the catalogue no longer has
    schedule = _schedule(conn, tenant, recipients=("rita",), name="Broken query")
    conn.execute("ALTER TABLE saved_query_versions DISABLE TRIGGER USER")
    conn.execute("UPDATE saved_query_versions SET definition = jsonb_set(definition, '{columns}', "
                 "'[\"no_such_column\"]') WHERE query_id = %s", (tenant.query_id,))
    conn.execute("ALTER TABLE saved_query_versions ENABLE TRIGGER USER")
    message = _scheduled_run(conn, env, schedule)
    try:
        # When the consumer runs it (first receive)
        _process(conn, env, message)
    finally:
        conn.execute("ALTER TABLE saved_query_versions DISABLE TRIGGER USER")
        conn.execute("UPDATE saved_query_versions SET definition = jsonb_set(definition, '{columns}', "
                     "'[\"number\", \"amount_minor\"]') WHERE query_id = %s", (tenant.query_id,))
        conn.execute("ALTER TABLE saved_query_versions ENABLE TRIGGER USER")
    # Then it failed at once with the code, sent nothing and wrote no file
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "definition_invalid")
    assert run["error"].startswith("columns[0]: invoices has no such column")
    assert env.mailer.sent == [] and dl.get_source(conn, workspace_id=tenant.workspace_id, run_id=message.run_id) \
        is None


class _RefusingS3:
    """An S3 client whose uploads fail (the renderer's bucket is unavailable)."""

    def put_object(self, **_):
        raise ConnectionError("bucket unavailable")


def test_a_failed_render_fails_render_failed_without_retry(conn, env, tenant, db_url):
    # Given a report schedule whose render fails on its renderer's last attempt (not an access or definition fault)
    schedule = _schedule(conn, tenant, source=Source("report", report_id=tenant.report_id), fmt="pdf",
                         recipients=("rita",), name="Failing report")
    message = _scheduled_run(conn, env, schedule)

    class FailingRenderer:
        def request(self, *, workspace_id, render_id):
            with connect(db_url) as c:
                rendering.render(c, _RefusingS3(), BUCKET, workspace_id=workspace_id, render_id=render_id, now=NOW,
                                 max_attempts=1)

    env.services.renderer = FailingRenderer()
    # When the consumer runs it (first receive)
    _process(conn, env, message)
    # Then it failed at once with render_failed and sent nothing
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "render_failed")
    assert "unexpected_error" in run["error"] and env.mailer.sent == []


def test_a_delivery_schedule_without_settings_fails_delivery_settings_missing(conn, env, tenant):
    # Given a queries.deliver schedule made past the routes (the generic service without the registry)
    schedule = service.create_schedule(conn, workspace_id=tenant.workspace_id, owner="queries",
                                       work_kind="queries.deliver", actor=_u(tenant, "olga"),
                                       recurrence={"cron": "0 7 * * *", "timezone": "UTC"}, now=NOW)
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings("queries"), now=NOW + timedelta(hours=1, minutes=1), publisher=publisher,
             registry=env.kinds)
    (message,) = [m for m in publisher.sent if m.schedule_id == schedule.id]
    # When the consumer runs it
    _process(conn, env, message)
    # Then it failed at once, naming what is missing
    run = _run(conn, message.run_id)
    assert (run["state"], run["outcome_code"]) == ("failed", "delivery_settings_missing")
    assert env.mailer.sent == []


# ------------------------------------------------------------------ the time budget


def test_a_twelve_minute_render_poll_and_a_thousand_recipients_fit_in_the_consumers_time():
    # The arithmetic the work kind checks when it is registered, with the topology's consumer timeout:
    # 60 s of run overhead + the 720 s poll + one 5 s poll interval it may overshoot by
    # + 1,000 recipients x 20 ms (the slower per-send cost measured against moto, rounded up)
    assert dl.RENDER_POLL_S == 12 * 60 and dl.MAX_RECIPIENTS == 1000
    assert dl.worst_case_run_s(1000) == pytest.approx(60 + 720 + 5 + 1000 * 0.02) == pytest.approx(805)
    assert dl.worst_case_run_s(dl.MAX_RECIPIENTS) <= QUERIES.consumer.timeout_s == 900
    # And a consumer too short for it is refused when the work kind registers
    with pytest.raises(ValueError, match="does not fit"):
        register(WorkKindRegistry(), consumer_timeout_s=800)


def test_the_visibility_adapter_changes_the_received_messages_visibility(aws, monkeypatch):
    # Given a run queue in moto with one message received under the queue's visibility timeout
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="timekeeper-queries-runs",
                           Attributes={"VisibilityTimeout": str(QUERIES.consumer.visibility_timeout_s)})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    (received,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    adapters.reset()
    # When the edge's adapter sets its visibility (to 0 here, so the test need not wait)
    adapters.change_visibility(arn, received["ReceiptHandle"], 0)
    # Then it can be received again at once
    assert len(sqs.receive_message(QueueUrl=url).get("Messages", [])) == 1
    adapters.reset()
