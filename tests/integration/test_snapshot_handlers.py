"""The snapshot pipeline's real Lambda handlers (planner, dispatcher, run job) with
real-shaped events, against the real database and moto SQS."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from tests.support import scheduled_event
from timekeeper import clock, edge
from timekeeper import settings as settings_names
from timekeeper.edge import adapters
from timekeeper.local.lambdas import LambdaContext, load_handler
from timekeeper.platform.directory import create_workspace
from timekeeper.topology import SNAPSHOTS

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)


@pytest.fixture
def aws(db_url, conn, monkeypatch):
    """moto with the snapshot job queue; the edge configured from the environment."""
    conn.execute("TRUNCATE snapshot_runs, snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows, "
                 "workspaces CASCADE")
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": db_url, "TIMEKEEPER_ENVIRONMENT": "production"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv(settings_names.SNAPSHOT_NUDGE_FUNCTION_VARIABLE, raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName=SNAPSHOTS.consumer.queue_name)["QueueUrl"]
        monkeypatch.setenv(settings_names.SNAPSHOT_JOB_QUEUE_URL_VARIABLE, url)
        edge.reset()
        clock.install(lambda: NOW)
        yield {"sqs": sqs, "url": url}
        edge.reset()
        clock.install(None)


def invoke(function: str, event: dict, *, remaining_ms: int = 900_000):
    return load_handler(function)(event, LambdaContext(function_name=function, remaining_ms=remaining_ms))


def received(sqs, url) -> list[dict]:
    out = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
        if not got:
            return out
        for message in got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        out += got


def as_event(*messages: dict) -> dict:
    return {"Records": [{"messageId": m["MessageId"], "body": m["Body"], "eventSource": "aws:sqs",
                         "attributes": {"ApproximateReceiveCount": m["Attributes"]["ApproximateReceiveCount"]}}
                        for m in messages]}


def test_planner_dispatcher_and_run_job_publish_a_month(aws, conn):
    ws = create_workspace(conn, name="Berlin", timezone="Europe/Berlin", now=NOW - timedelta(days=20)).id
    # The planner plans February for the production types (no self-test) ...
    summary = invoke("snapshot_planner", scheduled_event(NOW))
    assert summary["planned"] == 2 and summary["overdue"] == 0
    # ... the dispatcher admits both and sends their jobs ...
    assert invoke("snapshot_dispatcher", scheduled_event(NOW))["sent"] == 2
    messages = received(aws["sqs"], aws["url"])
    assert len(messages) == 2
    # ... and the run job publishes them, acknowledging both messages.
    assert invoke("snapshot_run_job", as_event(*messages)) == {"batchItemFailures": []}
    published = conn.execute("SELECT snapshot_type, state, is_current FROM snapshot_runs WHERE workspace_id = %s "
                             "ORDER BY snapshot_type", (ws,)).fetchall()
    assert published == [{"snapshot_type": "ar_aging", "state": "published", "is_current": True},
                         {"snapshot_type": "membership_counts", "state": "published", "is_current": True}]


def test_a_malformed_job_message_fails_only_its_own_item(aws, conn):
    create_workspace(conn, name="Berlin", timezone="Europe/Berlin", now=NOW - timedelta(days=20))
    invoke("snapshot_planner", scheduled_event(NOW))
    invoke("snapshot_dispatcher", scheduled_event(NOW))
    good = received(aws["sqs"], aws["url"])
    bad = {"MessageId": "bad-1", "Body": json.dumps({"run": "nope"}), "Attributes": {"ApproximateReceiveCount": "1"}}
    response = invoke("snapshot_run_job", as_event(bad, *good))
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad-1"}]}
    assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE state = 'published'").fetchone()["n"] == 2


def test_a_job_short_of_time_hands_over_by_sending_its_message_again(aws, conn):
    create_workspace(conn, name="Berlin", timezone="Europe/Berlin", now=NOW - timedelta(days=20))
    invoke("snapshot_planner", scheduled_event(NOW))
    invoke("snapshot_dispatcher", scheduled_event(NOW))
    messages = received(aws["sqs"], aws["url"])
    # Less time left than the hand-over margin: nothing is generated, the message goes back.
    response = invoke("snapshot_run_job", as_event(messages[0]), remaining_ms=1_000)
    assert response == {"batchItemFailures": []}
    (again,) = received(aws["sqs"], aws["url"])
    assert json.loads(again["Body"]) == json.loads(messages[0]["Body"])
    assert invoke("snapshot_run_job", as_event(again)) == {"batchItemFailures": []}
    run_id = json.loads(again["Body"])["run_id"]
    assert conn.execute("SELECT state FROM snapshot_runs WHERE id = %s", (run_id,)).fetchone()["state"] == "published"


def _dispatch_while_sqs_refuses_the_send(conn) -> None:
    """Plan Berlin's two periods, then run a dispatcher pass while every SendMessageBatch
    call fails as a whole; the pass must still end normally, having sent nothing."""
    from botocore.exceptions import ClientError

    create_workspace(conn, name="Berlin", timezone="Europe/Berlin", now=NOW - timedelta(days=20))
    invoke("snapshot_planner", scheduled_event(NOW))
    client = adapters.sqs_client()

    def refuse(**_):
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "SendMessageBatch")

    client.meta.events.register("provide-client-params.sqs.SendMessageBatch", refuse)
    try:
        assert invoke("snapshot_dispatcher", scheduled_event(NOW))["sent"] == 0
    finally:
        client.meta.events.unregister("provide-client-params.sqs.SendMessageBatch", refuse)


def test_a_failed_send_of_the_jobs_fails_nothing_and_the_runs_are_offered_again(aws, conn):
    # Found by the fault campaign: a SendMessageBatch call that failed as a whole raised out
    # of the snapshot dispatcher (a Lambda error every minute while SQS refused).
    # When the queue refuses the whole send, the pass still ends normally, sending nothing
    _dispatch_while_sqs_refuses_the_send(conn)
    assert received(aws["sqs"], aws["url"]) == []
    queued = conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE state = 'queued'").fetchone()["n"]
    assert queued == 2
    # Then a pass after reoffer_after offers both again with new jobs, and they are sent
    clock.install(lambda: NOW + SNAPSHOTS.reoffer_after)
    assert invoke("snapshot_dispatcher", scheduled_event(NOW + SNAPSHOTS.reoffer_after))["sent"] == 2
    assert len(received(aws["sqs"], aws["url"])) == 2


def test_jobs_the_queue_refused_are_sent_again_by_the_next_pass(aws, conn):
    # Given a pass whose send the queue refused as a whole
    _dispatch_while_sqs_refuses_the_send(conn)
    # When the next pass runs a minute later, long before reoffer_after
    later = NOW + timedelta(minutes=1)
    clock.install(lambda: later)
    assert invoke("snapshot_dispatcher", scheduled_event(later))["sent"] == 2
    # Then both runs have new jobs on the queue, and each runs to publication
    messages = received(aws["sqs"], aws["url"])
    assert len(messages) == 2
    for message in messages:
        assert invoke("snapshot_run_job", as_event(message)) == {"batchItemFailures": []}
    assert conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE state = 'published'").fetchone()["n"] == 2


def test_the_dispatcher_prunes_the_rows_of_a_long_failed_snapshot_run(aws, conn):
    # Given a self-test run that failed 30 days ago with 4 generated rows, and the ledger row's workspace
    workspace = create_workspace(conn, name="Old failures", timezone="UTC", now=NOW - timedelta(days=400))
    failed_at = NOW - timedelta(days=30)
    run_id = conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, rows_written, created_at, updated_at)
        VALUES ('platform', 'selftest', %s, '2027-01-01', 1, 'manual', 'test', 'staff', 'running', 4, %s, %s)
        RETURNING id""", (workspace.id, failed_at, failed_at)).fetchone()["id"]
    conn.execute("INSERT INTO snapshot_selftest_rows (run_id, workspace_id, n) SELECT %s, %s, n "
                 "FROM generate_series(1, 4) AS n", (run_id, workspace.id))
    conn.execute("UPDATE snapshot_runs SET state = 'failed', failure_code = 'validation_failed', updated_at = %s "
                 "WHERE id = %s", (failed_at, run_id))
    # When the snapshot dispatcher ticks
    result = invoke("snapshot_dispatcher", scheduled_event(NOW))
    # Then its rows are gone, its ledger row stays marked, and the pass counts them
    assert result["pruned_rows"] == 4
    assert conn.execute("SELECT count(*) AS n FROM snapshot_selftest_rows WHERE run_id = %s",
                        (run_id,)).fetchone()["n"] == 0
    assert conn.execute("SELECT rows_pruned_at FROM snapshot_runs WHERE id = %s",
                        (run_id,)).fetchone()["rows_pruned_at"] == NOW


