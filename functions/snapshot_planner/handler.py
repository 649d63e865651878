"""Monthly-snapshot planner: EventBridge scheduled event in (every 15 minutes), one planning
pass out (version 1 of every completed workspace-local month, skip reasons retained, the
SnapshotOverdue metric), then a nudge of the snapshot dispatcher. Reserved concurrency 1."""

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from timekeeper.edge import snapshots, startup
from timekeeper.observability import logger, metrics, tracer

startup.cold_start("snapshot_planner")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
@event_parser(model=EventBridgeModel)
def lambda_handler(event: EventBridgeModel, context) -> dict:
    summary = snapshots.run_planner()
    logger.info("snapshot planner pass", extra=summary)
    return summary
