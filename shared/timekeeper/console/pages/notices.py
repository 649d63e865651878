"""The person's notices: the list, Mark as read, notice e-mails back on, and a notice's
link to its schedule or delivery."""

from __future__ import annotations

from http import HTTPStatus
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console import glossary
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: What each kind of notice says happened (the API's ``kind``): the glossary's words.
NOTICE_KINDS = ("schedule_paused", "delivery_skipped_stale", "posting_failed", "schedule_ownerless",
                "resubscribe_invited", "schedule_failed")


@router.get(f"{PREFIX}/notices")
@signed_in
def notices_page(ctx: Request) -> Response:
    """``GET /console/notices``: the person's notices, newest first (``show=unread`` for the
    unread only, older pages by ``before``), and whether they get notice e-mails."""
    params = ctx.params
    unread_only = params.get("show") == "unread"
    reply = ctx.api().call("GET", "/notices", query={"unread": "true" if unread_only else None,
                                                     "before": params.get("before")})
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    items = [{**n, "what": glossary.words(n["kind"]), "when": when(n["created_at"], zone),
              "read": when(n.get("read_at"), zone),
              "facts": {k: v for k, v in (n.get("detail") or {}).items() if k != "reason"}}
             for n in reply.body["items"]]
    before = reply.body.get("next_before")
    query = {k: v for k, v in {"show": "unread" if unread_only else None, "before": before}.items() if v}
    mail = ctx.api().call("GET", "/notices/mail")
    if mail.status != 200:
        return ctx.api_error(mail)
    return ctx.page("notices.html", items=items, unread=reply.body["unread"], zone=zone,
                    unread_only=unread_only, done=params.get("done"),
                    mail=mail.body["mail"], mail_off_since=when(mail.body.get("opted_out_at"), zone),
                    next_page=f"{PREFIX}/notices?" + urlencode(query) if before else None)


@router.post(f"{PREFIX}/notices/mail")
@checked_post
def notices_mail_on(ctx: Request) -> Response:
    """Turn the person's notice e-mails of the workspace back on (after they followed
    the one-click opt-out link of one)."""
    reply = ctx.api().call("POST", "/notices/mail")
    if reply.status != 200:
        return ctx.api_error(reply)
    return ctx.redirect(f"{PREFIX}/notices?done=mail")


@router.post(f"{PREFIX}/notices/read")
@checked_post
def notices_read(ctx: Request) -> Response:
    """``POST /console/notices/read``: mark one notice (``id``) or all as read, then the list;
    an ``id`` that is no notice number is a 422 page."""
    raw = ctx.fields.get("id", "").strip()
    if raw and not (raw.isdigit() and 0 < int(raw) < 2**63):
        return ctx.page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, title="Refused",
                        message="No such notice.")
    reply = ctx.api().call("POST", "/notices/read", body={"ids": [int(raw)]} if raw else {})
    if reply.status != 200:
        return ctx.api_error(reply)
    return ctx.redirect(f"{PREFIX}/notices?done=read")


@router.get(f"{PREFIX}/open/<schedule_id>")
@signed_in
def open_schedule(ctx: Request, schedule_id: str) -> Response:
    """A notice's link: the delivery page when the API knows the id as one of the
    person's query schedules, else the schedule page (which answers for itself)."""
    reply = ctx.api().call("GET", f"/query-schedules/{schedule_id}")
    kind = "deliveries" if reply.status == 200 else "schedules"
    return ctx.redirect(f"{PREFIX}/{kind}/{quote(schedule_id, safe='')}")
