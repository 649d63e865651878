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

Fair queues: like SQS on a standard queue whose messages carry a ``MessageGroupId`` (the
workspace), the source prefers quiet groups. Before each batch it receives every message
visible when the batch's choice begins (those sent meanwhile wait for the next), then
fills each batch in the order (noisy last; then messages of the group in flight,
ascending; then arrival): a group with a backlog in flight waits while a quiet group's
messages go first, and groups with equal counts take turns. A message is in flight from
its receive until it is deleted or its visibility timeout passes. As SQS does, a group is
also noisy while its share of the consumers' recent processing time is above
:data:`NOISY_TIME_SHARE` (a group whose few messages each hold a consumer for long, such
as a report delivery waiting for its render): the invocation's duration is shared among
the groups of its batch by their messages, and a group's time is forgotten once its
backlog is seen drained (a receive of every visible message finds nothing of it, and
nothing of it is in flight), as SQS stops counting a group noisy then. A message sent with a delay
(:meth:`SqsEventSource.send_later`, a consumer's release of a capped run) becomes visible
once the simulated clock passes its delay.

Concurrency: like Lambda's poller, a mapping invokes its function with up to
``max_concurrency`` batches at once when ``concurrent`` is set (``serve``, the benchmarks):
each invocation runs on a thread of the mapping's own pool, an execution environment
with its own database connections (:mod:`timekeeper.edge.adapters`), and :meth:`poll`
returns once every free environment has its batch, without waiting for them; what a
finished invocation reported (deletes, failures, its processing time) is taken by the next
:meth:`poll` or :meth:`wait`. A message received for one invocation stays hidden until it
is deleted or made visible again, so no two invocations take the same message, and the
messages in flight that rank the groups count every running invocation's. Without
``concurrent`` (the default: ``simulate``, the tests and the fault campaigns, which need a
poll to drain deterministically on a simulated clock), each poll invokes the batches one
after the other in the calling thread and returns once everything visible was delivered.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

_HIDE_REAL_SECONDS = 43_200  # hide received messages "forever" in real time; simulated time decides
#: A group whose share of the consumers' recent processing time is above this fraction is
#: noisy: every quiet group's visible messages are delivered before its (SQS fair queues'
#: processing-time share threshold).
NOISY_TIME_SHARE = 0.10


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
    _hidden: dict[str, tuple[datetime, str, str]] = field(default_factory=dict)  # id -> (visible at, handle, group)
    #: Received from the queue and not yet delivered (visible in simulated time), by group
    #: in arrival order: (arrival number, message).
    _visible: dict[str, collections.deque[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    _arrivals: itertools.count = field(default_factory=itertools.count)
    #: Messages received and not yet deleted or visible again, by group.
    _group_in_flight: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Messages sent with a delay: (visible at, body, group), sent to the queue when due.
    _delayed: list[tuple[datetime, str, str | None]] = field(default_factory=list)
    _deferred: dict[str, int] = field(default_factory=dict)  # receipt handle -> seconds, set during an invocation
    #: The wall clock that times invocations (seconds); a test passes its own.
    monotonic: Callable[[], float] = time.monotonic
    #: Processing time (seconds) of each group's messages since its backlog was last drained.
    _busy_s: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Invoke up to ``max_concurrency`` batches at once, each on a thread (an execution
    #: environment) of its own, and return from :meth:`poll` without waiting for them
    #: (see the module docstring); False: one after the other in the polling thread.
    concurrent: bool = False
    #: A name for the mapping's threads (``<name>-<n>``).
    name: str = "event-source"
    _pool: ThreadPoolExecutor | None = None
    #: Running invocations (concurrent): future -> (batch, simulated instant of its poll).
    _running: dict[Future, tuple[list[dict[str, Any]], datetime]] = field(default_factory=dict)
    #: Guards what the function's threads write (deferred visibility, delayed sends).
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: The simulated instant this source left messages visible but undelivered (a duplicate
    #: sent back during an invocation, or messages received on the way to a copy); a poll
    #: clears it. Lambda's poller would receive them within seconds; the simulation polls
    #: a source only when it knows the source holds something.
    _left_visible_at: datetime | None = None

    def change_visibility(self, receipt_handle: str, seconds: int) -> None:
        """A consumer's ChangeMessageVisibility of a message it received: the message is hidden
        for ``seconds`` of simulated time from the invocation's instant (if it fails its item)."""
        with self._lock:
            self._deferred[receipt_handle] = seconds

    def send_later(self, body: str, group: str | None, seconds: int, now: datetime) -> None:
        """A SendMessage with ``DelaySeconds``: ``body`` (of ``MessageGroupId`` ``group``)
        becomes visible ``seconds`` after simulated ``now``, as a new message."""
        with self._lock:
            self._delayed.append((now + timedelta(seconds=seconds), body, group))

    @property
    def in_flight(self) -> int:
        """Messages received and failed, waiting for their simulated visibility timeout, and
        messages sent with a delay not yet visible."""
        with self._lock:
            return len(self._hidden) + len(self._delayed)

    def group_in_flight(self, group: str) -> int:
        """Messages of ``group`` (a ``MessageGroupId``) received and not yet deleted or visible again."""
        return self._group_in_flight[group]

    def next_visible_at(self) -> datetime | None:
        """The simulated instant the earliest hidden message becomes visible again, or the
        instant messages were left visible without being delivered (whichever is earlier)."""
        with self._lock:
            hidden = [at for at, _, _ in self._hidden.values()] + [at for at, _, _ in self._delayed]
        return min((*hidden, *((self._left_visible_at,) if self._left_visible_at else ())), default=None)

    def _reveal(self, now: datetime) -> None:
        due = [(mid, handle, group) for mid, (at, handle, group) in self._hidden.items() if at <= now]
        for mid, handle, group in due:
            self.sqs.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
            del self._hidden[mid]
            self._group_in_flight[group] -= 1
        with self._lock:
            due_sends = [(at, body, group) for at, body, group in self._delayed if at <= now]
            self._delayed = [entry for entry in self._delayed if entry[0] > now]
        for _, body, group in due_sends:
            self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body,
                                  **({"MessageGroupId": group} if group else {}))

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
        with each. Each batch first reads how many messages are visible and receives that
        many (see :meth:`_receive_batch`), so once everything visible was received a batch
        costs that read and its delete.
        ``concurrent``: first take what the finished invocations reported, then start a batch
        on each free execution environment and return without waiting (``max_rounds`` unused).
        """
        if self.concurrent:
            return self._poll_concurrently(now)
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
        if any(self._visible.values()):
            self._left_visible_at = now
        return delivered

    def _poll_concurrently(self, now: datetime) -> int:
        self._settle_finished(block=False)
        self._reveal(now)
        self._left_visible_at = None
        delivered = 0
        while len(self._running) < self.max_concurrency:
            batch, drained = self._receive_batch()
            if batch:
                delivered += len(batch)
                self._start(batch, now)
            if drained or not batch:
                break
        if any(self._visible.values()):
            self._left_visible_at = now
        return delivered

    def _start(self, batch: list[dict[str, Any]], now: datetime) -> None:
        """Invoke the function with ``batch`` on a free execution environment (a thread of the pool)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix=self.name)
        self._before_invocation(batch, now)
        self._running[self._pool.submit(self._call, batch)] = (batch, now)

    def _settle_finished(self, *, block: bool, timeout_s: float | None = None) -> None:
        """Take what the finished invocations reported (``block``: wait for every running one
        first, at most ``timeout_s`` seconds)."""
        if block and self._running:
            from concurrent.futures import wait

            wait(list(self._running), timeout=timeout_s)
        for future in [f for f in self._running if f.done()]:
            batch, now = self._running.pop(future)
            self._after_invocation(batch, now, *future.result())

    @property
    def running(self) -> int:
        """Invocations running now (``concurrent``; always 0 otherwise)."""
        return sum(1 for future in self._running if not future.done())

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the running invocations (at most ``timeout_s`` seconds; None: as long as
        they take) and take what they reported; nothing to do without ``concurrent``."""
        self._settle_finished(block=True, timeout_s=timeout_s)

    def stop(self, timeout_s: float | None = None) -> None:
        """Wait for the running invocations (see :meth:`wait`) and end the mapping's threads."""
        self.wait(timeout_s)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

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
            self._group_in_flight[_group(copy)] += 1
            self._invoke([copy], now)

    def _receive_batch(self) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``batch_size`` visible messages in fair order, and whether the queue was
        drained. First receive every message visible when the batch's choice begins (the
        queue's ApproximateNumberOfMessages then, which does not count the messages received
        here; 10 a call until that many came or a receive returns fewer: moto returns every
        visible message up to the maximum, so that receive emptied the queue), so that, as
        in SQS, each batch is chosen among every visible message, also those sent while
        earlier ones waited here; messages sent during the receives wait for the next
        batch's choice (moto's cost per message grows with the queue's depth, so a drain
        that also chased a publisher's flood would hold every batch until the flood was
        all sent). Then take the batch one message at a time from the quiet groups before
        the noisy, the group with the fewest in flight first (the earliest arrival among
        equals)."""
        visible = int(self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=[
            "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"])
        received = 0
        while received < visible:
            got = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                VisibilityTimeout=_HIDE_REAL_SECONDS, AttributeNames=["All"], WaitTimeSeconds=0,
            ).get("Messages", [])
            for m in got:
                self._visible.setdefault(_group(m), collections.deque()).append((next(self._arrivals), m))
            received += len(got)
            if len(got) < 10:
                break
        self._forget_drained(set(self._busy_s))
        noisy = self._noisy()
        batch: list[dict[str, Any]] = []
        while len(batch) < self.batch_size:
            waiting = [(g in noisy, self._group_in_flight[g], queue[0][0], g)
                       for g, queue in self._visible.items() if queue]
            if not waiting:
                break
            *_, group = min(waiting)
            batch.append(self._visible[group].popleft()[1])
            self._group_in_flight[group] += 1
        self._visible = {g: queue for g, queue in self._visible.items() if queue}
        return batch, not self._visible

    def _forget_drained(self, groups: set[str]) -> None:
        """Forget the processing time of those of ``groups`` with nothing visible and nothing in
        flight (called once every visible message was received: their backlog is drained)."""
        for group in groups:
            if not self._visible.get(group) and self._group_in_flight[group] <= 0:
                self._busy_s.pop(group, None)

    def _noisy(self) -> set[str]:
        """The groups whose share of the recent processing time is above :data:`NOISY_TIME_SHARE`."""
        total = sum(self._busy_s.values())
        return {g for g, busy in self._busy_s.items() if total > 0 and busy > NOISY_TIME_SHARE * total}

    def _invoke(self, batch: list[dict[str, Any]], now: datetime) -> None:
        """Invoke the function with ``batch`` in this thread and settle it."""
        self._before_invocation(batch, now)
        self._after_invocation(batch, now, *self._call(batch))

    def _before_invocation(self, batch: list[dict[str, Any]], now: datetime) -> None:
        self.stats.invocations += 1
        self.stats.delivered += len(batch)
        if self.duplicate is not None:
            for m in batch:
                if self.duplicate(m):
                    group = (m.get("Attributes") or {}).get("MessageGroupId")
                    self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=m["Body"],
                                          **({"MessageGroupId": group} if group else {}))
                    self._left_visible_at = now

    def _call(self, batch: list[dict[str, Any]]) -> tuple[set[str], bool, float]:
        """Run the function on ``batch`` (in the invoking thread): the message ids it failed,
        whether it raised (a function error fails the whole batch), its duration in seconds."""
        began = self.monotonic()
        try:
            response = self.function(self._event(batch)) or {}
            return ({f["itemIdentifier"] for f in response.get("batchItemFailures", [])}, False,
                    max(0.0, self.monotonic() - began))
        except Exception:  # noqa: BLE001 - a function error (or a crash) fails the whole batch, as in Lambda
            return {m["MessageId"] for m in batch}, True, max(0.0, self.monotonic() - began)

    def _after_invocation(self, batch: list[dict[str, Any]], now: datetime, failed_ids: set[str], errored: bool,
                          seconds: float) -> None:
        """Settle an invocation of ``batch`` (polled at simulated ``now``): its processing time
        shared among the batch's groups, the done messages deleted, the failed ones hidden
        until their visibility timeout (or the delay the consumer set) passes."""
        if errored:
            self.stats.function_errors += 1
        share = seconds / len(batch)
        for m in batch:
            self._busy_s[_group(m)] += share
        done = [m for m in batch if m["MessageId"] not in failed_ids]
        for start in range(0, len(done), 10):
            chunk = done[start:start + 10]
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)])
        self.stats.deleted += len(done)
        for m in done:
            self._group_in_flight[_group(m)] -= 1
        for m in batch:
            with self._lock:
                deferred = self._deferred.pop(m["ReceiptHandle"], None)
            if m["MessageId"] in failed_ids:
                self.stats.failed += 1
                hidden = self.visibility_timeout if deferred is None else timedelta(seconds=deferred)
                self._hidden[m["MessageId"]] = (now + hidden, m["ReceiptHandle"], _group(m))

def _group(message: dict[str, Any]) -> str:
    """A received message's fairness group: its ``MessageGroupId``, or its own id (a message
    without a group is nobody's backlog)."""
    attributes = message.get("Attributes") or {}
    return attributes.get("MessageGroupId") or f"message:{message['MessageId']}"
