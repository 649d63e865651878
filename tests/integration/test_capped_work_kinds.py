"""The per-workspace cap on heavy work kinds: enforced at start through the one consumer
path, with the real PostgreSQL, moto's SQS and the local event source on a simulated
clock. A capped run is released for a later receive (a delayed copy of its message, the
received one acknowledged): never an attempt, never failed, never dead-lettered."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from tests.support import dispatch_settings
from timekeeper.aws.sqs import SqsRunPublisher
from timekeeper.db.connection import connect
from timekeeper.local.event_source import SqsEventSource
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, ProcessResult, Released, process_batch
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
HEAVY = "heavy.work"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(hours=2), max_receive_count=3, failure_threshold=5,
                            capped_work_kinds=frozenset({HEAVY}), max_in_flight_per_workspace=2,
                            cap_release_delay_s=(10, 30))


class Heavy:
    """A heavy work kind whose runs hold their consumer until ``gate`` opens; it counts the
    runs of each workspace inside the handler at once (the peak) and every run it started."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.active: dict[uuid.UUID, int] = {}
        self.peak: dict[uuid.UUID, int] = {}
        self.started: list[uuid.UUID] = []
        self.entered = threading.Semaphore(0)
        self.registry = WorkKindRegistry()
        self.registry.register(OWNER, HEAVY, self.handle, leased=True)

    def handle(self, ctx):
        with self.lock:
            self.started.append(ctx.run_id)
            self.active[ctx.workspace_id] = self.active.get(ctx.workspace_id, 0) + 1
            self.peak[ctx.workspace_id] = max(self.peak.get(ctx.workspace_id, 0), self.active[ctx.workspace_id])
        self.entered.release()
        self.gate.wait(60)
        with self.lock:
            self.active[ctx.workspace_id] -= 1
        return Succeeded({"ok": True})


@pytest.fixture
def world(conn, monkeypatch):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield conn


def _queues(sqs):
    dlq = sqs.create_queue(QueueName="heavy-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName="heavy", Attributes={
        "RedrivePolicy": f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": 3}}'})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn, dlq


def _dispatch(conn, sqs, url, now, workspaces):
    """Hourly schedules of the heavy kind due at ``now``, ``count`` per workspace, claimed by
    the real dispatcher and published to ``url``; the run ids by workspace."""
    for workspace, count in workspaces.items():
        for _ in range(count):
            service.create_schedule(conn, workspace_id=workspace, owner=OWNER, work_kind=HEAVY,
                                    recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="t",
                                    now=now - timedelta(minutes=30))
    dispatch(conn, dispatch_settings(OWNER), now=now, publisher=SqsRunPublisher(sqs, url))
    rows = conn.execute("SELECT id, workspace_id FROM schedule_runs").fetchall()
    return {w: {r["id"] for r in rows if r["workspace_id"] == w} for w in workspaces}


def _runs(conn):
    return {r["id"]: r for r in conn.execute("SELECT id, state, attempts FROM schedule_runs").fetchall()}


def test_a_workspace_starts_at_most_its_cap_the_others_later_and_none_fail_or_dead_letter(world, db_url, utc):
    conn = world
    heavy = Heavy()
    sqs = boto3.client("sqs")
    url, arn, dlq = _queues(sqs)
    busy, quiet = uuid.uuid4(), uuid.uuid4()
    now = utc(2027, 1, 4, 10, 0)
    runs = _dispatch(conn, sqs, url, now, {busy: 5, quiet: 1})
    clock = {"now": now}
    pool = ThreadPoolExecutor(max_workers=8)
    released: list[uuid.UUID] = []
    invocations: list = []
    source: SqsEventSource

    def consume(record):
        """One consumer invocation, on a connection of its own, as the edge answers it."""
        message = RunMessage.model_validate_json(record["body"])
        delivery = Delivery(record["messageId"], message, int(record["attributes"]["ApproximateReceiveCount"]))
        with connect(db_url) as own:
            (result,) = process_batch(own, [delivery], now=clock["now"], registry=heavy.registry, settings=SETTINGS)
        if isinstance(result, Released):  # the local stack's releaser: a delayed copy, the received one acked
            assert 10 <= result.delay_s <= 30
            released.append(message.run_id)
            source.send_later(message.model_dump_json(), str(message.workspace_id), result.delay_s, clock["now"])
            return True
        return isinstance(result, ProcessResult)

    def function(event):
        """Each record's consumer runs in its own thread; the invocation returns when its
        run was released, settled, or entered its handler (it holds a consumer from then on)."""
        (record,) = event["Records"]
        before = len(heavy.started)
        future = pool.submit(consume, record)
        invocations.append(future)
        while not future.done() and len(heavy.started) == before:
            heavy.entered.acquire(timeout=0.05)
        if future.done() and not future.result():
            return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=1,
                            max_concurrency=3, visibility_timeout=timedelta(minutes=20))
    try:
        # When the six runs are received: two of the busy workspace start, the quiet one
        # starts beside them, and the busy workspace's other three are released
        assert source.poll(clock["now"]) == 6
        assert set(heavy.started) - runs[busy] == runs[quiet] and len(set(heavy.started) & runs[busy]) == 2
        assert len(released) == 3
        # and however often they come back while the two hold their consumers, they are released
        for _ in range(30):
            clock["now"] = source.next_visible_at()
            source.poll(clock["now"])
        assert len(released) > 30 and len(heavy.started) == 3
        state = _runs(conn)
        waiting = runs[busy] - set(heavy.started)
        assert all(state[r]["state"] == "queued" and state[r]["attempts"] == 0 for r in waiting)
        # When the held runs finish, the released ones start on their next receive, two at most at once
        heavy.gate.set()
        for _ in range(50):
            for invocation in invocations:  # the consumers settle what they hold before the next receive
                invocation.result(timeout=60)
            if not source.in_flight:
                break
            clock["now"] = source.next_visible_at()
            source.poll(clock["now"])
        pool.shutdown(wait=True)
    finally:
        heavy.gate.set()
        pool.shutdown(wait=True)
    state = _runs(conn)
    assert {r["state"] for r in state.values()} == {"succeeded"} and len(state) == 6
    assert all(r["attempts"] == 1 for r in state.values())  # a release is never an attempt
    assert heavy.peak[busy] <= 2 and sorted(heavy.started) == sorted(state)
    # no message ever reached the dead-letter queue
    assert sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "0"
