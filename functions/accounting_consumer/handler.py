"""Accounting's schedule queue consumer: an SQS batch in, partial
batch failures out (a malformed message fails only its own item and reaches the DLQ after
maxReceiveCount)."""

from timekeeper.edge import runs, startup
from timekeeper.observability import logger, metrics, tracer
from timekeeper.topology import ACCOUNTING

startup.cold_start("accounting_consumer")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return runs.consume_runs(ACCOUNTING.name, event, context)
