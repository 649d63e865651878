"""The schedules' pages: the workspace's schedules, a schedule's page with its rule
editors (the form and the JSON), and the choice of its failure notices."""

from __future__ import annotations

import json
import uuid
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper import json_input
from timekeeper.console import glossary, rule_form
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import (
    change_day_rows,
    changed_fields,
    occurrence_rows,
    offered_zones,
    rule_code,
    rule_text,
    when,
    zone_enum,
    zone_of,
)
from timekeeper.console.pages.actions import ACTIONS
from timekeeper.console.pages.runs import STUCK
from timekeeper.console.paths import PREFIX
from timekeeper.console.people import people_by_id

router = Router()

#: Schedules (and deliveries) per page of a list.
PAGE_SIZE = 50
#: What a redirect after another change says (``?done=update``, ``?done=create``).
_DONE = {**ACTIONS, "update": "updated", "create": "created"}
#: The next occurrences a schedule's page (and its rule preview) shows.
UPCOMING = 10
#: The roles that may make, change and delete schedules.
WRITERS = ("schedules:write", "schedules:admin")
#: Which failures a schedule's owner is told of (the API's ``notify_on``), in the glossary's words.
NOTIFY_CHOICES = {code: glossary.words(code) for code in ("first_failure", "every_failure", "pause_only")}


#: A schedule's changed fields in the history, in words.
CHANGE_WORDS = {"name": "Name", "subject_id": "Subject", "recurrence": "Rule", "timezone": "Time zone"}


def _change_text(field: str, value: Any) -> str:
    """A changed field's value in the history: a rule in words, anything else as text, "—" for none."""
    if value is None:
        return "—"
    if field == "recurrence" and isinstance(value, dict):
        return rule_text(value)
    return str(value)


#: The schedules list's filters (the query parameters of ``GET /schedules``).
SCHEDULE_FILTERS = ("name", "kind", "owner", "status")


@router.get(f"{PREFIX}/schedules")
@signed_in
def schedules(ctx: Request) -> Response:
    """``GET /console/schedules``: the workspace's schedules, pages of :data:`PAGE_SIZE`,
    filtered by ``name`` (a part of it), ``kind`` (work kind), ``owner`` (module) and
    ``status``; a filter the API refuses is shown on its field (422) with what was typed."""
    params = ctx.params
    filters = {name: params[name].strip()[:300] for name in SCHEDULE_FILTERS if (params.get(name) or "").strip()}
    reply = ctx.api().call("GET", "/schedules", query={**filters, "cursor": params.get("cursor"),
                                                       "limit": str(PAGE_SIZE)})
    kinds = work_kinds(ctx)
    page = {"filters": filters, "kinds": sorted({(k["kind"], glossary.words(k["kind"])) for k in kinds}),
            "owners": sorted({(k["owner"], glossary.words(k["owner"])) for k in kinds}),
            "deleted": params.get("done") == "delete", "may_write": ctx.session.has(*WRITERS)}
    if reply.status == 422 and isinstance(reply.body, dict) and reply.body.get("field") in SCHEDULE_FILTERS:
        return ctx.page("schedules.html", HTTPStatus.UNPROCESSABLE_ENTITY, rows=[], next_page=None, zone=None,
                        problem={"field": reply.body["field"], "message": reply.body.get("message")}, **page)
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    rows = [{**item, "next": when(item.get("next_due_at"), zone),
             "last": when(item.get("last_run_at"), zone), "rule": rule_text(item["recurrence"]),
             "code": rule_code(item["recurrence"])}
            for item in reply.body["items"]]
    cursor = reply.body.get("next_cursor")
    next_page = f"{PREFIX}/schedules?" + urlencode({**filters, "cursor": cursor}) if cursor else None
    return ctx.page("schedules.html", rows=rows, next_page=next_page, zone=zone, problem=None, **page)


def work_kinds(ctx: Request) -> list[dict[str, Any]]:
    """The work kinds ``POST /schedules`` takes (``GET /work-kinds``, those without a
    route of their own), each ``{"owner", "kind", "description", "subject", "key"}``
    (``key`` is ``owner/kind``); empty when the API does not say."""
    reply = ctx.api().call("GET", "/work-kinds")
    if reply.status != 200 or not isinstance(reply.body, dict):
        return []
    return [{**k, "key": f"{k['owner']}/{k['kind']}"} for k in reply.body.get("items", []) if k.get("route") is None]


def subjects_of(ctx: Request, kind: dict[str, Any]) -> list[dict[str, Any]]:
    """The workspace's subjects a schedule of ``kind`` may name (``{"id", "name"}``, by
    name; ``GET /work-kinds/{owner}/{kind}/subjects``), empty when it lists none."""
    if not (kind.get("subject") or {}).get("listed"):
        return []
    reply = ctx.api().call("GET", f"/work-kinds/{quote(kind['owner'], safe='')}/{quote(kind['kind'], safe='')}"
                                  "/subjects")
    return reply.body.get("items", []) if reply.status == 200 and isinstance(reply.body, dict) else []


