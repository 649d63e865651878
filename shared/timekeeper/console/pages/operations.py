"""Staff's operations overview: every workspace's dead-letter queues, paused and failing
schedules, runs that wait too long and overdue periods, with Redrive and Resume."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console import glossary
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: Why a run waits too long, for people (the operations overview's ``why``).
_STRANDED = {"not_started": "accepted by its queue, never started", "not_published": "waiting to be sent again",
             "lease_expired": "started; its execution stopped answering"}
#: The message after an operations action.
_OPERATIONS_DONE = {"redriven": "The redrive started: the messages go back to their queue.",
                    "resumed": "The schedule was resumed from now."}


def age(seconds: int) -> str:
    """``5400`` -> ``"1 h 30 min"``; under a minute ``"under a minute"``."""
    if seconds < 60:
        return "under a minute"
    days, rest = divmod(seconds // 60, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    return " ".join(p for p in parts if p)


#: The overview's filters (the query parameters of ``GET /operations/overview``).
OPERATIONS_FILTERS = ("kind", "status", "schedule", "state")


def _kind_choices(ctx: Request) -> list[tuple[str, str]]:
    """Every registered work kind (``GET /work-kinds``) as ``(kind, words)``, by name."""
    reply = ctx.api().call("GET", "/work-kinds")
    items = reply.body.get("items", []) if reply.status == 200 and isinstance(reply.body, dict) else []
    return sorted({(k["kind"], glossary.words(k["kind"])) for k in items})


def operations_page(ctx: Request, *, problem: str | None = None, done: str | None = None,
                    status_code: int = 200) -> Response:
    """Staff's view of every workspace: the API's operations overview, filtered by the
    address's ``kind`` (work kind), ``status`` and ``schedule`` (a part of the name) of
    the schedules and ``state`` of the runs; a filter the API refuses is a 422 page with
    its reason on that field."""
    params = ctx.params
    filters = {name: params[name].strip()[:300] for name in OPERATIONS_FILTERS if (params.get(name) or "").strip()}
    reply = ctx.api().call("GET", "/operations/overview", query={"limit": "100", **filters})
    form = {"filters": filters, "kinds": _kind_choices(ctx)}
    if reply.status == 422 and isinstance(reply.body, dict) and reply.body.get("field") in OPERATIONS_FILTERS:
        return ctx.page("operations.html", 422, as_of=None, zone=None, queues=[], schedules=[], runs=[], actions=[],
                        problem=problem, done=done, overdue=[], overdue_total=0, refused=True,
                        filter_problem={"field": reply.body["field"], "message": reply.body.get("message")}, **form)
    if reply.status != 200:
        return ctx.api_error(reply)
    body = reply.body
    zone = zone_of(body)
    queues = [{**q, "age": age(q["oldest_age_s"]) if q.get("oldest_age_s") is not None else None}
              for q in body["dead_letter_queues"]]
    schedules = [{**s, "changed": when(s["updated_at"], zone)} for s in body["schedules"]]
    runs = [{**r, "queued": when(r["queued_at"], zone), "occurrence": when(r["occurrence_at"], zone),
             "why_text": _STRANDED.get(r["why"], r["why"])}
            for r in body["stranded_runs"]]
    actions = [{**a, "when": when(a["at"], zone)} for a in body.get("recent_actions", [])]
    overdue = [{**p, "due": when(p["due_at"], zone_of(p)), "month": p["period"][:7],
                "hours": f"{p['overdue_hours']:.0f}"} for p in body.get("overdue_periods", [])]
    return ctx.page("operations.html", status_code, as_of=when(body["as_of"], zone), zone=zone,
                    queues=queues, schedules=schedules, runs=runs, actions=actions, problem=problem, done=done,
                    overdue=overdue, overdue_total=body.get("overdue_periods_total", len(overdue)), refused=False,
                    filter_problem=None, **form)


def operations_action(ctx: Request, path: str, reason: str, done: str) -> Response:
    """Send staff's action ``path`` with its ``reason`` to the API, then the overview saying
    ``done``; a refusal is shown on the overview."""
    reply = ctx.api().call("POST", path, body={"reason": reason.strip()})
    if 200 <= reply.status < 300:
        return ctx.redirect(f"{PREFIX}/operations?" + urlencode({"done": done}))
    message = reply.body.get("message") if isinstance(reply.body, dict) else None
    return operations_page(ctx, problem=f"Refused: {message or 'the action was refused'}",
                           status_code=reply.status if 400 <= reply.status < 500 else 502)


@router.get(f"{PREFIX}/operations")
@signed_in
def operations_overview(ctx: Request) -> Response:
    """``GET /console/operations``: the operations overview."""
    params = ctx.params
    return operations_page(ctx, done=_OPERATIONS_DONE.get(params.get("done", "")))


@router.post(f"{PREFIX}/operations/redrive")
@checked_post
def operations_redrive(ctx: Request) -> Response:
    """``POST /console/operations/redrive``: redrive a dead-letter queue with a reason."""
    queue = ctx.fields.get("queue", "")
    return operations_action(ctx, f"/operations/dead-letter-queues/{quote(queue, safe='')}/redrive",
                             ctx.fields.get("reason", ""), "redriven")


@router.post(f"{PREFIX}/operations/resume")
@checked_post
def operations_resume(ctx: Request) -> Response:
    """``POST /console/operations/resume``: resume a workspace's paused schedule with a reason."""
    workspace, schedule = (quote(ctx.fields.get(k, "").strip(), safe="") for k in ("workspace_id", "schedule_id"))
    return operations_action(ctx, f"/operations/workspaces/{workspace}/schedules/{schedule}/resume",
                             ctx.fields.get("reason", ""), "resumed")
