"""The public link routes in a function of its own (its own reserved concurrency, so link
clicks cannot take the API's executions): ``GET /downloads/{token}`` (verify the signed
token, the access rule, a 302 to a presigned URL) and the one-click opt-out ``GET``/``POST
/opt-outs/{token}`` (RFC 8058), answered by the API's resolver. The request event is not
logged (its path carries the token)."""

from aws_lambda_powertools.logging import correlation_paths

from timekeeper.edge import startup
from timekeeper.edge.api import serve_download
from timekeeper.observability import logger, tracer

startup.cold_start("downloads")


@logger.inject_lambda_context(clear_state=True, correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict, context) -> dict:
    """An API Gateway REST proxy event of a public link route in, a proxy response out."""
    return serve_download(event, context)
