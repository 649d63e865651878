"""A dispatcher pass publishes a claim's SendMessageBatch calls concurrently: the real
dispatcher and the real SQS adapter against the real database and moto SQS, with the
queue's answers shaped per call (some entries refused, some calls failing, one raising).

The outbox's guarantees must hold as with calls one after another: accepted runs are
recorded published, refused ones released and offered again by the next pass, and a
batch whose send never completed keeps its pending-offer row and is offered again a
minute later.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.support import dispatch_settings
from timekeeper import faults
from timekeeper.aws.sqs import SqsRunPublisher
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import dispatch

OWNER = "accounting"
HOURLY_UTC = {"cron": "0 * * * *", "timezone": "UTC"}


class ShapedQueue:
    """A boto3 SQS client stand-in that forwards SendMessageBatch to a real (moto) queue
    after shaping the call: ``refuse_entries`` (run ids) are dropped and reported Failed;
    a call holding one of ``fail_calls`` fails with a ClientError; a call holding one of
    ``raise_calls`` raises RuntimeError. Each call first sleeps ``call_s``; the calls seen
    at once are counted (thread-safe)."""

    def __init__(self, sqs, *, refuse_entries=(), fail_calls=(), raise_calls=(), call_s=0.02):
        self.sqs = sqs
        self.refuse_entries, self.fail_calls, self.raise_calls = set(refuse_entries), set(fail_calls), set(raise_calls)
        self.call_s = call_s
        self.calls = self.in_flight = self.peak = 0
        self.sent, self.refused = [], []
        self._lock = threading.Lock()

    def send_message_batch(self, *, QueueUrl, Entries):  # noqa: N803 - boto3's names
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.call_s)
            ids = {e["Id"]: uuid.UUID(json.loads(e["MessageBody"])["run_id"]) for e in Entries}
            with self._lock:
                raises = bool(self.raise_calls & set(ids.values()))
                fails = bool(self.fail_calls & set(ids.values()))
                refuse = self.refuse_entries & set(ids.values())
                if fails and not raises:
                    self.refused.extend(ids.values())
            if raises:
                raise RuntimeError("the client broke")
            if fails:
                raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "refused"}}, "SendMessageBatch")
            kept = [e for e in Entries if ids[e["Id"]] not in refuse]
            response = self.sqs.send_message_batch(QueueUrl=QueueUrl, Entries=kept) if kept else {}
            failed = [{"Id": e["Id"], "SenderFault": False, "Code": "InternalError"}
                      for e in Entries if ids[e["Id"]] in refuse]
            with self._lock:
                self.sent.extend(ids[s["Id"]] for s in response.get("Successful", []))
                self.refused.extend(ids[f["Id"]] for f in failed)
            return {"Successful": response.get("Successful", []), "Failed": response.get("Failed", []) + failed}
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture
def world(conn, monkeypatch):
    """An empty schedules world and a moto SQS queue."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers CASCADE")
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="runs")["QueueUrl"]
        yield conn, sqs, url


def due_schedules(conn, utc, count):
    workspace = uuid.uuid4()
    return [service.create_schedule(conn, workspace_id=workspace, owner=OWNER, work_kind="batch.roll",
                                    recurrence=HOURLY_UTC, actor="tester", now=utc(2027, 1, 4, 9, 30))
            for _ in range(count)]


