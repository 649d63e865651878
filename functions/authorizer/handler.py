"""The API's JWT authorizer: an API Gateway REQUEST authorizer event in, an IAM policy with
the caller's ``user_id``, ``workspace_id`` and ``roles`` out; an unverified token raises
``Unauthorized`` (401). The event is not logged (it carries the token)."""

from timekeeper.edge import authorizer, startup
from timekeeper.observability import logger

startup.cold_start("authorizer")


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context) -> dict:
    """A REQUEST authorizer event in, the authorizer's answer out."""
    return authorizer.authorize(event)
