"""The message-events queue (:data:`timekeeper.topology.MESSAGE_EVENTS`): its consumer.

SES publishes the configuration set's events to an SNS topic; the queue is subscribed
with raw message delivery, so each record's body is the SES event's JSON
(:class:`timekeeper.reporting.message_states.SesEvent`).
"""

from __future__ import annotations

from typing import Any

from timekeeper import clock
from timekeeper.edge import adapters, batch
from timekeeper.observability import logger
from timekeeper.reporting.message_states import UNKNOWN, SesEvent, record_message_event
from timekeeper.topology import MESSAGE_EVENTS

#: How long an event whose message id no delivery has yet waits before its next receive
#: (seconds): the outbox records the id a moment after SES accepted the message.
UNKNOWN_RETRY_S = 60


def _record(item: batch.Received[SesEvent]) -> batch.Outcome:
    conn = adapters.database().get()
    try:
        with conn.transaction():
            result = record_message_event(conn, item.message, now=clock.now())
    except Exception as error:  # noqa: BLE001 - only this item comes back
        logger.warning("message event not recorded; retried", extra={
            "message_id": item.message_id, "error_type": type(error).__name__})
        return False
    if result == UNKNOWN:
        if item.receive_count < MESSAGE_EVENTS.max_receive_count:
            return batch.Retry(UNKNOWN_RETRY_S)
        logger.warning("message event for a message no delivery has; dropped", extra={
            "message_id": item.message_id, "provider_message_id": item.message.mail.messageId,
            "event_type": item.message.eventType})
    return True


def consume_message_events(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS batch of the message-events queue through :func:`batch.consume`;
    return the partial batch response (``{"batchItemFailures": [{"itemIdentifier": message
    id}, ...]}``).

    Each well-formed SES event is recorded beside its delivery in a transaction of its own
    (:func:`timekeeper.reporting.message_states.record_message_event`: duplicates and
    out-of-order events absorbed). A malformed record fails only its own item and reaches
    the DLQ after maxReceiveCount; a database error fails only its item; an event for a
    message id no delivery has yet is received again after :data:`UNKNOWN_RETRY_S` s and
    dropped (logged) on its last receive."""
    return batch.consume(event, SesEvent, batch.each(_record), what="message event",
                         change_visibility=adapters.change_visibility)
