"""The schedule owners' HTTP API: an API Gateway REST proxy event in, a proxy
response out. The routes, validation, identity and tenant rule live in ``timekeeper.api``, the
console's pages (a client of those routes) in ``timekeeper.console``;
the request event is not logged (it carries the caller's token)."""

from aws_lambda_powertools.logging import correlation_paths

from timekeeper.edge import startup
from timekeeper.edge.api import resolve
from timekeeper.observability import logger, tracer

startup.cold_start("api")


@logger.inject_lambda_context(clear_state=True, correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict, context) -> dict:
    """An API Gateway REST proxy event in, a proxy response (statusCode, body, headers) out
    (the console's pages for ``/`` and ``/console/...``)."""
    return resolve(event, context)
