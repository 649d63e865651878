"""Snapshot staff's range requests: choose workspaces by name (or every workspace), a type,
a month range, re-run or backfill and one reason; preview exactly which periods would be
planned and which refused and why; request them; follow the range's progress. Every step
is an API request (``/snapshots/staff/workspaces``, ``/snapshots/ranges/preview``,
``/snapshots/ranges``, ``/snapshots/ranges/{group_id}``): the API plans and judges, the
console shows its reasons on the field it names and keeps what was typed."""

from __future__ import annotations

import base64
import uuid
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.pages.snapshots import form_key
from timekeeper.console.paths import PREFIX

router = Router()

#: The fields of a range request, as the form names them (``workspace_id`` may repeat).
RANGE_FIELDS = ("type", "first", "through", "mode", "reason", "all_workspaces", "search")
#: At most this many workspaces a form names (the API's bound).
MAX_FORM_WORKSPACES = 1000
#: The most fields a range form has: a workspace each, its other fields and the CSRF token.
MAX_RANGE_FORM_FIELDS = MAX_FORM_WORKSPACES + 20
#: How a range's run states read on its progress page, in the order they are counted.
PROGRESS_STATES = (("planned", "waiting for admission"), ("queued", "admitted"), ("running", "running"),
                   ("retry_wait", "waiting to retry"), ("published", "published"), ("failed", "failed"),
                   ("skipped", "skipped"), ("cancelled", "cancelled"))


def _not_staff(ctx: Request) -> Response | None:
    if ctx.session.staff:
        return None
    return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Not allowed",
                    message="Range requests are for snapshot staff.")


def _form_lists(ctx: Request) -> dict[str, list[str]]:
    """The request's form with every value of each field (a range names many workspaces)."""
    body = ctx.event.body or ""
    if ctx.event.is_base64_encoded:
        try:
            body = base64.b64decode(body).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return {}
    try:
        return parse_qs(body, max_num_fields=MAX_RANGE_FORM_FIELDS)
    except ValueError:
        return {}


def _query_lists(ctx: Request) -> dict[str, list[str]]:
    """The request's query string with every value of each field (a GET preview's form)."""
    event = ctx.event
    return dict(event.multi_value_query_string_parameters or {
        k: [v] for k, v in (event.query_string_parameters or {}).items()})


