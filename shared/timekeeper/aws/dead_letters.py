"""Dead-letter queue adapter: what operators read and do about the topology's dead-letter
queues (:func:`timekeeper.topology.dead_letter_queues`).

* :meth:`DeadLetterQueues.depths` reads each dead-letter queue's depth
  (``ApproximateNumberOfMessages`` plus those in flight) and the age of the oldest of a
  sample of up to ten of its messages, by their ``SentTimestamp`` (SQS keeps a standard
  queue's original enqueue time when it moves a message to its dead-letter queue). The
  sample is received with a visibility timeout of zero, so it hides nothing; a dead-letter
  queue has no redrive policy of its own, so the receive counts it raises change nothing.
* :meth:`DeadLetterQueues.redrive` starts SQS's message move task from a dead-letter queue
  back to its source queue (``StartMessageMoveTask``; SQS moves the messages at its own
  rate, in the background) and returns its task handle. One move task runs per queue at a
  time: a second request while one runs is :class:`RedriveRefused` ``redrive_running``.

:class:`ReceivingDeadLetterQueues` is the same adapter for a stack whose SQS has no move
task (the local stack's moto): its redrive moves every message itself, receive, send to
the source queue with the same body, delete, until the dead-letter queue is empty, which
is what the move task does.

Reading before acting (:meth:`DeadLetterQueues.messages`, :meth:`DeadLetterQueues.redrive_message`,
:meth:`DeadLetterQueues.delete_message`): messages are received with a short visibility
timeout (:data:`READ_VISIBILITY_S`) and each one not acted on is made visible again at once
(``ChangeMessageVisibilityBatch`` to 0), so reading a queue loses nothing and hides nothing for
long; the same boto3 calls on SQS and on the local stack's moto. Each read raises the
message's ``ApproximateReceiveCount`` by one (a dead-letter queue has no redrive policy of
its own, so that changes nothing).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

#: Messages sampled from a dead-letter queue for the oldest message's age (one receive).
AGE_SAMPLE = 10
#: Seconds a message read by an operator stays hidden at most (it is made visible again at once).
READ_VISIBILITY_S = 30
#: Receives (of ten) a read makes at most; a search by message id makes this many more than
#: the queue's depth needs (ten a receive).
READ_ROUNDS = 5
#: Deepest nesting of a body's JSON that is decoded; a deeper body is shown as sent only
#: (``malformed_body``): no consumer of ours sends one, and it could not be served back.
MAX_BODY_DEPTH = 32
#: The message bodies the topology's queues carry: the key that names what a message is for.
_NAMED = (("export_id", "export"), ("job_id", "snapshot_job"), ("run_id", "run"))


@dataclass(frozen=True)
class DeadLetterMessage:
    """A dead-letter message as read: ``message_id`` (SQS's), ``body`` (text as sent),
    ``decoded`` (the JSON object, None when the body is not one), ``names`` (what it is for:
    ``{"kind": "run" | "export" | "snapshot_job", "id", "workspace_id", "run_id"?}``, None
    when unknown), ``receive_count`` (SQS's approximate count, this read included),
    ``first_received_at`` and ``sent_at`` (aware UTC) and ``why`` (``malformed_body``: not a
    message its consumer can parse; ``receives_exhausted``: its consumer failed on every
    receive allowed)."""

    message_id: str
    body: str
    decoded: dict[str, Any] | None
    names: dict[str, str] | None
    receive_count: int
    first_received_at: datetime | None
    sent_at: datetime | None
    why: str


def _instant(attributes: dict[str, str], name: str) -> datetime | None:
    value = attributes.get(name)
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC) if value else None


def _uuid(value: Any) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


def _too_deep(value: Any) -> bool:
    """Whether the decoded JSON ``value`` nests deeper than :data:`MAX_BODY_DEPTH` (iterative)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if level + 1 > MAX_BODY_DEPTH:
                    return True
                stack.append((child, level + 1))
    return False


def _decode(body: str) -> dict[str, Any] | None:
    """The body as a JSON object, None when it is not one, cannot be parsed (any error:
    bad text, nesting beyond the parser's recursion) or nests deeper than :data:`MAX_BODY_DEPTH`."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(decoded, dict) or _too_deep(decoded):
        return None
    return decoded


def read_message(message: dict[str, Any]) -> DeadLetterMessage:
    """A received SQS ``message`` (with its attributes) as a :class:`DeadLetterMessage`.
    Never raises for a body: one that cannot be decoded is kept as sent, ``malformed_body``."""
    body = message.get("Body", "")
    decoded = _decode(body)
    names = None
    for key, kind in _NAMED if decoded else ():
        if _uuid(decoded.get(key)) and _uuid(decoded.get("workspace_id")):
            names = {"kind": kind, "id": str(decoded[key]), "workspace_id": str(decoded["workspace_id"])}
            if kind == "snapshot_job" and _uuid(decoded.get("run_id")):
                names["run_id"] = str(decoded["run_id"])
            break
    attributes = message.get("Attributes", {})
    return DeadLetterMessage(
        message_id=message["MessageId"], body=body, decoded=decoded, names=names,
        receive_count=int(attributes.get("ApproximateReceiveCount", 0)),
        first_received_at=_instant(attributes, "ApproximateFirstReceiveTimestamp"),
        sent_at=_instant(attributes, "SentTimestamp"),
        why="receives_exhausted" if names is not None else "malformed_body")


@dataclass(frozen=True)
class DeadLetterQueue:
    """One dead-letter queue: ``name`` (the operators' name of its source queue), its ARN
    and its source queue's ARN."""

    name: str
    arn: str
    source_arn: str


@dataclass(frozen=True)
class QueueDepth:
    """A dead-letter queue as read at one instant: ``messages`` (visible plus in flight),
    ``oldest_sent_at`` (aware UTC; the oldest of the sample, None when empty) and
    ``redrive_running`` (a move task is running; None when the queue's SQS cannot say)."""

    name: str
    messages: int
    oldest_sent_at: datetime | None
    redrive_running: bool | None


@dataclass(frozen=True)
class RedriveStarted:
    """A redrive that was started: ``task`` (the move task's handle, or a local id),
    ``messages`` (the depth when it started) and ``moved`` (messages already moved: the
    local redrive's count; None for SQS's move task, which moves them afterwards)."""

    name: str
    task: str
    messages: int
    moved: int | None


class RedriveRefused(Exception):  # noqa: N818 - the API's refusal, not an internal error
    """A redrive that cannot start: ``reason`` is ``empty`` (nothing to move) or
    ``redrive_running`` (a move task of this queue is still running)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _url(sqs: Any, arn: str) -> str:
    """The URL of the queue ``arn:aws:sqs:<region>:<account>:<name>``."""
    parts = arn.split(":")
    return sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"]


class DeadLetterQueues:
    """The dead-letter queues ``queues`` (name -> :class:`DeadLetterQueue`) through the boto3
    SQS client ``sqs``. Raises ``KeyError`` for a name it does not hold, and botocore's
    errors for what SQS refuses."""

    def __init__(self, sqs: Any, queues: dict[str, DeadLetterQueue]) -> None:
        self.sqs = sqs
        self.queues = queues

    def names(self) -> list[str]:
        """The dead-letter queues' names, in the topology's order."""
        return list(self.queues)

    def depth(self, name: str) -> QueueDepth:
        """The dead-letter queue ``name`` as it is now (see :class:`QueueDepth`)."""
        queue = self.queues[name]
        url = _url(self.sqs, queue.arn)
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        messages = int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"])
        oldest = None
        if messages:
            sample = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=AGE_SAMPLE, VisibilityTimeout=0,
                                              AttributeNames=["SentTimestamp"], WaitTimeSeconds=0).get("Messages", [])
            sent = [int(m["Attributes"]["SentTimestamp"]) for m in sample if "SentTimestamp" in m.get("Attributes", {})]
            oldest = datetime.fromtimestamp(min(sent) / 1000, tz=UTC) if sent else None
        return QueueDepth(name=name, messages=messages, oldest_sent_at=oldest, redrive_running=self._running(queue))

    def depths(self) -> list[QueueDepth]:
        """Every dead-letter queue's :meth:`depth`, in the topology's order."""
        return [self.depth(name) for name in self.queues]

    def redrive(self, name: str) -> RedriveStarted:
        """Move the messages of the dead-letter queue ``name`` back to its source queue.
        Raises :class:`RedriveRefused` (``empty``, ``redrive_running``)."""
        queue = self.queues[name]
        depth = self.depth(name)
        if depth.messages == 0:
            raise RedriveRefused("empty", f"the {name} dead-letter queue holds no message")
        if depth.redrive_running:
            raise RedriveRefused("redrive_running", f"a redrive of the {name} dead-letter queue is still running")
        task = self.sqs.start_message_move_task(SourceArn=queue.arn, DestinationArn=queue.source_arn)
        return RedriveStarted(name=name, task=task["TaskHandle"], messages=depth.messages, moved=None)

    def _receive(self, url: str) -> list[dict[str, Any]]:
        return self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=READ_VISIBILITY_S, WaitTimeSeconds=0,
            AttributeNames=["ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp", "SentTimestamp",
                            "MessageGroupId"],
        ).get("Messages", [])

    def _show_again(self, url: str, received: list[dict[str, Any]]) -> None:
        """Make ``received`` visible again at once (``ChangeMessageVisibilityBatch``, ten a call)."""
        for start in range(0, len(received), 10):
            self.sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for i, m in enumerate(received[start:start + 10])])

    def messages(self, name: str, *, limit: int = 10) -> list[DeadLetterMessage]:
        """Up to ``limit`` (1..50) messages of the dead-letter queue ``name``, each made
        visible again after the read (nothing is lost or kept hidden), oldest sent first."""
        url = _url(self.sqs, self.queues[name].arn)
        received: dict[str, dict[str, Any]] = {}
        try:
            for _ in range(READ_ROUNDS):
                got = [m for m in self._receive(url) if m["MessageId"] not in received]
                if not got:
                    break
                received.update((m["MessageId"], m) for m in got)
                if len(received) >= limit:
                    break
        finally:
            self._show_again(url, list(received.values()))
        out = [read_message(m) for m in received.values()]
        out.sort(key=lambda m: (m.sent_at or datetime.max.replace(tzinfo=UTC), m.message_id))
        return out[:limit]

    def _take(self, name: str, message_id: str) -> tuple[str, dict[str, Any] | None]:
        """Receive until ``message_id`` is found or the queue's visible messages are exhausted
        (at most the rounds its depth needs, ten a receive, plus :data:`READ_ROUNDS`), the
        others made visible again at once; returns the queue URL and the message (still
        hidden), or None when not found."""
        url = _url(self.sqs, self.queues[name].arn)
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        rounds = int(attributes["Attributes"].get("ApproximateNumberOfMessages", 0)) // 10 + READ_ROUNDS
        others: list[dict[str, Any]] = []
        try:
            for _ in range(rounds):
                got = self._receive(url)
                if not got:
                    break
                found = next((m for m in got if m["MessageId"] == message_id), None)
                others += [m for m in got if m is not found]
                if found is not None:
                    return url, found
        finally:
            self._show_again(url, others)
        return url, None

    def _act_on(self, name: str, message_id: str, act: Callable[[str, dict[str, Any]], None],
                prepare: Callable[[DeadLetterMessage], Any] | None) -> DeadLetterMessage | None:
        """Take ``message_id``, read it and call ``prepare`` with it (what can fail, before the
        queue changes: an error there makes the message visible again and propagates), then
        ``act(url, message)``. Returns the message as it was, None when not held."""
        url, found = self._take(name, message_id)
        if found is None:
            return None
        try:
            message = read_message(found)
            if prepare is not None:
                prepare(message)
        except BaseException:
            self._show_again(url, [found])
            raise
        act(url, found)
        return message

    def redrive_message(self, name: str, message_id: str, *,
                        prepare: Callable[[DeadLetterMessage], Any] | None = None) -> DeadLetterMessage | None:
        """Move the one message ``message_id`` of the dead-letter queue ``name`` back to its
        source queue (send its body, with its ``MessageGroupId`` when it has one: the
        workspace of a fair queue; then delete it here); the other messages stay. ``prepare``
        is called with the message before it moves (see :meth:`_act_on`). Returns the
        message as it was, None when the queue does not hold it (any more)."""
        source = self.queues[name].source_arn

        def act(url: str, found: dict[str, Any]) -> None:
            group = (found.get("Attributes") or {}).get("MessageGroupId")
            self.sqs.send_message(QueueUrl=_url(self.sqs, source), MessageBody=found["Body"],
                                  **({"MessageGroupId": group} if group else {}))
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=found["ReceiptHandle"])

        return self._act_on(name, message_id, act, prepare)

    def delete_message(self, name: str, message_id: str, *,
                       prepare: Callable[[DeadLetterMessage], Any] | None = None) -> DeadLetterMessage | None:
        """Delete the one message ``message_id`` of the dead-letter queue ``name`` (``prepare``
        called with it first, see :meth:`_act_on`); returns it as it was, None when the queue
        does not hold it (any more)."""
        def act(url: str, found: dict[str, Any]) -> None:
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=found["ReceiptHandle"])

        return self._act_on(name, message_id, act, prepare)

    def _running(self, queue: DeadLetterQueue) -> bool | None:
        tasks = self.sqs.list_message_move_tasks(SourceArn=queue.arn, MaxResults=1).get("Results", [])
        return bool(tasks) and tasks[0].get("Status") == "RUNNING"


class ReceivingDeadLetterQueues(DeadLetterQueues):
    """:class:`DeadLetterQueues` for an SQS without message move tasks (moto): a redrive
    moves the messages itself, before it returns (``moved`` says how many)."""

    def _running(self, queue: DeadLetterQueue) -> bool | None:
        return None  # no move task can run: the redrive below finishes before it returns

    def redrive(self, name: str) -> RedriveStarted:
        """Move every message of the dead-letter queue ``name`` to its source queue: receive
        (ten at a time, hidden meanwhile), send each body to the source queue (with its
        ``MessageGroupId``, the workspace of a fair queue), delete it from the dead-letter
        queue. Raises :class:`RedriveRefused` (``empty``)."""
        queue = self.queues[name]
        depth = self.depth(name)
        if depth.messages == 0:
            raise RedriveRefused("empty", f"the {name} dead-letter queue holds no message")
        url, source = _url(self.sqs, queue.arn), _url(self.sqs, queue.source_arn)
        moved = 0
        while True:
            got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300,
                                           WaitTimeSeconds=0, AttributeNames=["MessageGroupId"]).get("Messages", [])
            if not got:
                break
            for message in got:
                group = (message.get("Attributes") or {}).get("MessageGroupId")  # its workspace, kept
                self.sqs.send_message(QueueUrl=source, MessageBody=message["Body"],
                                      **({"MessageGroupId": group} if group else {}))
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                moved += 1
        return RedriveStarted(name=name, task=f"local-{name}-{moved}", messages=depth.messages, moved=moved)
