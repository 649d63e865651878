"""The local event source gives quiet message groups (workspaces) the preference SQS fair
queues give them: a group with a backlog in flight waits while another group's messages
are delivered, in moto's SQS on a simulated clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from timekeeper.local.event_source import SqsEventSource

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)


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


def _one_at_a_time(queue, hold):
    """One consumer, one message a batch, on a simulated monotonic clock: each message holds the
    consumer ``hold(body)`` seconds. Returns ``(source, seen)``, ``seen`` the bodies delivered, in order."""
    sqs, url, arn = queue
    clock = [0.0]
    seen: list[str] = []

    def function(event):
        (record,) = event["Records"]
        seen.append(record["body"])
        clock[0] += hold(record["body"])
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=1,
                            max_concurrency=1, visibility_timeout=timedelta(seconds=60),
                            monotonic=lambda: clock[0])
    return source, seen


def _a_holds_a_minute(body):
    return 60.0 if body.startswith("a") else 0.5


def test_a_quiet_group_enqueued_after_a_flood_is_in_the_first_receives(queue):
    sqs, url, arn = queue
    batches: list[list[str]] = []

    def function(event):
        batches.append([r["body"] for r in event["Records"]])
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=10,
                            max_concurrency=2, visibility_timeout=timedelta(seconds=60))
    _send(sqs, url, "A", 1000, "a")
    _send(sqs, url, "B", 5, "b")
    assert source.poll(NOW) == 1005
    first = [body for batch in batches[:1] for body in batch]
    assert sorted(b for b in first if b.startswith("b")) == ["b0", "b1", "b2", "b3", "b4"]
    # and the flood's own messages still go in arrival order
    flood = [body for batch in batches for body in batch if body.startswith("a")]
    assert flood == [f"a{i}" for i in range(1000)]
    assert source.group_in_flight("A") == source.group_in_flight("B") == 0


def test_a_group_with_messages_in_flight_waits_behind_a_quiet_one(queue):
    sqs, url, arn = queue
    seen: list[str] = []
    source: SqsEventSource

    def function(event):
        (record,) = event["Records"]
        seen.append(record["body"])
        if record["body"].startswith("a"):  # the flood's messages fail and stay in flight
            return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=1,
                            max_concurrency=1, visibility_timeout=timedelta(seconds=60))
    _send(sqs, url, "A", 3, "a")
    assert source.poll(NOW) == 3
    assert source.group_in_flight("A") == 3
    _send(sqs, url, "A", 2, "c")
    _send(sqs, url, "B", 2, "b")
    # A has three in flight: B's two (sent last) are delivered before A's new ones
    assert source.poll(NOW + timedelta(seconds=1)) == 4
    assert seen[3:] == ["b0", "b1", "c0", "c1"]


def test_a_message_sent_later_becomes_visible_after_its_simulated_delay(queue):
    sqs, url, arn = queue
    seen: list[str] = []

    def function(event):
        seen.extend(r["body"] for r in event["Records"])
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=1,
                            max_concurrency=1, visibility_timeout=timedelta(seconds=60))
    source.send_later("later", "A", 20, NOW)
    assert source.next_visible_at() == NOW + timedelta(seconds=20) and source.in_flight == 1
    assert source.poll(NOW + timedelta(seconds=19)) == 0
    assert source.poll(NOW + timedelta(seconds=20)) == 1 and seen == ["later"]


def test_a_group_whose_messages_hold_the_consumer_long_waits_behind_quiet_ones(queue):
    # One consumer, one message a batch: nothing stays in flight between invocations, so only
    # the processing time tells that A's messages (each holding the consumer 60 s, as a report
    # delivery waiting for its render) crowd out B's and C's, as SQS's processing-time share does.
    sqs, url, _ = queue
    source, seen = _one_at_a_time(queue, _a_holds_a_minute)
    _send(sqs, url, "A", 3, "a")
    _send(sqs, url, "B", 2, "b")
    _send(sqs, url, "C", 1, "c")
    assert source.poll(NOW) == 6
    # the first of A's is delivered before anything is known of it; then the quiet groups go first
    assert seen == ["a0", "b0", "b1", "c0", "a1", "a2"]


def test_a_group_is_quiet_again_once_its_backlog_is_drained(queue):
    sqs, url, _ = queue
    source, seen = _one_at_a_time(queue, _a_holds_a_minute)
    _send(sqs, url, "A", 1, "a")
    _send(sqs, url, "A", 1, "y")
    _send(sqs, url, "B", 1, "z")
    assert source.poll(NOW) == 3
    assert seen == ["a0", "z0", "y0"]  # A's first held the consumer 60 s: B's goes before A's second
    # A's backlog is drained: the next receive finds nothing of it, its time is forgotten,
    # and its new message takes its turn by arrival again
    assert source.poll(NOW + timedelta(seconds=1)) == 0
    _send(sqs, url, "A", 1, "x")
    _send(sqs, url, "B", 1, "b")
    assert source.poll(NOW + timedelta(seconds=2)) == 2
    assert seen[3:] == ["x0", "b0"]


def test_a_quiet_message_sent_while_a_flood_waits_here_goes_in_the_next_batch(queue):
    # A dispatcher still publishing: B's run is sent while A's received messages wait for the
    # consumer; each batch is chosen among every visible message, as SQS chooses each receive's.
    sqs, url, _ = queue

    def hold(body):
        if body == "a0":
            _send(sqs, url, "B", 1, "b")
        return 60.0

    source, seen = _one_at_a_time(queue, hold)
    _send(sqs, url, "A", 4, "a")
    assert source.poll(NOW) == 5
    assert seen == ["a0", "b0", "a1", "a2", "a3"]


class Publishing:
    """An SQS client whose every receive is followed by a publisher's send of ten more of
    group A's messages (a dispatcher publishing a flood while the source receives), up to
    ``limit`` messages; it counts the receives."""

    def __init__(self, sqs, url, limit):
        self.sqs, self.url, self.limit = sqs, url, limit
        self.sent = self.receives = 0

    def __getattr__(self, name):
        return getattr(self.sqs, name)

    def receive_message(self, **kwargs):
        self.receives += 1
        got = self.sqs.receive_message(**kwargs)
        if self.sent < self.limit:
            _send(self.sqs, self.url, "A", 10, f"late{self.sent}-")
            self.sent += 10
        return got


def test_a_batch_is_chosen_among_what_was_visible_when_its_choice_began_not_a_flood_still_arriving(queue):
    # Given 20 of A's messages and one of B's visible, and a publisher sending ten more of A's
    # after every receive (as a dispatcher floods the queue while the source receives)
    sqs, url, arn = queue
    _send(sqs, url, "A", 20, "a")
    _send(sqs, url, "B", 1, "b")
    client = Publishing(sqs, url, limit=500)
    batches: list[list[str]] = []
    source = SqsEventSource(sqs=client, queue_url=url, queue_arn=arn, batch_size=5, max_concurrency=1,
                            function=lambda event: batches.append([r["body"] for r in event["Records"]]) or {},
                            visibility_timeout=timedelta(seconds=60))
    # When the source chooses its first batch
    batch, _ = source._receive_batch()
    # Then it received the 21 messages visible when the choice began (three receives), not the
    # flood sent meanwhile, and B's message is in the batch
    assert client.receives == 3 and client.sent == 30
    assert "b0" in [m["Body"] for m in batch] and len(batch) == 5
    # And the messages sent meanwhile are chosen among in later batches: everything is delivered once
    delivered = source.poll(NOW, max_rounds=10_000)
    assert delivered + len(batch) >= 21 and len({b for chunk in batches for b in chunk}) == delivered
