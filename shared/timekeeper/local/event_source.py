"""An SQS event source mapping for the local stack, on a simulated clock.

It does what Lambda's poller does for the consumer: receive up to ``batch_size`` messages
per invocation and up to ``max_concurrency`` invocations per round, build the SQS event
(with ApproximateReceiveCount), invoke the real handler, delete the messages not listed
in ``batchItemFailures`` and leave the failed ones to reappear after the visibility
timeout. Visibility is kept in SIMULATED time: a failed message stays hidden (moto's
real-time visibility is set long) until the simulated clock passes its timeout, then it
is made visible again. A consumer that sets a failed message's visibility timeout (the
backoff of a retry: :meth:`SqsEventSource.change_visibility`, installed as the edge's
visibility changer by the local stack) has it kept in simulated time too. moto moves a
message to the dead-letter queue on the receive after maxReceiveCount, as SQS does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

_HIDE_REAL_SECONDS = 43_200  # hide received messages "forever" in real time; simulated time decides


@dataclass
class EventSourceStats:
    """Counters of a mapping: invocations, records delivered, deleted and failed."""

    invocations: int = 0
    delivered: int = 0
    deleted: int = 0
    failed: int = 0
    function_errors: int = 0


@dataclass
class SqsEventSource:
    """Poll ``queue_url`` with ``sqs`` and feed ``function(event) -> response`` in batches."""

    sqs: Any
    queue_url: str
    queue_arn: str
    function: Callable[[dict[str, Any]], Any]
    batch_size: int
    max_concurrency: int
    visibility_timeout: timedelta
    region: str = "us-east-1"
    #: A fault campaign's duplicate delivery: called with each received message before the
    #: invocation; True sends a copy of its body back to the queue (SQS delivers at least
    #: once, so a message may come twice). None: never.
    duplicate: Callable[[dict[str, Any]], bool] | None = None
    stats: EventSourceStats = field(default_factory=EventSourceStats)
    _hidden: dict[str, tuple[datetime, str]] = field(default_factory=dict)  # message id -> (visible at, handle)
    _deferred: dict[str, int] = field(default_factory=dict)  # receipt handle -> seconds, set during an invocation
    #: The simulated instant this source left messages visible but undelivered (a duplicate
    #: sent back during an invocation, or messages received on the way to a copy); a poll
    #: clears it. Lambda's poller would receive them within seconds; the simulation polls
    #: a source only when it knows the source holds something.
    _left_visible_at: datetime | None = None

    def change_visibility(self, receipt_handle: str, seconds: int) -> None:
        """A consumer's ChangeMessageVisibility of a message it received: the message is hidden
        for ``seconds`` of simulated time from the invocation's instant (if it fails its item)."""
        self._deferred[receipt_handle] = seconds

    @property
    def in_flight(self) -> int:
        """Messages received and failed, waiting for their simulated visibility timeout."""
        return len(self._hidden)

    def next_visible_at(self) -> datetime | None:
        """The simulated instant the earliest hidden message becomes visible again, or the
        instant messages were left visible without being delivered (whichever is earlier)."""
        hidden = (at for at, _ in self._hidden.values())
        return min((*hidden, *((self._left_visible_at,) if self._left_visible_at else ())), default=None)

    def _reveal(self, now: datetime) -> None:
        due = [(mid, handle) for mid, (at, handle) in self._hidden.items() if at <= now]
        for mid, handle in due:
            self.sqs.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
            del self._hidden[mid]

    def _event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        records = []
        for m in messages:
            attributes = dict(m.get("Attributes", {}))
            records.append({
                "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                "attributes": attributes, "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody") or hashlib.md5(m["Body"].encode()).hexdigest(),  # noqa: S324
                "eventSource": "aws:sqs", "eventSourceARN": self.queue_arn, "awsRegion": self.region})
        return {"Records": records}

    def poll(self, now: datetime, *, max_rounds: int = 1000) -> int:
        """Deliver everything visible at simulated ``now``; return the records delivered.

        Each round receives up to ``max_concurrency`` batches, then invokes the function
        with each. A receive that returns fewer messages than asked for emptied the queue
        (moto returns every visible message up to the maximum), so polling stops there
        without a further empty receive: one round trip per batch, plus its delete.
        """
        self._reveal(now)
        self._left_visible_at = None
        delivered = 0
        for _ in range(max_rounds):
            batches = []
            drained = False
            for _ in range(self.max_concurrency):
                got, drained = self._receive_batch()
                if got:
                    batches.append(got)
                if drained:
                    break
            for batch in batches:
                delivered += len(batch)
                self._invoke(batch, now)
            if drained or not batches:
                break
        return delivered

    def deliver_copy(self, body: str, now: datetime) -> None:
        """Send ``body`` to the queue as a new message (a redelivery or a re-offer of the
        same run) and invoke the function with it alone at simulated ``now``, as a second
        execution environment would receive it; other messages received on the way are
        made visible again. The copy is deleted, or hidden like a failed one."""
        sent = self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)["MessageId"]
        copy, others = None, []
        while copy is None:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                           VisibilityTimeout=_HIDE_REAL_SECONDS, AttributeNames=["All"],
                                           WaitTimeSeconds=0).get("Messages", [])
            if not got:
                break
            for m in got:
                if m["MessageId"] == sent:
                    copy = m
                else:
                    others.append(m)
        for m in others:
            self.sqs.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"],
                                               VisibilityTimeout=0)
        if others:
            self._left_visible_at = now
        if copy is not None:
            self._invoke([copy], now)

    def _receive_batch(self) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``batch_size`` visible messages, and whether the queue was drained. SQS
        returns at most 10 a call; like Lambda's poller within its batching window, receive
        until the batch is full or a receive returns fewer than asked (moto returns every
        visible message up to the maximum, so that receive emptied the queue)."""
        batch: list[dict[str, Any]] = []
        while len(batch) < self.batch_size:
            asked = min(self.batch_size - len(batch), 10)
            got = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=asked,
                VisibilityTimeout=_HIDE_REAL_SECONDS, AttributeNames=["All"], WaitTimeSeconds=0,
            ).get("Messages", [])
            batch.extend(got)
            if len(got) < asked:
                return batch, True
        return batch, False

    def _invoke(self, batch: list[dict[str, Any]], now: datetime) -> None:
        self.stats.invocations += 1
        self.stats.delivered += len(batch)
        if self.duplicate is not None:
            for m in batch:
                if self.duplicate(m):
                    self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=m["Body"])
                    self._left_visible_at = now
        try:
            response = self.function(self._event(batch)) or {}
            failed_ids = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        except Exception:  # noqa: BLE001 - a function error (or a crash) fails the whole batch, as in Lambda
            self.stats.function_errors += 1
            failed_ids = {m["MessageId"] for m in batch}
        done = [m for m in batch if m["MessageId"] not in failed_ids]
        for start in range(0, len(done), 10):
            chunk = done[start:start + 10]
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)])
        self.stats.deleted += len(done)
        for m in batch:
            deferred = self._deferred.pop(m["ReceiptHandle"], None)
            if m["MessageId"] in failed_ids:
                self.stats.failed += 1
                hidden = self.visibility_timeout if deferred is None else timedelta(seconds=deferred)
                self._hidden[m["MessageId"]] = (now + hidden, m["ReceiptHandle"])
