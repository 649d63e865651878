"""The deliveries' pages (scheduled query deliveries): the list, a delivery's page with its
runs, per-recipient ledger and changes, the message preview, its opt-outs and the owner's
invitation back, the recipient's own invitation page, and the suppression list."""

from __future__ import annotations

import base64
import hashlib
import uuid
from html.parser import HTMLParser
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.api_client import ApiReply
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import changed_fields, when, zone_of
from timekeeper.console.pages.actions import ACTIONS
from timekeeper.console.pages.schedules import PAGE_SIZE
from timekeeper.console.paths import PREFIX
from timekeeper.console.people import people_by_id

router = Router()

#: What a delivery's page says once something was done to it (``?done=<what>``).
DONE = {**ACTIONS, "created": "created", "updated": "updated"}


class _StyleAttributes(HTMLParser):
    """The ``style`` attribute values of an HTML document, as a browser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Keep the tag's ``style`` attribute value."""
        self.values.update(value for name, value in attrs if name == "style" and value)


def message_preview_policy(html: str) -> str:
    """The Content-Security-Policy of a message preview's HTML part: nothing loads, nothing
    runs (``sandbox``, no scripts), only the console may frame it, and the message's own
    ``style`` attributes apply by their hashes (``'unsafe-hashes'`` with one ``sha256`` per
    distinct value; never ``unsafe-inline``): the message looks as a mail client shows it."""
    parser = _StyleAttributes()
    parser.feed(html)
    parser.close()
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(v.encode()).digest()).decode()}'"
                      for v in sorted(parser.values))
    styles = f"'unsafe-hashes' {hashes}" if hashes else "'none'"
    return (f"default-src 'none'; style-src {styles}; img-src 'none'; form-action 'none'; "
            "frame-ancestors 'self'; base-uri 'none'; sandbox")


#: The deliveries list's filters (the query parameters of ``GET /query-schedules``).
DELIVERY_FILTERS = ("name", "source", "owner", "status")


