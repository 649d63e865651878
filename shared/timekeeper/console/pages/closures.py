"""The workspace's closures: its closed local dates, with an admin's Close the date and
Reopen."""

from __future__ import annotations

import re
from http import HTTPStatus
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.api_client import ApiReply
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: A local date as the closure routes take it (what a done message may echo).
DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def closures_page(ctx: Request, *, problem: str | None = None, done: str | None = None,
                  typed: dict[str, str] | None = None, status_code: int = 200) -> Response:
    """The workspace's closures (``GET /closures``: closed local dates, by date), with
    the add and remove forms for ``schedules:admin``; ``typed`` keeps a refused form's text."""
    reply = ctx.api().call("GET", "/closures")
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    items = [{**c, "created": when(c["created_at"], zone)} for c in reply.body["items"]]
    return ctx.page("closures.html", status_code, items=items, problem=problem, done=done, zone=zone,
                    typed=typed or {}, may_change=ctx.session.has("schedules:admin"))


def closure_refused(ctx: Request, reply: ApiReply, typed: dict[str, str] | None = None) -> Response:
    """The closures page with the API's refusal ``reply`` (its message and field) and the
    ``typed`` form text kept."""
    body = reply.body if isinstance(reply.body, dict) else {}
    field_name = body.get("field")
    text = f"Refused: {body.get('message') or 'the request was refused'}" + (f" ({field_name})"
                                                                             if field_name else "")
    return closures_page(ctx, problem=text, typed=typed,
                         status_code=reply.status if 400 <= reply.status < 500 else 502)


@router.get(f"{PREFIX}/closures")
@signed_in
def closures(ctx: Request) -> Response:
    """``GET /console/closures``: the closed dates, with what was just added or reopened and
    how many business-day schedules were recomputed."""
    params = ctx.params
    day, count = params.get("date", ""), params.get("recomputed", "")
    done = None
    if params.get("done") in ("added", "kept", "removed") and DATE_TEXT.fullmatch(day):
        done = {"added": f"{day} is closed", "kept": f"{day} was already closed: its first reason is kept",
                "removed": f"{day} is open again"}[params["done"]]
        if count.isdigit() and params["done"] != "kept":
            done += f"; {count} business-day schedule{'s' if count != '1' else ''} recomputed."
        else:
            done += "."
    return closures_page(ctx, done=done)


@router.post(f"{PREFIX}/closures/add")
@checked_post
def closure_add(ctx: Request) -> Response:
    """``POST /console/closures/add``: close a date (``POST /closures``), then the list."""
    typed = {"date": ctx.fields.get("date", "").strip(), "reason": ctx.fields.get("reason", "").strip()}
    reply = ctx.api().call("POST", "/closures", body=typed)
    if reply.status in (200, 201):
        return ctx.redirect(f"{PREFIX}/closures?" + urlencode({
            "done": "added" if reply.body["changed"] else "kept", "date": reply.body["closure"]["date"],
            "recomputed": str(reply.body["schedules_recomputed"])}))
    return closure_refused(ctx, reply, typed)


@router.post(f"{PREFIX}/closures/remove")
@checked_post
def closure_remove(ctx: Request) -> Response:
    """``POST /console/closures/remove``: reopen a date (``DELETE /closures/{date}``), then the
    list."""
    day = ctx.fields.get("date", "").strip()
    if not day:
        return closures_page(ctx, problem="Refused: no date named (date).",
                             status_code=HTTPStatus.UNPROCESSABLE_ENTITY)
    reply = ctx.api().call("DELETE", f"/closures/{quote(day, safe='')}")
    if reply.status == 200:
        return ctx.redirect(f"{PREFIX}/closures?" + urlencode({
            "done": "removed", "date": reply.body["closure"]["date"],
            "recomputed": str(reply.body["schedules_recomputed"])}))
    return closure_refused(ctx, reply)
