"""The workspace admin's pages: schedules left without an owner (Reassign) and failed
posting jobs (Retry)."""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()


def ownerless_page(ctx: Request, *, problem: str | None = None, done: str | None = None,
                   status_code: int = 200) -> Response:
    """The schedules paused because their owner left (``GET /ownerless-schedules``), each with
    its Reassign form; ``problem`` is a refusal to show with ``status_code``, ``done`` what
    was just done."""
    reply = ctx.api().call("GET", "/ownerless-schedules")
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    items = [{**s, "paused": when(s["paused_at"], zone)} for s in reply.body["items"]]
    return ctx.page("ownerless.html", status_code, items=items, zone=zone, problem=problem,
                    done=done)


@router.get(f"{PREFIX}/ownerless")
@signed_in
def ownerless(ctx: Request) -> Response:
    """``GET /console/ownerless``: the ownerless schedules (after a reassignment, to whom)."""
    params = ctx.params
    done = (f"Reassigned to {params['to']}: it stays paused until it is resumed."
            if params.get("done") == "reassigned" and params.get("to") else None)
    return ownerless_page(ctx, done=done)


@router.post(f"{PREFIX}/ownerless/reassign")
@checked_post
def reassign(ctx: Request) -> Response:
    """``POST /console/ownerless/reassign``: give a schedule a new owner (``POST /ownerless-
    schedules/{id}/reassign``); a refusal is shown on the page with the API's reason."""
    schedule_id, owner = ctx.fields.get("schedule_id", "").strip(), ctx.fields.get("owner_user_id", "").strip()
    try:
        schedule_id = str(uuid.UUID(schedule_id))
    except ValueError:
        return ownerless_page(ctx, problem="Refused: no such schedule.", status_code=404)
    reply = ctx.api().call("POST", f"/ownerless-schedules/{schedule_id}/reassign",
                           body={"owner_user_id": owner})
    if reply.status == 200:
        return ctx.redirect(f"{PREFIX}/ownerless?" + urlencode({"done": "reassigned", "to": owner}))
    body = reply.body if isinstance(reply.body, dict) else {}
    text = f"Refused: {body.get('message') or 'the request was refused'}"
    return ownerless_page(ctx, problem=text, status_code=reply.status if 400 <= reply.status < 500 else 502)


def posting_jobs_page(ctx: Request, *, problem: str | None = None, done: bool = False,
                      status_code: int = 200) -> Response:
    """The workspace's failed posting jobs (``GET /posting-jobs/failed``), each with its Retry
    form; ``problem`` is a refusal to show with ``status_code``."""
    reply = ctx.api().call("GET", "/posting-jobs/failed")
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    items = [{**j, "created": when(j["created_at"], zone), "finished": when(j.get("finished_at"), zone)}
             for j in reply.body["items"]]
    return ctx.page("posting_jobs.html", status_code, items=items, problem=problem, done=done,
                    zone=zone)


@router.get(f"{PREFIX}/posting-jobs")
@signed_in
def posting_jobs(ctx: Request) -> Response:
    """``GET /console/posting-jobs``: the failed posting jobs."""
    params = ctx.params
    return posting_jobs_page(ctx, done=params.get("done") == "retried")


@router.post(f"{PREFIX}/posting-jobs/retry")
@checked_post
def posting_job_retry(ctx: Request) -> Response:
    """``POST /console/posting-jobs/retry``: a failed job pending again (``POST /posting-
    jobs/{id}/retry``); a refusal is shown on the page with the API's reason."""
    try:
        job_id = str(uuid.UUID(ctx.fields.get("job_id", "").strip()))
    except ValueError:
        return posting_jobs_page(ctx, problem="Refused: no such posting job.", status_code=404)
    reply = ctx.api().call("POST", f"/posting-jobs/{job_id}/retry")
    if reply.status == 202:
        return ctx.redirect(f"{PREFIX}/posting-jobs?done=retried")
    body = reply.body if isinstance(reply.body, dict) else {}
    return posting_jobs_page(ctx, problem=f"Refused: {body.get('message') or 'the request was refused'}",
                             status_code=reply.status if 400 <= reply.status < 500 else 502)
