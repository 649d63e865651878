"""SQS adapter: publish messages (run messages, export messages) with SendMessageBatch
(10 entries a call).

An entry the queue refuses, or a whole call that fails, is reported back as refused
so the caller releases those runs (or exports) for a later pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from timekeeper.faults import crash_point
from timekeeper.observability import logger
from timekeeper.schedules.messages import RunMessage

BATCH_LIMIT = 10


class SqsMessagePublisher:
    """Publishes pydantic messages (JSON bodies) to one SQS queue; ``key(message)`` is the
    id reported back for a refused message (a run id, an export id).

    ``client`` is a boto3 SQS client created once per execution environment at the edge.
    """

    def __init__(self, client: Any, queue_url: str, key: Callable[[Any], UUID]):
        self.client = client
        self.queue_url = queue_url
        self.key = key

    def publish(self, messages: Sequence[BaseModel]) -> set[UUID]:
        """Send ``messages``; return the keys of those the queue refused (never raises for SQS errors)."""
        refused: set[UUID] = set()
        for start in range(0, len(messages), BATCH_LIMIT):
            if start:
                crash_point("publish.between_batches")
            chunk = messages[start:start + BATCH_LIMIT]
            entries = [{"Id": str(i), "MessageBody": m.model_dump_json()} for i, m in enumerate(chunk)]
            try:
                response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (ClientError, BotoCoreError) as error:
                logger.warning("SendMessageBatch failed; releasing the chunk", extra={"error": str(error)[:500]})
                refused.update(self.key(m) for m in chunk)
                continue
            for failed in response.get("Failed", []):
                refused.add(self.key(chunk[int(failed["Id"])]))
                logger.warning("queue refused a message", extra={
                    "key": str(self.key(chunk[int(failed["Id"])])), "code": failed.get("Code")})
        return refused


class SqsRunPublisher(SqsMessagePublisher):
    """A :class:`~timekeeper.schedules.messages.RunPublisher` over one SQS queue (refusals
    reported by run id)."""

    def __init__(self, client: Any, queue_url: str):
        super().__init__(client, queue_url, key=_run_id)

    def publish(self, messages: Sequence[RunMessage]) -> set[UUID]:  # type: ignore[override]
        """Send ``messages``; return the run ids the queue refused (never raises for SQS errors)."""
        return super().publish(messages)


def _run_id(message: RunMessage) -> UUID:
    return message.run_id
