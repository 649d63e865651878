"""Making and changing schedules in the console: "New schedule" (name, work kind, its
subject chosen by name, the rule with the structured editor or as JSON, Preview before
Create), a schedule's name and subject, and its deletion (a confirmation saying what is
kept). Offered to people whose roles may write schedules (``schedules:write`` or
``schedules:admin``); the API decides.

The work kinds and their subjects come from the API (``GET /work-kinds``, ``GET
/work-kinds/{owner}/{kind}/subjects``); a create carries an Idempotency-Key made with the
form, so a double submit makes one schedule.
"""

from __future__ import annotations

import json
import uuid
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper import json_input
from timekeeper.console import rule_form
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import change_day_rows, occurrence_rows, zone_of
from timekeeper.console.pages.schedules import (
    UPCOMING,
    WRITERS,
    rule_zones,
    schedule_page,
    subjects_of,
    work_kinds,
)
from timekeeper.console.paths import PREFIX

router = Router()

#: The longest name the form keeps (the API names the field beyond its own limit).
MAX_NAME = 300
#: The form controls an API 422's ``field`` names on this page (the rule's are the editor's).
_CONTROLS = {"name": "sn-name", "owner": "sn-kind", "work_kind": "sn-kind"}


def _may_write(ctx: Request) -> bool:
    return ctx.session.has(*WRITERS)


def _not_allowed(ctx: Request) -> Response:
    return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Not allowed",
                    message="Your roles do not allow making or changing schedules.")


def new_page(ctx: Request, *, values: dict[str, str] | None = None, form: rule_form.RuleForm | None = None,
             editor: str = "", use_json: bool = False, key: str | None = None,
             preview: dict[str, Any] | None = None, problem: dict[str, Any] | None = None,
             http_status: int = 200) -> Response:
    """The "New schedule" page: ``values`` typed (``name``, ``kind``: ``owner/kind``, and
    ``subject:<owner/kind>`` of each kind), the rule's ``form`` and JSON ``editor`` text
    (``use_json``: the JSON is the rule), the form's Idempotency-Key ``key``, and the
    ``preview`` or the ``problem`` (``{"field", "message"}``) of what was sent."""
    values = values or {}
    kinds = work_kinds(ctx)
    for kind in kinds:
        kind["choices"] = subjects_of(ctx, kind)
    zone = _workspace_zone(ctx)
    form = form or rule_form.default_form(zone)
    zones = rule_zones(ctx)
    if form.timezone not in zones:
        zones = sorted({*zones, form.timezone})
    if preview is not None:
        preview = {**preview, "rows": occurrence_rows(preview["next_occurrences"]),
                         "change_days": change_day_rows(preview.get("change_days") or []),
                   "json": json.dumps(preview.get("recurrence"), indent=2, sort_keys=True)}
    field = (problem or {}).get("field") or ""
    control = _CONTROLS.get(field)
    if field == "subject_id":
        control = "sn-subject-" + values.get("kind", "")
    problem_control = None if use_json else rule_form.control_for(field)
    if control is None and field.startswith("recurrence") and use_json:
        control = "recurrence"
    return ctx.page("schedule_new.html", http_status, kinds=kinds, values=values, form=form, editor=editor,
                    use_json=use_json, key=key or str(uuid.uuid4()), preview=preview, problem=problem,
                    control=control, problem_control=problem_control, zones=zones, rf=rule_form, zone=zone)


def _workspace_zone(ctx: Request) -> str:
    """The workspace's zone (a new rule's starting zone), as the schedules list says it."""
    reply = ctx.api().call("GET", "/schedules", query={"limit": "1"})
    return zone_of(reply.body) if reply.status == 200 and isinstance(reply.body, dict) else "UTC"


@router.get(f"{PREFIX}/schedules/new")
@signed_in
def new_schedule(ctx: Request) -> Response:
    """``GET /console/schedules/new``: the empty "New schedule" form (a 403 page for a
    person who may not make schedules)."""
    if not _may_write(ctx):
        return _not_allowed(ctx)
    return new_page(ctx)


def _rule_of(ctx: Request, use_json: bool, form: rule_form.RuleForm, editor: str) -> dict[str, Any]:
    """The rule the form sends: the JSON typed (``use_json``) or the structured editor's.
    Raises :class:`rule_form.FormProblem` naming the field when there is none."""
    if use_json:
        try:
            return json_input.loads(editor)
        except json.JSONDecodeError as refused:
            reason = f" ({refused.msg})" if refused.msg in json_input.REASONS else ""
            raise rule_form.FormProblem("recurrence", f"is not valid JSON{reason}") from None
    return rule_form.compose(form)


