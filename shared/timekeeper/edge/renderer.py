"""The report renderer (:data:`timekeeper.topology.REPORT_RENDERER`): one render per
asynchronous invocation."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from timekeeper import clock
from timekeeper.aws.renderer import RenderRequest
from timekeeper.edge import adapters
from timekeeper.observability import REPORT_RENDER_FAILED, REPORT_RENDERED, logger, metrics, pop_log_keys, push_log_keys
from timekeeper.reporting import rendering
from timekeeper.topology import REPORT_RENDERER


def run_renderer(event: Any) -> dict[str, Any]:
    """Run the render an asynchronous invocation names (:class:`RenderRequest`); return a
    summary (``render_id``, ``state``, ``error_code``, ``attempts``).

    A malformed event, or one naming no render, is logged and dropped (``{"dropped":
    reason}``): retrying it cannot help. Expected failures are recorded on the render and
    returned; an unexpected fault below the attempt limit raises, so Lambda retries. An
    outcome whose connection was lost before it was recorded is recorded on a new
    connection of the renderer's provider.
    """
    try:
        request = RenderRequest.model_validate(event)
    except ValidationError as error:
        logger.warning("malformed render request dropped", extra={"error": str(error)[:500]})
        return {"dropped": "malformed"}
    keys = push_log_keys(workspace_id=request.workspace_id, render_id=request.render_id)
    try:
        try:
            database = adapters.renderer_database()
            row = rendering.render(database.get(), adapters.s3_client(), adapters.files_bucket(),
                                   workspace_id=request.workspace_id, render_id=request.render_id, now=clock.now(),
                                   max_attempts=REPORT_RENDERER.max_attempts, reconnect=database.get)
        except rendering.RenderNotFound:
            logger.warning("render request names no render; dropped")
            return {"dropped": "render_not_found"}
        summary = {"render_id": str(row.id), "state": row.state, "error_code": row.error_code, "attempts": row.attempts}
        if row.state == "succeeded":
            metrics.add_metric(name=REPORT_RENDERED, unit="Count", value=1)
        elif row.state == "failed":
            metrics.add_metric(name=REPORT_RENDER_FAILED, unit="Count", value=1)
        logger.info("render", extra=summary)
        return summary
    finally:
        pop_log_keys(keys)