def test_the_dispatcher_pseudonymises_aging_rows_past_the_types_retention(aws, conn):
    from uuid import uuid4

    from timekeeper.platform.snapshots import AR_AGING_PERSONAL_DATA

    # Given a published aging version of a month that ended longer ago than the type's
    # retention, and one of last month, each with a member's invoice
    workspace = create_workspace(conn, name="Old months", timezone="UTC", now=NOW - timedelta(days=900))
    old_period = (NOW - timedelta(days=AR_AGING_PERSONAL_DATA.retention_days + 40)).date().replace(day=1)
    member = uuid4()
    runs = {}
    for period in (old_period, datetime(2027, 2, 1).date()):
        runs[period] = conn.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                       state, rows_written, created_at, updated_at)
            VALUES ('platform', 'ar_aging', %s, %s, 1, 'manual', 'test', 'staff', 'running', 1, %s, %s)
            RETURNING id""", (workspace.id, period, NOW, NOW)).fetchone()["id"]
        conn.execute("INSERT INTO snapshot_ar_aging (run_id, workspace_id, invoice_id, member_id, due_date, "
                     "days_past_due, bucket, outstanding_minor, currency) "
                     "VALUES (%s, %s, %s, %s, %s, 10, '0-30', 1234, 'EUR')",
                     (runs[period], workspace.id, uuid4(), member, period))
        conn.execute("UPDATE snapshot_runs SET state = 'published', is_current = true, published_at = %s "
                     "WHERE id = %s", (NOW, runs[period]))
    # When the snapshot dispatcher ticks
    result = invoke("snapshot_dispatcher", scheduled_event(NOW))
    # Then the old month's row names no one and keeps its figures; last month's is as it was
    rows = {r["run_id"]: r for r in conn.execute(
        "SELECT run_id, member_id, outstanding_minor, bucket, personal_data_erased_at FROM snapshot_ar_aging "
        "WHERE workspace_id = %s", (workspace.id,)).fetchall()}
    old, recent = rows[runs[old_period]], rows[runs[datetime(2027, 2, 1).date()]]
    assert (old["member_id"], old["outstanding_minor"], old["bucket"], old["personal_data_erased_at"]) == (
        None, 1234, "0-30", NOW)
    assert recent["member_id"] == member and recent["personal_data_erased_at"] is None
    assert (result["pseudonymised_rows"], result["pruned_rows"]) == (1, 0)


def test_a_lost_job_on_its_last_retry_fails_the_run_and_emits_the_failure_metric(aws, conn, capsys):
    # Given a published February and its re-run, running on its fourth attempt (three
    # retryable failures behind it) whose job stopped beating long ago
    workspace = create_workspace(conn, name="Lost jobs", timezone="UTC", now=NOW - timedelta(days=400))
    stale = NOW - SNAPSHOTS.job_lost_after - timedelta(minutes=1)
    conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, is_current, created_at, updated_at)
        VALUES ('platform', 'membership_counts', %s, '2027-02-01', 1, 'planned', NULL, NULL,
                'published', true, %s, %s)""", (workspace.id, stale, stale))
    run_id = conn.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, retryable_failures, attempts, job_id, heartbeat_at, created_at, updated_at)
        VALUES ('platform', 'membership_counts', %s, '2027-02-01', 2, 'manual', 'rerun', 'staff', 'running', 3, 4,
                gen_random_uuid(), %s, %s, %s)
        RETURNING id""", (workspace.id, stale, stale, stale)).fetchone()["id"]
    capsys.readouterr()
    # When the snapshot dispatcher's reconciliation finds the lost job
    result = invoke("snapshot_dispatcher", scheduled_event(NOW))
    # Then the run is finally failed ...
    assert result["lost_jobs"] == 1
    row = conn.execute("SELECT state, failure_code FROM snapshot_runs WHERE id = %s", (run_id,)).fetchone()
    assert row == {"state": "failed", "failure_code": "retries_exhausted"}
    # ... and the SnapshotFailed metric counts it, as a failure the run job settles does
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in (captured.out + captured.err).splitlines() if line.startswith("{")]
    failed = [line["SnapshotFailed"] for line in lines if "SnapshotFailed" in line]
    assert sum(v if isinstance(v, (int, float)) else sum(v) for v in failed) == 1, lines


@pytest.mark.parametrize("receive, acknowledged", [(1, False), (SNAPSHOTS.consumer.max_receive_count, True)])
def test_a_job_that_loses_its_database_is_redelivered_and_on_its_final_receive_left_to_the_lost_job_check(
        aws, conn, receive, acknowledged):
    # Given an admitted month's job message, and the run job's database connection cut
    # under it (its socket shut down, as a failover or a cut does; the same through a pooler)
    create_workspace(conn, name="Berlin", timezone="Europe/Berlin", now=NOW - timedelta(days=20))
    invoke("snapshot_planner", scheduled_event(NOW))
    invoke("snapshot_dispatcher", scheduled_event(NOW))
    message = received(aws["sqs"], aws["url"])[0]
    message["Attributes"]["ApproximateReceiveCount"] = str(receive)
    run_id = json.loads(message["Body"])["run_id"]
    edge_conn = adapters.database().get()
    with socket.socket(fileno=os.dup(edge_conn.fileno())) as cut:
        cut.shutdown(socket.SHUT_RDWR)
    # When the job receives it
    response = invoke("snapshot_run_job", as_event(message))
    # Then before the final receive the queue redelivers it; on the final receive it is
    # acknowledged (no dead-letter message for a fault of the database), the run not
    # recorded, so the lost-job check's clock decides what follows
    failed = [] if acknowledged else [{"itemIdentifier": message["MessageId"]}]
    assert response == {"batchItemFailures": failed}
    assert conn.execute("SELECT state FROM snapshot_runs WHERE id = %s", (run_id,)).fetchone()["state"] != "published"
    # And once the job's time is up the dispatcher takes it over and the month is published
    later = NOW + SNAPSHOTS.job_lost_after + timedelta(minutes=1)
    clock.install(lambda: later)
    invoke("snapshot_dispatcher", scheduled_event(later))
    for again in received(aws["sqs"], aws["url"]):
        assert invoke("snapshot_run_job", as_event(again)) == {"batchItemFailures": []}
    assert conn.execute("SELECT state FROM snapshot_runs WHERE id = %s", (run_id,)).fetchone()["state"] == "published"
