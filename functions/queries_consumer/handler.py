"""Scheduled delivery's queue consumer (owner queries): an SQS batch of one delivery run
in, partial batch failures out. A report run may hold this function up to 12 minutes
while it polls the renderer (timeout 900 s)."""

from timekeeper.edge import runs, startup
from timekeeper.observability import logger, metrics, tracer
from timekeeper.topology import QUERIES

startup.cold_start("queries_consumer")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return runs.consume_runs(QUERIES.name, event, context)
