"""SQS adapter: publish run messages with SendMessageBatch (10 entries a call).

An entry the queue refuses, or a whole call that fails, is reported back as refused
so the caller releases those runs for a later pass.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from botocore.exceptions import BotoCoreError, ClientError

from timekeeper.observability import logger
from timekeeper.schedules.messages import RunMessage

BATCH_LIMIT = 10


class SqsRunPublisher:
    """A :class:`~timekeeper.schedules.messages.RunPublisher` over one SQS queue.

    ``client`` is a boto3 SQS client created once per execution environment at the edge.
    """

    def __init__(self, client: Any, queue_url: str):
        self.client = client
        self.queue_url = queue_url

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        """Send ``messages``; return the run ids the queue refused (never raises for SQS errors)."""
        refused: set[UUID] = set()
        for start in range(0, len(messages), BATCH_LIMIT):
            chunk = messages[start:start + BATCH_LIMIT]
            entries = [{"Id": str(i), "MessageBody": m.model_dump_json()} for i, m in enumerate(chunk)]
            try:
                response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (ClientError, BotoCoreError) as error:
                logger.warning("SendMessageBatch failed; releasing the chunk", extra={"error": str(error)[:500]})
                refused.update(m.run_id for m in chunk)
                continue
            for failed in response.get("Failed", []):
                refused.add(chunk[int(failed["Id"])].run_id)
                logger.warning("queue refused a run message", extra={
                    "run_id": str(chunk[int(failed["Id"])].run_id), "code": failed.get("Code")})
        return refused
