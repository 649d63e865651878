"""The one SQS batch entry point every queue consumer uses (the run queues' consumers, the
exports consumer, the snapshot run job).

:func:`consume` parses each record of the event once into the consumer's message model,
hands the well-formed ones to the consumer's batch handler, and builds the partial batch
response (ReportBatchItemFailures) from the outcomes. A malformed record is logged and
fails only its own item, so the rest of the batch is acknowledged and the malformed one
reaches the dead-letter queue after maxReceiveCount.
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
    """One well-formed record: its SQS ``message_id``, the parsed ``message`` and
    ``receive_count`` (``ApproximateReceiveCount``; 1 when missing or not a number)."""

    message_id: str
    message: M
    receive_count: int


#: A consumer's batch handler: the well-formed records in, one outcome per record out, in
#: order (True: done, acknowledge it; False: fail its batch item, the queue redelivers it).
BatchHandler = Callable[[list[Received[M]]], Sequence[bool]]


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
        received.append(Received(message_id, message, receive_count))
    return received, malformed


def consume(event: dict[str, Any], model: type[M], handle: BatchHandler[M], *, what: str) -> dict[str, Any]:
    """Consume an SQS batch: parse each record once (:func:`parse_records`), call
    ``handle`` with the well-formed ones (not at all when there are none), and return the
    partial batch response ``{"batchItemFailures": [{"itemIdentifier": message id}, ...]}``:
    the malformed records, then the records whose outcome is False.

    A batch whose every item failed still returns normally (its items come back; a poison
    message alone is not a function error). An exception from ``handle`` propagates, and
    the whole batch comes back: handlers catch per record what must fail only its item.
    Raises ``ValueError`` when ``handle`` returns a different number of outcomes."""
    received, failures = parse_records(event, model, what=what)
    if received:
        outcomes = list(handle(received))
        if len(outcomes) != len(received):
            raise ValueError(f"{len(received)} records but {len(outcomes)} outcomes")
        failures += [item.message_id for item, done in zip(received, outcomes, strict=True) if not done]
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failures]}


def each(handle_one: Callable[[Received[M]], bool]) -> BatchHandler[M]:
    """A batch handler that handles the records one at a time with ``handle_one``."""
    def handle(received: list[Received[M]]) -> list[bool]:
        return [handle_one(item) for item in received]

    return handle
