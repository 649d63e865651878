"""The message-events consumer: SES's message states (raw SNS deliveries on SQS) in,
partial batch failures out (a malformed event fails only its own item and reaches the DLQ
after maxReceiveCount)."""

from timekeeper.edge import messages, startup
from timekeeper.observability import logger, metrics, tracer

startup.cold_start("message_events_consumer")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return messages.consume_message_events(event, context)
