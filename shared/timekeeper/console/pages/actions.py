"""Pause, Resume and Run now of a schedule or a delivery: one route for both kinds
(``POST /console/{schedules|deliveries}/{id}/{pause|resume|run}``). Its router is
included last: its path matches any three segments, so the other pages' POST routes of
that shape (a schedule's rule and failure notices) come before it."""

from __future__ import annotations

from http import HTTPStatus
from urllib.parse import quote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post
from timekeeper.console.paths import PREFIX

router = Router()

#: The actions, and what a page says once one was done (``?done=<action>``).
ACTIONS = {"pause": "paused", "resume": "resumed", "run": "queued to run now"}
#: The console's kinds of schedule, by path: the API prefix of each.
_KINDS = {"schedules": "/schedules", "deliveries": "/query-schedules"}


@router.post(f"{PREFIX}/<kind>/<schedule_id>/<action>")
@checked_post
def schedule_action(ctx: Request, kind: str, schedule_id: str,
                    action: str) -> Response:
    """``POST /console/{kind}/{id}/{action}``: Pause, Resume or Run now (with the form's
    Idempotency-Key) of a schedule or a delivery through the API, then back to its page
    (``?done=<action>``); an unknown kind or action is a 404 page, the API's refusal its
    error page."""
    if action not in ACTIONS or kind not in _KINDS:
        return ctx.page("error.html", HTTPStatus.NOT_FOUND, title="Not found",
                        message="No such action.")
    headers = {"Idempotency-Key": ctx.fields["key"][:200]} if action == "run" and ctx.fields.get("key") else None
    reply = ctx.api().call("POST", f"{_KINDS[kind]}/{schedule_id}/{action}", headers=headers)
    if reply.status >= 300:
        return ctx.api_error(reply)
    return ctx.redirect(f"{PREFIX}/{kind}/{quote(schedule_id, safe='')}?done={action}")