def _typed(ctx: Request, lists: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """What the range form holds (the posted form, or ``lists``: a GET preview's query):
    each field as typed, ``workspace_ids`` the chosen ids."""
    lists = _form_lists(ctx) if lists is None else lists
    typed: dict[str, Any] = {name: (lists.get(name) or [""])[0] for name in RANGE_FIELDS}
    typed["workspace_ids"] = [w.strip() for w in lists.get("workspace_id", []) if w.strip()]
    return typed


def _api_body(typed: dict[str, Any]) -> dict[str, Any]:
    owner, _, snapshot_type = typed["type"].strip().partition(":")
    body: dict[str, Any] = {"owner": owner, "snapshot_type": snapshot_type, "first": typed["first"].strip(),
                            "through": typed["through"].strip(), "mode": typed["mode"].strip(),
                            "reason": typed["reason"]}
    body["workspaces"] = "all" if typed["all_workspaces"] else typed["workspace_ids"]
    return body


def enabled_types(ctx: Request) -> list[tuple[str, str]]:
    """The snapshot types enabled in the deployment, as the API lists them (``types`` of
    the staff member's own workspace's listing): ``(owner, type)`` pairs."""
    listing = ctx.api().call("GET", f"/snapshots/workspaces/{quote(ctx.session.workspace_id, safe='')}/periods",
                             query={"limit": "1"})
    if listing.status != 200 or not isinstance(listing.body, dict):
        return []
    return [(t["owner"], t["snapshot_type"]) for t in listing.body.get("types") or []]


def range_form(ctx: Request, *, typed: dict[str, Any] | None = None, problem: dict[str, str] | None = None,
               status_code: int = 200) -> Response:
    """The range form: workspaces whose name contains ``search`` (the API's names, ids
    never shown), the chosen ones kept checked; the enabled types; ``typed`` what the
    person typed; ``problem`` the API's refusal (``message``, ``field``)."""
    typed = typed or {name: "" for name in RANGE_FIELDS} | {"workspace_ids": []}
    search = (typed.get("search") or ctx.params.get("search") or "").strip()[:200]
    client = ctx.api()
    found = client.call("GET", "/snapshots/staff/workspaces", query={"search": search or None, "limit": "100"})
    if found.status != 200:
        return ctx.api_error(found)
    chosen = set(typed["workspace_ids"])
    choices = list(found.body["items"])
    missing = chosen - {w["id"] for w in choices}
    if missing:  # chosen before the search changed: still listed, by name
        every = client.call("GET", "/snapshots/staff/workspaces", query={"limit": "1000"})
        if every.status == 200:
            choices = [w for w in every.body["items"] if w["id"] in missing] + choices
    return ctx.page("snapshot_range.html", status_code, typed=typed, search=search, choices=choices,
                    chosen=chosen, types=enabled_types(ctx), problem=problem or {}, recent=recent_ranges(ctx))


@router.get(f"{PREFIX}/snapshots/ranges")
@signed_in
def range_page(ctx: Request) -> Response:
    """``GET /console/snapshots/ranges``: :func:`range_form` (``search``: a part of a
    workspace's name)."""
    return _not_staff(ctx) or range_form(ctx)


def recent_ranges(ctx: Request) -> list[dict[str, Any]]:
    """The latest range requests (``GET /snapshots/ranges``), newest first, for the range
    page: when (the staff member's zone), who by name, type, kind, months, workspaces,
    progress and the link to each one's page; empty when the API does not answer them."""
    reply = ctx.api().call("GET", "/snapshots/ranges", query={"limit": "20"})
    if reply.status != 200:
        return []
    zone = zone_of(reply.body)
    return [{**r, "when": when(r["requested_at"], zone), "by": r.get("requested_by_name") or r.get("requested_by"),
             "months": r["first"] if r["first"] == r["through"] else f"{r['first']} to {r['through']}",
             "link": f"{PREFIX}/snapshots/ranges/{quote(str(r['group_id']), safe='')}"}
            for r in reply.body["items"]]


def _refused(ctx: Request, typed: dict[str, Any], reply: Any) -> Response:
    if reply.status in (401, 403):
        return ctx.api_error(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    field = body.get("field") or ""
    if field in ("owner", "snapshot_type"):
        field = "type"
    elif field.startswith("workspaces"):
        field = "workspace_ids"
    problem = {"message": body.get("message") or "The request was refused.", "field": field}
    return range_form(ctx, typed=typed, problem=problem,
                      status_code=reply.status if 400 <= reply.status < 500 else 502)


#: The longest query string a preview's address carries (API Gateway's request line is
#: bounded); a longer form (hundreds of workspaces chosen one by one) is previewed on its POST.
MAX_PREVIEW_QUERY = 6000


def preview_query(typed: dict[str, Any]) -> str:
    """The GET preview's query string of the form ``typed`` (its fields, each chosen
    workspace as one ``workspace_id``)."""
    fields = [(name, typed[name]) for name in RANGE_FIELDS if name != "search" and typed.get(name)]
    return urlencode(fields + [("workspace_id", w) for w in typed["workspace_ids"]])


def _preview(ctx: Request, typed: dict[str, Any]) -> Response:
    reply = ctx.api().call("POST", "/snapshots/ranges/preview", body=_api_body(typed))
    if reply.status != 200:
        return _refused(ctx, typed, reply)
    # The confirmation's Idempotency-Key: a second click on it answers the first's answer.
    return ctx.page("snapshot_range_preview.html", plan=reply.body, typed=typed, key=str(uuid.uuid4()))


@router.post(f"{PREFIX}/snapshots/ranges/preview")
@checked_post(max_fields=MAX_RANGE_FORM_FIELDS)
def range_preview(ctx: Request) -> Response:
    """``POST /console/snapshots/ranges/preview``: a 303 to the GET preview carrying the
    form's fields (Post/Redirect/Get: Back from the range's progress page returns to it,
    and reloading it only previews again); a form too long for an address is previewed
    here. ``find`` set (the form's "Find" button): the form again with the workspaces found."""
    if (refused := _not_staff(ctx)) is not None:
        return refused
    typed = _typed(ctx)
    if ctx.fields.get("find"):
        return range_form(ctx, typed=typed)
    query = preview_query(typed)
    if len(query) <= MAX_PREVIEW_QUERY:
        return ctx.redirect(f"{PREFIX}/snapshots/ranges/preview?{query}")
    return _preview(ctx, typed)


@router.get(f"{PREFIX}/snapshots/ranges/preview")
@signed_in
def range_preview_page(ctx: Request) -> Response:
    """``GET /console/snapshots/ranges/preview?type=&first=&through=&mode=&reason=&workspace_id=...``
    (or ``all_workspaces=1``): the API's preview of the range (which periods it would plan,
    which it would refuse and why), with the form to request it; it records nothing, so a
    reload or Back only previews again. A refusal shows the form with the API's reason on
    the field it names."""
    if (refused := _not_staff(ctx)) is not None:
        return refused
    return _preview(ctx, _typed(ctx, _query_lists(ctx)))


@router.post(f"{PREFIX}/snapshots/ranges")
@checked_post(max_fields=MAX_RANGE_FORM_FIELDS)
def range_request(ctx: Request) -> Response:
    """``POST /console/snapshots/ranges``: request the range (``POST /snapshots/ranges`` with
    the confirmation's Idempotency-Key, made when the preview was shown: a repeated click is
    the same request and leads to the same progress page), then its progress page; nothing
    planned: the outcome shown as a preview is."""
    if (refused := _not_staff(ctx)) is not None:
        return refused
    typed = _typed(ctx)
    reply = ctx.api().call("POST", "/snapshots/ranges", body=_api_body(typed), headers=form_key(ctx))
    if reply.status not in (200, 201):  # 200: nothing planned
        return _refused(ctx, typed, reply)
    if not reply.body.get("group_id"):
        return ctx.page("snapshot_range_preview.html", HTTPStatus.CONFLICT, plan=reply.body, typed=typed,
                        nothing=True)
    return ctx.redirect(f"{PREFIX}/snapshots/ranges/{quote(str(reply.body['group_id']), safe='')}")


def _progress(ctx: Request, group_id: str, template: str) -> Response:
    """A range's progress rendered with ``template`` (the page, or its live fragment)."""
    if (refused := _not_staff(ctx)) is not None:
        return refused
    reply = ctx.api().call("GET", f"/snapshots/ranges/{quote(group_id, safe='')}")
    if reply.status != 200:
        return ctx.api_error(reply)
    body = reply.body
    counts = body["counts"]
    rows = [{**r, "created": when(r["created_at"], r["timezone"]), "published": when(r.get("published_at"),
                                                                                     r["timezone"]),
             "link": f"{PREFIX}/snapshots/periods/" + "/".join(
                 quote(x, safe="") for x in (r["owner"], r["snapshot_type"], r["period"]))
             + "?" + urlencode({"workspace": r["workspace_id"]})} for r in body["items"]]
    first = rows[0] if rows else {}
    if first:
        first = {**first, "by": (body.get("names") or {}).get(first.get("requested_by") or "")
                 or first.get("requested_by")}
    done = sum(counts.get(s, 0) for s in ("published", "failed", "skipped", "cancelled"))
    return ctx.page(template, group_id=body["group_id"], rows=rows, first=first,
                    counts=[(words, counts.get(state, 0)) for state, words in PROGRESS_STATES],
                    total=len(rows), done=done, live=done < len(rows),
                    **({"unread": 0} if template.startswith("_") else {}))


@router.get(f"{PREFIX}/snapshots/ranges/<group_id>")
@signed_in
def range_progress(ctx: Request, group_id: str) -> Response:
    """``GET /console/snapshots/ranges/{group_id}``: a range's progress (its runs per state,
    in words) and each run by workspace name, month and state, linked to its period; it
    updates itself while runs are unfinished (:func:`range_progress_live`)."""
    return _progress(ctx, group_id, "snapshot_range_progress.html")


@router.get(f"{PREFIX}/snapshots/ranges/<group_id>/live")
@signed_in
def range_progress_live(ctx: Request, group_id: str) -> Response:
    """``GET /console/snapshots/ranges/{group_id}/live``: the progress block alone (an HTML
    fragment console.js swaps in every 10 s until every run is finished); staff only, an
    unknown range a 404."""
    return _progress(ctx, group_id, "_range_progress.html")


#: The staff periods page's filters (query parameters), as the API takes them.
PERIOD_FILTERS = ("search", "status", "first", "through", "cursor")


@router.get(f"{PREFIX}/snapshots/staff")
@signed_in
def staff_periods(ctx: Request) -> Response:
    """``GET /console/snapshots/staff``: every workspace's periods, failed and in progress
    first (``GET /snapshots/staff/periods``), filtered by a part of the workspace's name,
    the type (``type``: ``owner:name``), the status and a month range; 100 a page with
    **More periods**. A filter the API refuses is a 422 naming it, the filters kept."""
    if (refused := _not_staff(ctx)) is not None:
        return refused
    params = ctx.params
    typed = {name: (params.get(name) or "").strip()[:200] for name in (*PERIOD_FILTERS, "type")}
    query = {name: typed[name] or None for name in PERIOD_FILTERS}
    if typed["type"]:
        query["owner"], _, query["snapshot_type"] = typed["type"].partition(":")
    reply = ctx.api().call("GET", "/snapshots/staff/periods", query={**query, "limit": "100"})
    problem: dict[str, str] = {}
    items: list[dict[str, Any]] = []
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 422:
        field = body.get("field") or ""
        problem = {"message": body.get("message") or "Refused.", "field": "type" if field in (
            "owner", "snapshot_type") else field}
    elif reply.status != 200:
        return ctx.api_error(reply)
    else:
        items = [{**i, "published": when(i.get("published_at"), i["timezone"]),
                  "changed": when(i.get("updated_at"), i["timezone"]),
                  "workspace_link": f"{PREFIX}/snapshots?" + urlencode({"workspace": i["workspace_id"]}),
                  "link": f"{PREFIX}/snapshots/periods/" + "/".join(
                      quote(x, safe="") for x in (i["owner"], i["snapshot_type"], i["period"]))
                  + "?" + urlencode({"workspace": i["workspace_id"]})} for i in body["items"]]
    kept = {k: v for k, v in typed.items() if v and k != "cursor"}
    more = body.get("next_cursor")
    return ctx.page("snapshot_staff_periods.html", HTTPStatus.UNPROCESSABLE_ENTITY if problem else HTTPStatus.OK,
                    items=items, typed=typed, problem=problem, types=enabled_types(ctx),
                    never_planned=body.get("never_planned_overdue") or 0,
                    overdue_page=f"{PREFIX}/snapshots/staff?" + urlencode(
                        {**{k: v for k, v in kept.items() if k != "status"}, "status": "overdue"}),
                    next_page=f"{PREFIX}/snapshots/staff?" + urlencode({**kept, "cursor": more}) if more else None)
