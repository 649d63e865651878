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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

#: Messages sampled from a dead-letter queue for the oldest message's age (one receive).
AGE_SAMPLE = 10


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
