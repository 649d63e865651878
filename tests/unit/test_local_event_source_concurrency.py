"""The local event source invokes a mapping's function with up to its maximum concurrency at
once, as Lambda's poller does (``concurrent``): each invocation on a thread of its own, a
slow one holding only its own; a received message is invisible to the other invocations;
the quiet-group preference counts the messages in flight of every running invocation.
moto's SQS on a simulated clock; the functions coordinate through events, not time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from timekeeper.local.event_source import SqsEventSource

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)
#: How long a function waits for another invocation before giving up (a guard against a
#: hang when invocations run one after the other; never reached when they run at once).
GUARD_S = 10


@pytest.fixture
def queue(monkeypatch):
    """One standard SQS queue in moto: ``(client, url, arn)``."""
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        yield sqs, url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _send(sqs, url, group, count, prefix):
    for start in range(0, count, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"{prefix}{start + i}", "MessageGroupId": group}
            for i in range(min(10, count - start))])


def _source(queue, function, *, concurrency, concurrent=True):
    sqs, url, arn = queue
    return SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=1,
                          max_concurrency=concurrency, visibility_timeout=timedelta(seconds=60),
                          concurrent=concurrent, name="test-consumer")


def _slow_a_and_quick_b(queue, *, concurrent, guard_s=GUARD_S):
    """A's message holds its invocation until B's was handled (or ``guard_s`` passes); returns
    the events in order and whether A's invocation saw B's handled while it was held."""
    sqs, url, _ = queue
    events: list[str] = []
    lock = threading.Lock()
    b_done = threading.Event()
    saw_b = []

    def function(event):
        (record,) = event["Records"]
        body = record["body"]
        with lock:
            events.append(f"{body} started")
        if body == "a0":
            saw_b.append(b_done.wait(guard_s))
        else:
            b_done.set()
        with lock:
            events.append(f"{body} done")
        return {"batchItemFailures": []}

    source = _source(queue, function, concurrency=2, concurrent=concurrent)
    _send(sqs, url, "A", 1, "a")
    _send(sqs, url, "B", 1, "b")
    try:
        assert source.poll(NOW) == 2
        source.wait()
    finally:
        source.stop()
    return source, events, saw_b


def test_a_slow_invocation_does_not_hold_another_workspaces_message(queue):
    # Given two workspaces' messages on one mapping of concurrency 2, A's first and slow
    source, events, saw_b = _slow_a_and_quick_b(queue, concurrent=True)
    # Then B's message was taken and handled while A's invocation still held its own
    assert events.index("b0 started") < events.index("a0 done")
    assert events.index("b0 done") < events.index("a0 done")
    assert saw_b == [True]
    # and both were deleted once their invocations ended
    assert source.stats.invocations == 2 and source.stats.deleted == 2 and source.running == 0
    assert source.group_in_flight("A") == source.group_in_flight("B") == 0


def test_one_after_the_other_the_slow_invocation_holds_the_others(queue):
    # The serial mode (simulate, the fault campaigns): one invocation at a time in the caller
    source, events, saw_b = _slow_a_and_quick_b(queue, concurrent=False, guard_s=0.2)
    assert events == ["a0 started", "a0 done", "b0 started", "b0 done"] and saw_b == [False]


def test_poll_starts_at_most_the_concurrency_and_no_message_twice(queue):
    sqs, url, _ = queue
    gate = threading.Event()
    lock = threading.Lock()
    seen: list[str] = []
    inside = threading.Semaphore(0)

    def function(event):
        (record,) = event["Records"]
        with lock:
            seen.append(record["body"])
        inside.release()
        gate.wait(GUARD_S)
        return {"batchItemFailures": []}

    source = _source(queue, function, concurrency=3)
    for group in "ABCD":
        _send(sqs, url, group, 5, group.lower())
    try:
        # When the first poll fills the three environments, the next finds none free
        assert source.poll(NOW) == 3
        for _ in range(3):
            assert inside.acquire(timeout=GUARD_S)
        assert source.running == 3
        assert source.poll(NOW) == 0
        # Then once they end, polls deliver the rest, each message once
        gate.set()
        delivered = 3
        while delivered < 20:
            source.wait()
            delivered += source.poll(NOW)
        source.wait()
    finally:
        gate.set()
        source.stop()
    assert sorted(seen) == sorted(f"{g.lower()}{i}" for g in "ABCD" for i in range(5))
    assert source.stats.deleted == 20
    assert sum(source.group_in_flight(g) for g in "ABCD") == 0


def test_messages_in_flight_of_running_invocations_rank_the_groups(queue):
    # Given A's three messages sent before B's one, and a function that holds every invocation
    sqs, url, _ = queue
    gate = threading.Event()
    lock = threading.Lock()
    started: list[str] = []

    def function(event):
        with lock:
            started.extend(r["body"] for r in event["Records"])
        gate.wait(GUARD_S)
        return {"batchItemFailures": []}

    source = _source(queue, function, concurrency=2)
    _send(sqs, url, "A", 3, "a")
    _send(sqs, url, "B", 1, "b")
    try:
        # When a poll fills both environments
        assert source.poll(NOW) == 2
        # Then the second took B's: A's first was in flight in the other invocation
        assert source.group_in_flight("A") == 1 and source.group_in_flight("B") == 1
        gate.set()
        source.wait()
        while source.poll(NOW):
            source.wait()
    finally:
        gate.set()
        source.stop()
    assert sorted(started[:2]) == ["a0", "b0"] and sorted(started[2:]) == ["a1", "a2"]


def test_a_message_failed_by_a_concurrent_invocation_is_hidden_until_its_timeout(queue):
    sqs, url, _ = queue
    seen: list[str] = []

    def function(event):
        (record,) = event["Records"]
        seen.append(record["body"])
        return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}

    source = _source(queue, function, concurrency=2)
    _send(sqs, url, "A", 1, "a")
    try:
        assert source.poll(NOW) == 1
        source.wait()
        assert source.stats.failed == 1 and source.next_visible_at() == NOW + timedelta(seconds=60)
        assert source.poll(NOW + timedelta(seconds=59)) == 0
        assert source.poll(NOW + timedelta(seconds=60)) == 1
        source.wait()
    finally:
        source.stop()
    assert seen == ["a0", "a0"]
