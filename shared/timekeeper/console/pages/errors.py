"""The console's own error pages: a session the API could not check, and a path no page
answers."""

from __future__ import annotations

from http import HTTPStatus

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.api_client import SessionUnknown
from timekeeper.console.context import current_request
from timekeeper.console.paths import way_back

router = Router()


@router.exception_handler(SessionUnknown)
def session_unknown(error: SessionUnknown) -> Response:
    """The API could not say whether the session was signed out: its status (a 502 for
    one that is no error) and message, and no page."""
    ctx = current_request()
    body = error.reply.body if isinstance(error.reply.body, dict) else {}
    status = error.reply.status if 400 <= error.reply.status < 600 else HTTPStatus.BAD_GATEWAY
    return ctx.page("error.html", status, session=None, title="Not available", code=body.get("code"),
                    message=body.get("message") or "Your session could not be checked. Try again in a moment.")


def not_found(_: Exception) -> Response:
    """No page at this path: a 404 page (with the person's navigation when signed in)
    leading back to the list the path belongs to."""
    ctx = current_request()
    return ctx.page("error.html", HTTPStatus.NOT_FOUND, session=ctx.current_session(), title="Not found",
                    message="There is no such page.", back=way_back(ctx.path))
