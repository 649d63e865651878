"""The one SQS batch entry's retry outcome: an item to be received again after a backoff
has its message's visibility timeout set to that backoff and fails its batch item."""

from __future__ import annotations

import json
import uuid

from pydantic import BaseModel

from timekeeper.edge import batch

ARN = "arn:aws:sqs:us-east-1:123456789012:timekeeper-queries-runs"


class Job(BaseModel):
    job_id: uuid.UUID


def _event(*ids: str) -> dict:
    return {"Records": [{"messageId": mid, "receiptHandle": f"handle-{mid}", "eventSourceARN": ARN,
                         "body": json.dumps({"job_id": str(uuid.uuid4())}),
                         "attributes": {"ApproximateReceiveCount": "1"}} for mid in ids]}


def test_a_retry_outcome_sets_the_visibility_timeout_to_its_backoff_and_fails_the_item():
    # Given a batch of three: done, failed (the queue's own visibility timeout), retried after 30 s
    changed: list[tuple[str, str, int]] = []

    def change_visibility(queue_arn: str, receipt_handle: str, seconds: int) -> None:
        changed.append((queue_arn, receipt_handle, seconds))

    # When it is consumed
    response = batch.consume(_event("done", "failed", "retried"), Job, lambda received: [True, False,
                                                                                           batch.Retry(30)],
                             what="job message", change_visibility=change_visibility)
    # Then the retried item's message becomes visible again after 30 s, and both unfinished items fail
    assert changed == [(ARN, "handle-retried", 30)]
    assert response == {"batchItemFailures": [{"itemIdentifier": "failed"}, {"itemIdentifier": "retried"}]}


def test_a_refused_visibility_change_still_fails_the_item():
    # Given a visibility change that fails (throttled, or a receipt handle expired)
    def change_visibility(queue_arn: str, receipt_handle: str, seconds: int) -> None:
        raise RuntimeError("ChangeMessageVisibility refused")

    # Then the item still comes back (after the queue's own visibility timeout)
    response = batch.consume(_event("retried"), Job, lambda received: [batch.Retry(30)], what="job message",
                             change_visibility=change_visibility)
    assert response == {"batchItemFailures": [{"itemIdentifier": "retried"}]}


def test_without_a_visibility_adapter_a_retry_is_a_plain_failed_item():
    response = batch.consume(_event("retried"), Job, lambda received: [batch.Retry(30)], what="job message")
    assert response == {"batchItemFailures": [{"itemIdentifier": "retried"}]}


def test_the_receipt_handle_and_queue_come_with_each_record():
    seen: list[batch.Received[Job]] = []

    def handle(received):
        seen.extend(received)
        return [True]

    batch.consume(_event("m1"), Job, handle, what="job message")
    assert (seen[0].receipt_handle, seen[0].queue_arn) == ("handle-m1", ARN)