def rule_zones(ctx: Request) -> list[str]:
    """The zones a rule's zone picker offers: the API document's zones without the
    aliases (:func:`offered_zones`; read once per execution environment; empty while the
    API does not say)."""
    zones = ctx.console.zones
    if not zones:
        reply = ctx.api().call("GET", "/openapi.json")
        zones.extend(offered_zones(zone_enum(reply.body)) if reply.status == 200 else [])
    return zones


#: The run states that are not finished: a schedule's page keeps its runs live while one is.
RUN_UNDER_WAY = ("queued", "running")


def run_rows(runs: list[dict[str, Any]], zone: str) -> list[dict[str, Any]]:
    """A schedule's runs (the API's) as its page shows them: queued, finished and the
    occurrence in ``zone`` with UTC beside, the occurrence's local wall time, and the
    instant a flexible window gave the run (``given``; None without a window)."""
    return [{**r, "queued": when(r["queued_at"], zone), "finished": when(r.get("finished_at"), zone),
             "local": r["occurrence_local"].replace("T", " ")[:16], "at": when(r.get("occurrence_at"), zone),
             "given": when(r.get("due_at"), zone)}
            for r in runs]


def stuck_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest queued or running run of ``runs`` (the schedule's, as ``GET /schedules/{id}``
    gives them) when it waits too long (its ``stuck``): ``{"id", "why"}`` with why in words;
    None when none is under way or it is not stuck. No API call: the schedule's read says it."""
    under_way = next((r for r in runs if r["state"] in RUN_UNDER_WAY), None)
    why = under_way.get("stuck") if under_way is not None else None
    return {"id": under_way["id"], "why": STUCK.get(why, why)} if why else None


def named(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{user id: {"name"}}`` of the people a schedule's detail (``GET /schedules/{id}``'s
    ``names``) names, for the pages' person macros (a name that is the id itself left out)."""
    return {user_id: {"name": name} for user_id, name in (detail.get("names") or {}).items() if name != user_id}


