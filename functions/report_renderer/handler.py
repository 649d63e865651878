"""The report renderer: an asynchronous invocation ``{"workspace_id", "render_id"}`` in,
one render of a report version to a PDF in the files bucket out (recorded on the
``report_renders`` row). A malformed event is logged and dropped; an expected failure is
recorded on the row and returned; an unexpected fault raises, so Lambda retries it (two
retries, then the on-failure queue)."""

from timekeeper.edge import renderer, startup
from timekeeper.observability import logger, metrics, tracer

startup.cold_start("report_renderer")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return renderer.run_renderer(event)
