"""The exports work queue (:data:`timekeeper.topology.EXPORTS`): its consumer."""

from __future__ import annotations

from typing import Any

from timekeeper import clock
from timekeeper.edge import adapters, batch
from timekeeper.observability import logger, pop_log_keys, push_log_keys
from timekeeper.reporting.exports import ExportMessage, consume_export, reoffer_exports
from timekeeper.topology import EXPORTS


def _run_export(item: batch.Received[ExportMessage]) -> bool:
    message = item.message
    keys = push_log_keys(export_id=message.export_id, workspace_id=message.workspace_id)
    try:
        database = adapters.database()
        return consume_export(database.get(), adapters.s3_client(), adapters.files_bucket(), message,
                              receive_count=item.receive_count, max_receive_count=EXPORTS.consumer.max_receive_count,
                              now=clock.now(), lease=EXPORTS.consumer.lease, reconnect=database.get)
    finally:
        pop_log_keys(keys)


def consume_exports(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS batch of the exports queue through :func:`batch.consume`; return the
    partial batch response (``{"batchItemFailures": [{"itemIdentifier": message id}, ...]}``).

    Each well-formed message is run by :func:`timekeeper.reporting.exports.consume_export` (a
    fault fails its item for a retry; the final receive settles the export failed); a
    malformed one fails only its own item. Afterwards, up to ``EXPORTS.reoffer_per_batch``
    queued exports that were never published are offered again (a failure there is
    logged, never fails the batch). Raises ``psycopg.Error`` only when the database cannot
    be reached at all (the whole batch comes back).
    """
    conn = adapters.database().get()
    response = batch.consume(event, ExportMessage, batch.each(_run_export), what="export message")
    try:
        reoffered = reoffer_exports(conn, adapters.export_publisher(), now=clock.now(),
                                    older_than=EXPORTS.reoffer_after, limit=EXPORTS.reoffer_per_batch)
        if reoffered:
            logger.info("unpublished exports offered again", extra={"reoffered": reoffered})
    except Exception as error:  # noqa: BLE001 - the sweep is best effort; the next batch tries again
        logger.warning("export sweep failed", extra={"error_type": type(error).__name__})
    return response
