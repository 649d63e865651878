"""The one SQS batch entry point every queue consumer uses (the run queues' consumers, the
exports consumer, the snapshot run job).

:func:`consume` parses each record of the event once into the consumer's message model,
hands the well-formed ones to the consumer's batch handler, and builds the partial batch
response (ReportBatchItemFailures) from the outcomes. A malformed record is logged and
fails only its own item, so the rest of the batch is acknowledged and the malformed one
reaches the dead-letter queue after maxReceiveCount.

An item's outcome may also be a :class:`Retry`: it fails its batch item like ``False``,
and its message's visibility timeout is first set to the retry's backoff (SQS
``ChangeMessageVisibility`` with the record's receipt handle), so the next receive comes
after that backoff instead of after the queue's whole visibility timeout. The backoff is
the only wait between two receives; the queue's ``maxReceiveCount`` still bounds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from timekeeper.observability import logger

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Received(Generic[M]):
    """One well-formed record: its SQS ``message_id``, the parsed ``message``,
    ``receive_count`` (``ApproximateReceiveCount``; 1 when missing or not a number), and
    the ``receipt_handle`` and ``queue_arn`` (``eventSourceARN``) a visibility change names."""

    message_id: str
    message: M
    receive_count: int
    receipt_handle: str = ""
    queue_arn: str = ""


@dataclass(frozen=True)
class Retry:
    """An item's outcome: fail its batch item and have its message received again after
    ``delay_s`` seconds (0..43,200, the SQS limit): the visibility timeout as backoff."""

    delay_s: int

    def __post_init__(self) -> None:
        if not 0 <= self.delay_s <= 43_200:
            raise ValueError("a visibility timeout is 0..43200 seconds")


#: An item's outcome: True (done, acknowledge it), False (fail its batch item: the queue
#: redelivers it after its visibility timeout) or a :class:`Retry` (fail it, redelivered
#: after the retry's backoff).
Outcome = bool | Retry

#: A consumer's batch handler: the well-formed records in, one outcome per record out, in order.
BatchHandler = Callable[[list[Received[M]]], Sequence[Outcome]]

#: Sets a received message's visibility timeout: ``(queue_arn, receipt_handle, seconds)``
#: (the edge's :func:`timekeeper.edge.adapters.change_visibility`).
VisibilityChanger = Callable[[str, str, int], None]


def parse_records(event: dict[str, Any], model: type[M], *, what: str) -> tuple[list[Received[M]], list[str]]:
    """Parse each SQS record's body of ``event`` as ``model`` (JSON), once. Returns
    ``([received, ...], [malformed message ids])``; a malformed record is logged as a
    ``what`` (e.g. "run message") that reaches the dead-letter queue after maxReceiveCount."""
    received: list[Received[M]] = []
    malformed: list[str] = []
    for record in event.get("Records", []):
        message_id = record.get("messageId", "")
        try:
            message = model.model_validate_json(record.get("body") or "")
        except ValidationError as error:
            logger.warning(f"malformed {what}; it reaches the dead-letter queue after maxReceiveCount",
                           extra={"message_id": message_id, "error": str(error)[:500]})
            malformed.append(message_id)
            continue
        attributes = record.get("attributes") or {}
        try:
            receive_count = int(attributes.get("ApproximateReceiveCount") or 1)
        except ValueError:
            receive_count = 1
        received.append(Received(message_id, message, receive_count, record.get("receiptHandle") or "",
                                 record.get("eventSourceARN") or ""))
    return received, malformed


def consume(event: dict[str, Any], model: type[M], handle: BatchHandler[M], *, what: str,
            change_visibility: VisibilityChanger | None = None) -> dict[str, Any]:
    """Consume an SQS batch: parse each record once (:func:`parse_records`), call
    ``handle`` with the well-formed ones (not at all when there are none), and return the
    partial batch response ``{"batchItemFailures": [{"itemIdentifier": message id}, ...]}``:
    the malformed records, then the records whose outcome is False or a :class:`Retry`.

    A :class:`Retry` outcome first sets its message's visibility timeout to the retry's
    ``delay_s`` through ``change_visibility``; a change that fails (or no
    ``change_visibility``) is logged and leaves the queue's own visibility timeout, so the
    item still comes back, only later.

    A batch whose every item failed still returns normally (its items come back; a poison
    message alone is not a function error). An exception from ``handle`` propagates, and
    the whole batch comes back: handlers catch per record what must fail only its item.
    Raises ``ValueError`` when ``handle`` returns a different number of outcomes."""
    received, failures = parse_records(event, model, what=what)
    if received:
        outcomes = list(handle(received))
        if len(outcomes) != len(received):
            raise ValueError(f"{len(received)} records but {len(outcomes)} outcomes")
        for item, outcome in zip(received, outcomes, strict=True):
            if isinstance(outcome, Retry):
                _defer(item, outcome, change_visibility, what)
                failures.append(item.message_id)
            elif not outcome:
                failures.append(item.message_id)
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failures]}


def _defer(item: Received[Any], retry: Retry, change_visibility: VisibilityChanger | None, what: str) -> None:
    """Set the item's visibility timeout to the retry's backoff (logged when it cannot be)."""
    if change_visibility is None or not item.receipt_handle or not item.queue_arn:
        logger.info(f"{what} retried after the queue's visibility timeout (no visibility change possible)",
                    extra={"message_id": item.message_id})
        return
    try:
        change_visibility(item.queue_arn, item.receipt_handle, retry.delay_s)
    except Exception as error:  # noqa: BLE001 - the item still comes back, after the queue's own timeout
        logger.warning(f"{what}: the visibility change failed; retried after the queue's visibility timeout",
                       extra={"message_id": item.message_id, "error_type": type(error).__name__})


def each(handle_one: Callable[[Received[M]], bool]) -> BatchHandler[M]:
    """A batch handler that handles the records one at a time with ``handle_one``."""
    def handle(received: list[Received[M]]) -> list[bool]:
        return [handle_one(item) for item in received]

    return handle