def filters_of(params: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """The list filters ``names`` the address gives (``params``), trimmed and at most 300
    characters each; empty ones are left out (the API judges the rest)."""
    return {name: params[name].strip()[:300] for name in names if (params.get(name) or "").strip()}


def owner_choices(ctx: Request) -> list[tuple[str, str]]:
    """The people a list may be filtered by owner: ``[(user id, "Name <address>")]``, the
    workspace's members (``GET /members``, first 200) or, when the API does not list them
    to the person, only themself ("Me")."""
    reply = ctx.api().call("GET", "/members", query={"limit": "200"})
    if reply.status != 200 or not isinstance(reply.body, dict):
        return [(ctx.session.user_id, "Me")]
    return [(m["user_id"], f"{m['display_name']} <{m['email']}>" if m.get("email") else m["display_name"])
            for m in reply.body["items"]]


@router.get(f"{PREFIX}/deliveries")
@signed_in
def deliveries(ctx: Request) -> Response:
    """``GET /console/deliveries``: the workspace's deliveries, pages of :data:`PAGE_SIZE`,
    filtered by ``name`` (a part of it), ``source`` (query or report), ``owner`` (a user id)
    and ``status``; a filter the API refuses is shown on its field (422) with what was typed."""
    params = ctx.params
    filters = filters_of(params, DELIVERY_FILTERS)
    reply = ctx.api().call("GET", "/query-schedules", query={**filters, "cursor": params.get("cursor"),
                                                             "limit": str(PAGE_SIZE)})
    page = {"filters": filters, "owners": owner_choices(ctx),
            "done": "The delivery was deleted: its runs, outcomes and history are kept."
            if params.get("done") == "deleted" else None}
    if reply.status == 422 and isinstance(reply.body, dict) and reply.body.get("field") in DELIVERY_FILTERS:
        return ctx.page("deliveries.html", HTTPStatus.UNPROCESSABLE_ENTITY, rows=[], next_page=None,
                        problem={"field": reply.body["field"], "message": reply.body.get("message")}, **page)
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = reply.body.get("timezone") or "UTC"
    rows = [{**item, "next": when(item.get("next_due_at"), zone)} for item in reply.body["items"]]
    cursor = reply.body.get("next_cursor")
    return ctx.page("deliveries.html", rows=rows, problem=None,
                    next_page=f"{PREFIX}/deliveries?" + urlencode({**filters, "cursor": cursor}) if cursor else None,
                    **page)


@router.get(f"{PREFIX}/deliveries/<schedule_id>")
@signed_in
def delivery(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/deliveries/{id}``: a delivery, its runs with the per-recipient ledger
    (pages by ``cursor``), its changes and the person's own standing with its messages."""
    return delivery_page(ctx, schedule_id)


def delivery_page(ctx: Request, schedule_id: str, *, problem: str | None = None,
                  status_code: int = HTTPStatus.OK) -> Response:
    """A delivery's page (``?done=`` / ``?cursor=`` of the request), with ``problem`` (the
    API's refusal of an action, shown above the actions) answered with ``status_code``."""
    params = ctx.params
    done = DONE.get(params.get("done", ""))
    sent_to = params.get("to", "") if params.get("done") == "test" else None
    client = ctx.api()
    reply = client.call("GET", f"/query-schedules/{schedule_id}")
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    history = runs_of(ctx, schedule_id, zone, params.get("cursor"))
    if history.status != 200:
        return ctx.api_error(history)
    runs, cursor = history.body["items"], history.body.get("next_cursor")
    trail = client.call("GET", f"/query-schedules/{schedule_id}/history")
    changes = [{**e, "when": when(e["at"], zone), "fields": changed_fields(e.get("detail"))}
               for e in trail.body["items"]] if trail.status == 200 else None
    return ctx.page("delivery.html", status_code, rule_words=reply.body.get("description"),
                    s={**reply.body, "next": when(reply.body.get("next_due_at"), zone)},
                    zone=zone, runs=runs, live=under_way(runs), people=people_by_id(ctx), done=done, sent_to=sent_to,
                    problem=problem, test_key=str(uuid.uuid4()), changes=changes, run_key=str(uuid.uuid4()),
                    inv=invitation_of(ctx, schedule_id)[1],
                    next_page=f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}?" + urlencode({"cursor": cursor})
                    if cursor else None)


@router.post(f"{PREFIX}/deliveries/<schedule_id>/test")
@checked_post
def send_test(ctx: Request, schedule_id: str) -> Response:
    """``POST /console/deliveries/{id}/test``: "Send a test to me" (``POST
    /query-schedules/{id}/test`` with the form's Idempotency-Key), then back to the page
    saying where it went; a refusal (no address, the hourly limit ...) is shown on the page
    with the API's reason and status."""
    key = ctx.fields.get("key", "")[:200]
    reply = ctx.api().call("POST", f"/query-schedules/{schedule_id}/test",
                           headers={"Idempotency-Key": key} if key else None)
    if reply.status == 202 and isinstance(reply.body, dict):
        return ctx.redirect(f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}?"
                            + urlencode({"done": "test", "to": str(reply.body.get("email") or "")}))
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status not in (409, 429):
        return ctx.api_error(reply)
    return delivery_page(ctx, schedule_id, problem=f"No test was sent: {body.get('message') or 'refused'}.",
                         status_code=reply.status)


#: The run states that are not finished: a page showing such a run keeps its status live.
UNDER_WAY = ("queued", "running")


def under_way(runs: list[dict[str, Any]]) -> bool:
    """Whether any of ``runs`` (the API's runs) is not finished (:data:`UNDER_WAY`)."""
    return any(run.get("state") in UNDER_WAY for run in runs)