@router.get(f"{PREFIX}/schedules/<schedule_id>/live")
@signed_in
def schedule_runs_live(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/schedules/{id}/live``: the schedule page's runs block alone (an HTML
    fragment console.js swaps in while a run is queued or running). Another workspace's
    schedule is a 404."""
    reply = ctx.api().call("GET", f"/schedules/{quote(schedule_id, safe='')}", query={"upcoming": "1"})
    if reply.status != 200:
        return ctx.api_error(reply)
    runs = run_rows(reply.body["history"]["runs"], zone_of(reply.body))
    return ctx.page("_schedule_runs.html", s=reply.body["schedule"], runs=runs,
                    live=any(r["state"] in RUN_UNDER_WAY for r in runs), unread=0, people=named(reply.body),
                    stuck=stuck_run(runs))


def schedule_page(ctx: Request, schedule_id: str, *, done: str | None = None, editor: str | None = None,
                  form: rule_form.RuleForm | None = None, submitted: str | None = None,
                  preview: dict[str, Any] | None = None, problem: dict[str, Any] | None = None,
                  definition: dict[str, Any] | None = None, http_status: int = 200) -> Response:
    """The schedule's page: its rule in words, the next ten occurrences, runs and history,
    who made and last changed it, and for a writer the rule editors: the structured
    ``form`` (the saved rule's when not given) and the JSON ``editor`` (the text typed),
    with the ``submitted`` one's ``preview`` or ``problem``, and the name and subject
    form (``definition``: ``name`` and ``subject_id`` typed and the API's ``problem``)."""
    reply = ctx.api().call("GET", f"/schedules/{schedule_id}", query={"upcoming": str(UPCOMING)})
    if reply.status != 200:
        return ctx.api_error(reply)
    detail = reply.body
    zone = detail["schedule"]["timezone"]
    # Instants in the workspace's zone, with UTC beside; occurrences in the rule's own zone.
    shown_zone = zone_of(detail)
    occurrences = occurrence_rows(detail["next_occurrences"])
    runs = run_rows(detail["history"]["runs"], shown_zone)
    events = [{**e, "when": when(e["at"], shown_zone), "fields": [
        {**c, "from": _change_text(c["field"], c["from"]), "to": _change_text(c["field"], c["to"])}
        for c in changed_fields(e.get("detail"))]} for e in detail["history"]["events"]]
    if editor is None:
        editor = json.dumps(detail["schedule"]["recurrence"], indent=2, sort_keys=True)
    saved_form = rule_form.form_of(detail["schedule"]["recurrence"], zone)
    if form is None:
        form = saved_form
    if preview is not None:
        preview = {**preview, "rows": occurrence_rows(preview["next_occurrences"]),
                         "change_days": change_day_rows(preview.get("change_days") or []),
                   "json": json.dumps(preview.get("recurrence"), indent=2, sort_keys=True)}
    may_edit = ctx.session.has(*WRITERS)
    kind = next((k for k in work_kinds(ctx) if k["owner"] == detail["schedule"]["owner"]
                 and k["kind"] == detail["schedule"]["work_kind"]), None)
    choices = subjects_of(ctx, kind) if kind is not None else []
    subject_name = next((c["name"] for c in choices if c["id"] == detail["schedule"].get("subject_id")), None)
    zone_choices = rule_zones(ctx) if may_edit else []
    if form.timezone not in zone_choices:
        zone_choices = sorted({*zone_choices, form.timezone})
    return ctx.page("schedule.html", http_status, s=detail["schedule"], rule=rule_text(
        detail["schedule"]["recurrence"]), description=detail.get("description"), occurrences=occurrences,
        change_days=change_day_rows(detail.get("change_days") or []),
        code=rule_code(detail["schedule"]["recurrence"]),
        runs=runs, live=any(r["state"] in RUN_UNDER_WAY for r in runs), stuck=stuck_run(runs), events=events,
        change_words=CHANGE_WORDS,
        done=done, run_key=str(uuid.uuid4()), editor=editor,
        preview=preview,
        notify_choices=NOTIFY_CHOICES,
        zone=shown_zone,
        problem=problem, may_edit=may_edit, form=form, unsupported=saved_form.unsupported,
        kind=kind, choices=choices, subject_name=subject_name, definition=definition or {},
        changed=when(detail.get("changed_at"), shown_zone), changed_by=detail.get("changed_by"),
        people={**named(detail), **people_by_id(ctx)},
        created=when(detail["schedule"]["created_at"], shown_zone),
        submitted=submitted, zones=zone_choices, rf=rule_form,
        problem_control=rule_form.control_for((problem or {}).get("field")) if submitted == "form" else None)


@router.get(f"{PREFIX}/schedules/<schedule_id>")
@signed_in
def schedule(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/schedules/{id}``: the schedule's page (:func:`schedule_page`)."""
    params = ctx.params
    return schedule_page(ctx, schedule_id, done=_DONE.get(params.get("done", "")))


@router.post(f"{PREFIX}/schedules/<schedule_id>/rule")
@checked_post
def edit_rule(ctx: Request, schedule_id: str) -> Response:
    """The rule editors: the structured form (``editor=form``: the rule its fields
    compose) or the JSON editor (the rule typed); "Preview" shows the rule's words and
    next occurrences (``POST /rules/preview``) on the page, "Save" changes it
    (``PATCH /schedules/{id}``)."""
    text: str | None = None
    form: rule_form.RuleForm | None = None
    if ctx.fields.get("editor") == "form":
        submitted = "form"
        form = rule_form.read_form(ctx.fields)
        try:
            recurrence = rule_form.compose(form)
        except rule_form.FormProblem as refused:
            return schedule_page(ctx, schedule_id, form=form, submitted=submitted,
                                 http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                                 problem={"field": refused.field, "message": refused.message})
    else:
        submitted = "json"
        text = ctx.fields.get("recurrence", "")[:20_000]
        try:
            recurrence = json_input.loads(text)
        except json.JSONDecodeError as refused:
            reason = f" ({refused.msg})" if refused.msg in json_input.REASONS else ""
            return schedule_page(ctx, schedule_id, editor=text, submitted=submitted,
                                 http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                                 problem={"field": "recurrence", "message": f"is not valid JSON{reason}"})
    client = ctx.api()
    if ctx.fields.get("intent") == "save":
        reply = client.call("PATCH", f"/schedules/{schedule_id}", body={"recurrence": recurrence})
        if reply.status == 200:
            return ctx.redirect(f"{PREFIX}/schedules/{quote(schedule_id, safe='')}?done=update#done")
    else:
        reply = client.call("POST", "/rules/preview",
                            body={"recurrence": recurrence, "count": UPCOMING, "schedule_id": schedule_id})
        if reply.status == 200:
            return schedule_page(ctx, schedule_id, editor=text, form=form, submitted=submitted,
                                 preview=reply.body)
    if reply.status == 422 and isinstance(reply.body, dict):
        return schedule_page(ctx, schedule_id, editor=text, form=form, submitted=submitted,
                             http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                             problem={"field": reply.body.get("field"), "message": reply.body.get("message")})
    return ctx.api_error(reply)


@router.post(f"{PREFIX}/schedules/<schedule_id>/notices")
@checked_post
def choose_failure_notices(ctx: Request, schedule_id: str) -> Response:
    """Which failures the schedule's owner is told of (``notify_on``, one of
    :data:`NOTIFY_CHOICES`): ``PATCH /schedules/{id}``, then back to the page."""
    choice = ctx.fields.get("notify_on", "")
    if choice not in NOTIFY_CHOICES:
        return ctx.page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, title="Refused",
                        message="No such choice of failure notices.")
    reply = ctx.api().call("PATCH", f"/schedules/{schedule_id}", body={"notify_on": choice})
    if reply.status != 200:
        return ctx.api_error(reply)
    return ctx.redirect(f"{PREFIX}/schedules/{quote(schedule_id, safe='')}?done=update#done")
