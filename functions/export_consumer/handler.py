"""The exports queue consumer: an SQS batch in, partial batch failures out (a malformed
message fails only its own item and reaches the DLQ after maxReceiveCount; a fault is
retried and the final receive settles the export failed)."""

from timekeeper.edge import exports, startup
from timekeeper.observability import logger, metrics, tracer

startup.cold_start("export_consumer")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return exports.consume_exports(event, context)