@router.post(f"{PREFIX}/schedules/new")
@checked_post
def create_schedule(ctx: Request) -> Response:
    """The "New schedule" form: "Preview" (``intent=preview``) shows the rule's words and
    next occurrences (``POST /rules/preview``) keeping what was typed; "Create" makes the
    schedule (``POST /schedules`` with the form's Idempotency-Key) and opens its page. A
    refusal shows the API's reason on the field it names, with what was typed."""
    if not _may_write(ctx):
        return _not_allowed(ctx)
    fields = ctx.fields
    values = {k: v.strip()[:MAX_NAME] for k, v in fields.items() if k == "name" or k == "kind"
              or k.startswith("subject:")}
    form = rule_form.read_form(fields)
    editor = fields.get("recurrence", "")[:20_000]
    use_json = fields.get("editor") == "json"
    key = fields.get("key", "")[:200] or str(uuid.uuid4())
    again = {"values": values, "form": form, "editor": editor, "use_json": use_json, "key": key}
    try:
        recurrence = _rule_of(ctx, use_json, form, editor)
    except rule_form.FormProblem as refused:
        return new_page(ctx, **again, problem={"field": refused.field, "message": refused.message},
                        http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
    client = ctx.api()
    if fields.get("intent") != "create":
        reply = client.call("POST", "/rules/preview", body={"recurrence": recurrence, "count": UPCOMING})
        if reply.status == 200:
            return new_page(ctx, **again, preview=reply.body)
    else:
        owner, _, kind = values.get("kind", "").partition("/")
        body: dict[str, Any] = {"owner": owner, "work_kind": kind, "recurrence": recurrence,
                                "name": values.get("name", "")}
        subject = values.get(f"subject:{values.get('kind', '')}")
        if subject:
            body["subject_id"] = subject
        reply = client.call("POST", "/schedules", body=body, headers={"Idempotency-Key": key})
        if reply.status in (200, 201) and isinstance(reply.body, dict):
            return ctx.redirect(f"{PREFIX}/schedules/{quote(str(reply.body['id']), safe='')}?done=create#done")
    if reply.status == 422 and isinstance(reply.body, dict):
        # A refused create made nothing: the corrected form is a new request, with a new key.
        again["key"] = None if fields.get("intent") == "create" else key
        return new_page(ctx, **again, http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                        problem={"field": reply.body.get("field"), "message": reply.body.get("message")})
    return ctx.api_error(reply)


@router.post(f"{PREFIX}/schedules/<schedule_id>/definition")
@checked_post
def change_definition(ctx: Request, schedule_id: str) -> Response:
    """Rename a schedule and change its subject (``name``, ``subject_id``: the fields
    changed only): ``PATCH /schedules/{id}``, then back to its page; a 422 shows the
    schedule's page with the API's reason on the field it names."""
    reply = ctx.api().call("GET", f"/schedules/{schedule_id}", query={"history_limit": "1", "upcoming": "1"})
    if reply.status != 200:
        return ctx.api_error(reply)
    current = reply.body["schedule"]
    name = ctx.fields.get("name", "").strip()[:MAX_NAME]
    subject = ctx.fields.get("subject_id", "").strip()[:100]
    body: dict[str, Any] = {}
    if name != current["name"]:
        body["name"] = name
    if subject and subject != (current.get("subject_id") or ""):
        body["subject_id"] = subject
    if not body:
        return ctx.redirect(f"{PREFIX}/schedules/{quote(schedule_id, safe='')}")
    changed = ctx.api().call("PATCH", f"/schedules/{schedule_id}", body=body)
    if changed.status == 200:
        return ctx.redirect(f"{PREFIX}/schedules/{quote(schedule_id, safe='')}?done=update#done")
    if changed.status == 422 and isinstance(changed.body, dict):
        return schedule_page(ctx, schedule_id, http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                             definition={"name": name, "subject_id": subject,
                                         "problem": {"field": changed.body.get("field"),
                                                     "message": changed.body.get("message")}})
    return ctx.api_error(changed)


@router.get(f"{PREFIX}/schedules/<schedule_id>/delete")
@signed_in
def confirm_delete(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/schedules/{id}/delete``: the confirmation, saying what deleting keeps
    (its runs and history) and what it stops."""
    if not _may_write(ctx):
        return _not_allowed(ctx)
    reply = ctx.api().call("GET", f"/schedules/{schedule_id}", query={"history_limit": "200", "upcoming": "1"})
    if reply.status != 200:
        return ctx.api_error(reply)
    runs = reply.body["history"]["runs"]
    return ctx.page("schedule_delete.html", s=reply.body["schedule"], runs=len(runs), more=len(runs) >= 200)


@router.post(f"{PREFIX}/schedules/<schedule_id>/delete")
@checked_post
def delete_schedule(ctx: Request, schedule_id: str) -> Response:
    """Delete the schedule (``DELETE /schedules/{id}``), then back to the list with a message."""
    reply = ctx.api().call("DELETE", f"/schedules/{schedule_id}")
    if reply.status != 204:
        return ctx.api_error(reply)
    return ctx.redirect(f"{PREFIX}/schedules?done=delete")