def queued_run_ids(sqs, url):
    """Every run id the queue holds (received and deleted), with repeats."""
    ids = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return ids
        for message in got:
            ids.append(uuid.UUID(json.loads(message["Body"])["run_id"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def runs_by_id(conn):
    return {r["id"]: r for r in conn.execute("SELECT * FROM schedule_runs").fetchall()}


def pending_offers(conn):
    return conn.execute("SELECT count(*) AS n FROM schedule_pending_offers WHERE owner = %s",
                        (OWNER,)).fetchone()["n"]


def test_partly_refused_concurrent_calls_record_the_accepted_and_release_the_refused(world, utc):
    # Given 150 due schedules (one claim of 150 runs: 15 SendMessageBatch calls)
    conn, sqs, url = world
    due_schedules(conn, utc, 150)
    now = utc(2027, 1, 4, 10, 0)
    # And a queue that answers each call after 20 ms, refusing three single entries and
    # failing two whole calls; the run ids are only known inside the call, so the first
    # runs of three calls are chosen as they arrive
    chosen: dict[str, set] = {"entries": set(), "calls": set()}

    class Choosing(ShapedQueue):
        def send_message_batch(self, *, QueueUrl, Entries):  # noqa: N803
            ids = [uuid.UUID(json.loads(e["MessageBody"])["run_id"]) for e in Entries]
            with self._lock:
                if len(chosen["entries"]) < 3:
                    chosen["entries"].add(ids[-1])
                    self.refuse_entries.add(ids[-1])
                elif len(chosen["calls"]) < 2:
                    chosen["calls"].add(ids[0])
                    self.fail_calls.add(ids[0])
            return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries)

    queue = Choosing(sqs)
    # When one pass runs with the real SQS adapter, 20 calls in flight
    report = dispatch(conn, dispatch_settings(OWNER), now=now, publisher=SqsRunPublisher(queue, url, in_flight=20))
    # Then the calls ran at once (not one after another)
    assert queue.calls == 15 and queue.peak > 1
    # And 3 + 2 x 10 runs were refused, the other 127 accepted and in the queue once each
    refused, accepted = set(queue.refused), set(queue.sent)
    assert len(refused) == 23 and len(accepted) == 127 and not refused & accepted
    assert (report.published, report.refused) == (127, 23)
    assert sorted(queued_run_ids(sqs, url)) == sorted(accepted)
    # And the database records exactly that: accepted published once, refused released
    runs = runs_by_id(conn)
    assert set(runs) == refused | accepted
    for run_id in accepted:
        assert (runs[run_id]["published_at"], runs[run_id]["publish_count"]) == (now, 1)
        assert runs[run_id]["released_at"] is None
    for run_id in refused:
        assert (runs[run_id]["offered_at"], runs[run_id]["published_at"], runs[run_id]["publish_count"]) == (
            None, None, 0)
        assert runs[run_id]["released_at"] == now
    assert pending_offers(conn) == 0
    # When the next pass runs with a queue that accepts everything
    later = utc(2027, 1, 4, 10, 1)
    healthy = ShapedQueue(sqs)
    report = dispatch(conn, dispatch_settings(OWNER), now=later, publisher=SqsRunPublisher(healthy, url, in_flight=20))
    # Then exactly the refused runs are offered again, each once, and recorded published
    assert report.reoffered == 23 and report.runs_created == 0
    assert sorted(queued_run_ids(sqs, url)) == sorted(refused)
    runs = runs_by_id(conn)
    assert all((runs[r]["published_at"], runs[r]["publish_count"]) == (later, 1) for r in refused)
    assert all(runs[r]["publish_count"] == 1 for r in accepted)
    assert pending_offers(conn) == 0


def test_a_call_that_raises_leaves_the_batch_pending_and_the_next_minute_offers_it_again(world, utc):
    # Given 150 due schedules and a queue whose fourth call raises an unexpected error
    # while other calls refuse entries, two calls in flight
    conn, sqs, url = world
    due_schedules(conn, utc, 150)
    now = utc(2027, 1, 4, 10, 0)

    class RaisingFourth(ShapedQueue):
        arrived = 0

        def send_message_batch(self, *, QueueUrl, Entries):  # noqa: N803
            ids = [uuid.UUID(json.loads(e["MessageBody"])["run_id"]) for e in Entries]
            with self._lock:
                seen, self.arrived = self.arrived, self.arrived + 1
                if seen == 3:
                    self.raise_calls.add(ids[0])
                elif seen < 3:
                    self.refuse_entries.add(ids[0])
            return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries)

    queue = RaisingFourth(sqs)
    # When a pass runs
    with pytest.raises(RuntimeError, match="the client broke"):
        dispatch(conn, dispatch_settings(OWNER), now=now, publisher=SqsRunPublisher(queue, url, in_flight=2))
    # Then no call was left running, and the calls not yet started were never made
    assert queue.in_flight == 0
    assert 4 <= queue.calls < 15
    sent = set(queue.sent)
    # And nothing of the send was recorded: the batch's pending-offer row stays, no run released
    assert pending_offers(conn) == 1
    runs = runs_by_id(conn)
    assert len(runs) == 150 and all(r["released_at"] is None for r in runs.values())
    assert sorted(queued_run_ids(sqs, url)) == sorted(sent)
    # When a pass runs within the same half minute, it leaves the batch alone
    early = ShapedQueue(sqs)
    assert dispatch(conn, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0, 20),
                    publisher=SqsRunPublisher(early, url)).reoffered == 0
    assert early.calls == 0
    # When the next minute's pass runs with a healthy queue
    later = utc(2027, 1, 4, 10, 1)
    healthy = ShapedQueue(sqs)
    report = dispatch(conn, dispatch_settings(OWNER), now=later, publisher=SqsRunPublisher(healthy, url))
    # Then every run of the batch is offered again once (the consumer absorbs the ones the
    # queue had taken), recorded published, and the pending row is gone
    assert report.reoffered == 150 and report.runs_created == 0
    assert sorted(queued_run_ids(sqs, url)) == sorted(runs)
    runs = runs_by_id(conn)
    assert all(r["published_at"] == later for r in runs.values())
    assert pending_offers(conn) == 0
    reasons = conn.execute("SELECT reason, count(*) AS n FROM schedule_events WHERE kind = 'reoffered' "
                           "GROUP BY reason").fetchall()
    assert [(r["reason"], r["n"]) for r in reasons] == [("unpublished", 150)]


def test_a_crash_between_concurrent_calls_lets_the_started_ones_answer_and_records_nothing(world, utc):
    # Given 150 due schedules, calls of 20 ms, four in flight, and a process that dies the
    # first time one call of a publish has answered while others have not
    conn, sqs, url = world
    due_schedules(conn, utc, 150)
    queue = ShapedQueue(sqs)

    def injector(point, context):
        if point == "publish.between_batches":
            raise faults.InjectedCrash(point)

    faults.install(injector)
    try:
        # When a pass runs
        with pytest.raises(faults.InjectedCrash):
            dispatch(conn, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0),
                     publisher=SqsRunPublisher(queue, url, in_flight=4))
    finally:
        faults.install(None)
    # Then the calls already started answered before the crash went up, the rest never ran
    assert queue.in_flight == 0
    assert 1 <= queue.calls < 15
    # And the batch stays pending; the next minute's pass offers all 150 again
    assert pending_offers(conn) == 1
    report = dispatch(conn, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 1),
                      publisher=SqsRunPublisher(ShapedQueue(sqs), url))
    assert report.reoffered == 150 and pending_offers(conn) == 0
    assert len(set(queued_run_ids(sqs, url))) == 150