def runs_of(ctx: Request, schedule_id: str, zone: str, cursor: str | None) -> ApiReply:
    """A page of a delivery's runs (``GET /query-schedules/{id}/runs``) with their instants
    (occurrence, finish, link expiry) in ``zone`` and UTC; the API's refusal as it came."""
    reply = ctx.api().call("GET", f"/query-schedules/{quote(schedule_id, safe='')}/runs", query={"cursor": cursor})
    if reply.status != 200:
        return reply
    items = [{**run, "when": when(run.get("occurrence_at"), zone), "finished": when(run.get("finished_at"), zone),
              "deliveries": [{**d, "expires": when(d.get("link_expires_at"), zone)} for d in run["deliveries"]]}
             for run in reply.body["items"]]
    return ApiReply(reply.status, {**reply.body, "items": items})


@router.get(f"{PREFIX}/deliveries/<schedule_id>/live")
@signed_in
def delivery_live(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/deliveries/{id}/live``: the delivery page's runs block alone (an HTML
    fragment console.js swaps in while a run is under way; it no longer asks once the
    block carries no ``data-live``). Another workspace's delivery is a 404."""
    reply = ctx.api().call("GET", f"/query-schedules/{quote(schedule_id, safe='')}")
    if reply.status != 200:
        return ctx.api_error(reply)
    history = runs_of(ctx, schedule_id, zone_of(reply.body), None)
    if history.status != 200:
        return ctx.api_error(history)
    runs = history.body["items"]
    return ctx.page("_delivery_runs.html", s=reply.body, runs=runs, live=under_way(runs), people=people_by_id(ctx),
                    unread=0)


def message_preview(ctx: Request, schedule_id: str) -> tuple[ApiReply, ApiReply | None]:
    """The schedule and the preview of the message its ``user_id`` parameter (default:
    its first recipient) would receive (``GET /query-schedules/{id}/message-preview``)."""
    client = ctx.api()
    schedule = client.call("GET", f"/query-schedules/{schedule_id}")
    if schedule.status != 200:
        return schedule, None
    user_id = ctx.params.get("user_id") or None
    return schedule, client.call("GET", f"/query-schedules/{schedule_id}/message-preview",
                                 query={"user_id": user_id})


