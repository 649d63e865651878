"""Monthly-snapshot dispatcher: a scheduled event every minute or the planner's nudge in,
one admission pass out (lost jobs settled, runs admitted under the cap with the backfill
lane, stale offers reoffered, jobs sent). Reserved concurrency 1; retries 0."""

from timekeeper.edge import snapshots, startup
from timekeeper.observability import logger, metrics, tracer

startup.cold_start("snapshot_dispatcher")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    summary = snapshots.run_dispatcher()
    logger.info("snapshot dispatcher pass", extra=summary)
    return summary
