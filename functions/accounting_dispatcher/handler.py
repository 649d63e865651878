"""Accounting's minute dispatcher: EventBridge scheduled event in,
one dispatcher pass out. Each partition is its own function of this code (reserved
concurrency 1; retries 0: a missed tick is the next one), its rule naming the partition
in the event's detail."""

from dataclasses import asdict

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from timekeeper.edge import runs, startup
from timekeeper.observability import logger, metrics, tracer
from timekeeper.topology import ACCOUNTING

startup.cold_start("accounting_dispatcher")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
@event_parser(model=EventBridgeModel)
def lambda_handler(event: EventBridgeModel, context) -> dict:
    report = runs.run_dispatcher(ACCOUNTING.name, runs.tick_partition(event.detail))
    result = asdict(report)
    logger.info("dispatcher pass", extra={**result, "partition": event.detail.get("partition", 0)})
    return result