@router.get(f"{PREFIX}/deliveries/<schedule_id>/preview")
@signed_in
def delivery_preview(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/deliveries/{id}/preview``: the message a recipient (``user_id``; the
    first by default) would receive if the delivery ran now, its HTML part in a sandboxed
    frame."""
    schedule, preview = message_preview(ctx, schedule_id)
    if preview is None or preview.status != 200:
        return ctx.api_error(preview or schedule)
    zone = zone_of(preview.body)
    return ctx.page("preview.html", s=schedule.body, p=preview.body, zone=zone,
                    expires=when(preview.body.get("link_expires_at"), zone),
                    frame=f"{ctx.public}/deliveries/{quote(schedule_id, safe='')}/preview/message?"
                    + urlencode({"user_id": preview.body["user_id"]}))


@router.get(f"{PREFIX}/deliveries/<schedule_id>/preview/message")
@signed_in
def delivery_preview_message(ctx: Request, schedule_id: str) -> Response:
    """The preview's HTML part alone, for the preview page's sandboxed frame, under a
    policy of its own (:func:`message_preview_policy`)."""
    schedule, preview = message_preview(ctx, schedule_id)
    if preview is None or preview.status != 200:
        return ctx.api_error(preview or schedule)
    html = preview.body["html"]
    return Response(status_code=200, content_type="text/html; charset=utf-8", body=html,
                    headers={**ctx.security_headers, "Content-Security-Policy": message_preview_policy(html),
                             "X-Frame-Options": "SAMEORIGIN", "Cache-Control": "no-store"})


def opt_outs_page(ctx: Request, schedule_id: str, *, problem: str | None = None, done: str | None = None,
                  status_code: int = 200) -> Response:
    """A query schedule's opt-outs (``GET /query-schedules/{id}/opt-outs``): who opted
    out, when (UTC) and whether they were invited back, with the owner's Invite back."""
    client = ctx.api()
    reply = client.call("GET", f"/query-schedules/{schedule_id}")
    if reply.status != 200:
        return ctx.api_error(reply)
    found = client.call("GET", f"/query-schedules/{schedule_id}/opt-outs")
    if found.status != 200:
        return ctx.api_error(found)
    zone = zone_of(found.body)
    items = [{**o, "opted_out": when(o["opted_out_at"], zone), "invited": when(o.get("resubscribe_invited_at"),
                                                                               zone)}
             for o in found.body["items"]]
    return ctx.page("opt_outs.html", status_code, s=reply.body, items=items, problem=problem,
                    zone=zone, done=done, may_invite=ctx.session.has("queries:write", "queries:admin"))


@router.get(f"{PREFIX}/deliveries/<schedule_id>/opt-outs")
@signed_in
def opt_outs(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/deliveries/{id}/opt-outs``: the recipients who opted out (after an
    invitation, whom)."""
    params = ctx.params
    done = (f"{params['to']} is invited back: they receive the messages again once they accept."
            if params.get("done") == "invited" and params.get("to") else None)
    return opt_outs_page(ctx, schedule_id, done=done)


@router.post(f"{PREFIX}/deliveries/<schedule_id>/opt-outs/invite")
@checked_post
def invite_back(ctx: Request, schedule_id: str) -> Response:
    """``POST /console/deliveries/{id}/opt-outs/invite``: invite a recipient back (``POST
    /query-schedules/{id}/opt-outs/{user_id}/invitation``); a refusal is shown on the opt-
    outs page."""
    user_id = ctx.fields.get("user_id", "").strip()
    # The API's path takes the user id as it is (its router does not decode a path
    # segment): one a segment cannot hold is no recipient of an opt-out it can name.
    if not user_id or any(c in user_id for c in "/?#\x00"):
        return opt_outs_page(ctx, schedule_id, problem="Refused: no such recipient (user_id).",
                             status_code=HTTPStatus.UNPROCESSABLE_ENTITY)
    reply = ctx.api().call("POST", f"/query-schedules/{schedule_id}/opt-outs/{user_id}/invitation")
    if reply.status == 200:
        return ctx.redirect(f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}/opt-outs?"
                            + urlencode({"done": "invited", "to": user_id}))
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 404 and body.get("field") != "user_id":
        return ctx.api_error(reply)  # the schedule itself: not found on every page
    text = f"Refused: {body.get('message') or 'the request was refused'}"
    return opt_outs_page(ctx, schedule_id, problem=text,
                         status_code=reply.status if 400 <= reply.status < 500 else 502)


def invitation_of(ctx: Request, schedule_id: str) -> tuple[ApiReply, dict[str, Any] | None]:
    """The person's own standing with a delivery's messages (``GET
    /query-schedules/{id}/subscription``) for :file:`_invitation.html`, or None."""
    reply = ctx.api().call("GET", f"/query-schedules/{quote(schedule_id, safe='')}/subscription")
    if reply.status != 200 or not isinstance(reply.body, dict):
        return reply, None
    zone = zone_of(reply.body)
    return reply, {**reply.body, "opted": when(reply.body.get("opted_out_at"), zone),
                   "invited": when(reply.body.get("invited_at"), zone)}


def invitation_page(ctx: Request, schedule_id: str, *, done: str | None = None, problem: str | None = None,
                    status_code: int = 200) -> Response:
    """The person's invitation page for a delivery (:func:`invitation_of`), or the API's
    refusal."""
    reply, inv = invitation_of(ctx, schedule_id)
    if inv is None:
        return ctx.api_error(reply)
    return ctx.page("invitation.html", status_code, inv=inv, done=done, problem=problem)


@router.get(f"{PREFIX}/deliveries/<schedule_id>/invitation")
@signed_in
def invitation(ctx: Request, schedule_id: str) -> Response:
    """Where an invitation-back notice leads: the person's standing with the delivery's
    messages and, once its owner invited them back, Accept."""
    params = ctx.params
    done = "You receive its messages again." if params.get("done") == "accepted" else None
    return invitation_page(ctx, schedule_id, done=done)


@router.post(f"{PREFIX}/deliveries/<schedule_id>/invitation/accept")
@checked_post
def accept_invitation(ctx: Request, schedule_id: str) -> Response:
    """``POST /console/deliveries/{id}/invitation/accept``: accept an invitation back (``POST
    /query-schedules/{id}/subscription``); a refusal is shown on the invitation page."""
    reply = ctx.api().call("POST", f"/query-schedules/{quote(schedule_id, safe='')}/subscription")
    if reply.status == 200:
        return ctx.redirect(f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}/invitation?done=accepted")
    body = reply.body if isinstance(reply.body, dict) else {}
    if 400 <= reply.status < 500:  # (a schedule that is not found is not found on the page either)
        return invitation_page(ctx, schedule_id, status_code=reply.status,
                               problem=f"Refused: {body.get('message') or 'the request was refused'}")
    return ctx.api_error(reply)


#: The most characters a suppression removal's reason holds (the API's bound).
REMOVAL_REASON_MAX = 500
#: How many of the latest removals the suppression list's page shows an admin.
RECENT_REMOVALS = 20


def suppressions_page(ctx: Request, *, done: str | None = None, typed: dict[str, str] | None = None,
                      problem: str | None = None, field: str | None = None, status_code: int = 200) -> Response:
    """The workspace's suppressed addresses (``GET /mail-suppressions``), each with a Remove
    form for a workspace admin; ``typed`` (``address``, ``reason``) keeps a refused form's
    text and ``problem`` the API's reason, shown on ``field`` of that address's form."""
    reply = ctx.api().call("GET", "/mail-suppressions")
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    items = [{**s, "when": when(s["suppressed_at"], zone)} for s in reply.body["items"]]
    may_remove, removals, people = ctx.session.has("workspace:admin"), [], {}
    if may_remove:
        # The latest removals (who, when, why): admins read them (``GET /mail-suppressions/removals``).
        taken = ctx.api().call("GET", "/mail-suppressions/removals", query={"limit": str(RECENT_REMOVALS)})
        if taken.status == 200 and isinstance(taken.body, dict):
            removals = [{**r, "when": when(r["removed_at"], zone)} for r in taken.body["items"]]
            people = people_by_id(ctx) if removals else {}
    return ctx.page("mail_suppressions.html", status_code, items=items, zone=zone, done=done, typed=typed or {},
                    problem=problem, field=field, may_remove=may_remove, reason_max=REMOVAL_REASON_MAX,
                    removals=removals, people=people)


@router.get(f"{PREFIX}/mail-suppressions")
@signed_in
def mail_suppressions(ctx: Request) -> Response:
    """``GET /console/mail-suppressions``: the workspace's suppressed addresses, why and since
    when; ``?done=removed`` after a removal (the address stays out of the URL: paths and
    query strings land in access logs)."""
    done = ("The address is off the suppression list: the next run sends to it again."
            if ctx.params.get("done") == "removed" else None)
    return suppressions_page(ctx, done=done)


@router.post(f"{PREFIX}/mail-suppressions/remove")
@checked_post
def mail_suppression_remove(ctx: Request) -> Response:
    """``POST /console/mail-suppressions/remove`` (``address``, ``reason``): take the address
    off the list (``POST /mail-suppressions/removals``, admins), then the list; a refusal
    is shown on the field the API names, with what was typed kept."""
    typed = {"address": ctx.fields.get("address", ""), "reason": ctx.fields.get("reason", "")}
    reply = ctx.api().call("POST", "/mail-suppressions/removals", body=typed)
    if reply.status == 200:
        return ctx.redirect(f"{PREFIX}/mail-suppressions?done=removed")
    if not 400 <= reply.status < 500 or reply.status in (401, 403):
        return ctx.api_error(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    field = body.get("field") if body.get("field") in ("address", "reason") else "reason"
    return suppressions_page(ctx, typed=typed, problem=body.get("message") or "the request was refused",
                             field=field, status_code=reply.status)
