"""Monthly-snapshot run job: job messages in (batch size 1), partial batch failures out.
Starts or resumes the attempt, commits chunks with their cursor, hands over before the
time limit, then validates and publishes in one transaction."""

from timekeeper.edge import snapshots, startup
from timekeeper.observability import logger, metrics, tracer

startup.cold_start("snapshot_run_job")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return snapshots.run_jobs(event, context)
