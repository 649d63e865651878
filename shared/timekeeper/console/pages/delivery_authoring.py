"""Making and changing a delivery: the "New delivery" form, the edit form and the delete
confirmation (people who may write queries: ``queries:write`` / ``queries:admin``).

One form, rendered by the server and sent again by each of its buttons (``intent``):

* ``add`` checks the member chosen in "Add a recipient" against the access rule for the
  chosen source (``POST /query-schedules/recipient-check``): who may not read it is
  refused there, naming them; ``remove:<user id>`` takes a recipient off the list;
* ``rule`` previews the rule's next occurrences (``POST /query-schedules/rule-preview``),
  composed by :mod:`timekeeper.console.rule_form` (or typed as JSON under "Advanced");
* ``message`` previews the message the chosen recipient would get (a new delivery:
  ``POST /query-schedules/message-preview`` with the draft; a saved one, unchanged
  templates: the same route with its settings);
* ``keep`` (the form's first, hidden button: what Enter in a field sends) shows the form
  again as typed;
* ``save`` creates (``POST /query-schedules`` with the form's Idempotency-Key) or changes
  (``PATCH /query-schedules/{id}`` with the fields that changed).

The recipients travel in one hidden field (a JSON list of user ids). The API's 422 is
shown on the field it names, the typed values kept. The source and format of a saved
delivery are fixed (the API refuses changing them): the edit form says so.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper import json_input
from timekeeper.console import rule_form
from timekeeper.console.api_client import ApiReply
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import change_day_rows, occurrence_rows
from timekeeper.console.pages.schedules import rule_zones
from timekeeper.console.paths import PREFIX

router = Router()

#: Who may make and change deliveries (any one of these roles).
WRITE_ROLES = ("queries:write", "queries:admin")
#: How many saved queries, reports and members the form offers (the API's largest page).
CHOICES = 200
#: The occurrences a rule preview shows.
UPCOMING = 10
#: What a new delivery's templates start from.
DEFAULT_SUBJECT = "{{ schedule_name }} for {{ run_date }}"
#: The body a new delivery starts with: its link is a word in a sentence, since the message's
#: frame adds the download button itself (a second "Download" call would repeat it).
DEFAULT_BODY = ("<p>Hello {{ recipient_name }},</p>\n<p>{{ schedule_name }} for {{ run_date }} is ready "
                "(<a href=\"{{ link }}\">the file</a>).</p>")
#: Which form control an API field names (the rule's controls: :func:`rule_form.control_for`).
_CONTROLS = {"name": "d-name", "source": "d-source", "format": "d-format", "recipients": "d-candidate",
             "user_id": "d-candidate", "subject_template": "d-subject", "body_template": "d-body",
             "link_ttl_hours": "d-ttl", "skip_when_empty": "d-skip", "recurrence": "d-rule-json"}
_FORMATS = {"query": ("csv", "xlsx"), "report": ("pdf",)}


@dataclass(frozen=True)
class Draft:
    """The form's values as typed: ``source`` ``query:<id>:<version>`` (version empty: the
    newest) or ``report:<id>``; ``recipients`` user ids; ``rule_mode`` ``form`` or ``json``."""

    name: str = ""
    source: str = ""
    format: str = "xlsx"
    recipients: tuple[str, ...] = ()
    subject: str = DEFAULT_SUBJECT
    body: str = DEFAULT_BODY
    skip_when_empty: bool = False
    link_ttl_hours: str = "168"
    rule: rule_form.RuleForm = field(default_factory=rule_form.RuleForm)
    rule_mode: str = "form"
    rule_json: str = ""
    preview_user: str = ""


def source_body(value: str) -> dict[str, Any] | None:
    """The API's source object of a form's ``source`` value, or None when it names none."""
    kind, _, rest = value.partition(":")
    ident, _, version = rest.partition(":")
    if kind == "query" and ident:
        out: dict[str, Any] = {"kind": "query", "query_id": ident}
        if version.isdigit():
            out["query_version"] = int(version)
        return out
    if kind == "report" and ident:
        return {"kind": "report", "report_id": ident}
    return None


def read_draft(fields: dict[str, str]) -> Draft:
    """The :class:`Draft` a submitted form holds (anything unreadable is kept as typed or
    dropped: the API names what it refuses)."""
    try:
        listed = json.loads(fields.get("recipients") or "[]")
    except ValueError:
        listed = []
    recipients = tuple(dict.fromkeys(u for u in listed if isinstance(u, str) and u)) if isinstance(listed, list) else ()
    return Draft(name=fields.get("name", "")[:500], source=fields.get("source", "")[:200],
                 format=fields.get("format", "")[:10], recipients=recipients[:1000],
                 subject=fields.get("subject_template", "")[:500], body=fields.get("body_template", "")[:20_000],
                 skip_when_empty=fields.get("skip_when_empty") == "on",
                 link_ttl_hours=fields.get("link_ttl_hours", "")[:10], rule=rule_form.read_form(fields),
                 rule_mode="json" if fields.get("rule_mode") == "json" else "form",
                 rule_json=fields.get("recurrence", "")[:20_000], preview_user=fields.get("preview_user", "")[:200])


class _Refused(Exception):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field_name, message


def recurrence_of(draft: Draft) -> dict[str, Any]:
    """The rule the draft's editor holds (the structured form's, or the JSON typed);
    raises :class:`_Refused` naming the field when none can be read."""
    if draft.rule_mode == "json":
        try:
            value = json_input.loads(draft.rule_json)
        except json.JSONDecodeError as refused:
            reason = f" ({refused.msg})" if refused.msg in json_input.REASONS else ""
            raise _Refused("recurrence", f"is not valid JSON{reason}") from None
        if not isinstance(value, dict):
            raise _Refused("recurrence", "a rule is a JSON object")
        return value
    try:
        return rule_form.compose(draft.rule)
    except rule_form.FormProblem as problem:
        raise _Refused(problem.field, problem.message) from None


def _ttl(draft: Draft) -> int | str:
    text = draft.link_ttl_hours.strip()
    return int(text) if text.isdigit() and len(text) < 7 else text


def _listing(ctx: Request, target: str) -> list[dict[str, Any]]:
    reply = ctx.api().call("GET", target, query={"limit": str(CHOICES)})
    return reply.body["items"] if reply.status == 200 and isinstance(reply.body, dict) else []


def source_choices(ctx: Request) -> list[tuple[str, str]]:
    """The sources the person may pick, by name: each saved query at its newest version and
    at each older one, then each report (those the person's roles list)."""
    out: list[tuple[str, str]] = []
    for q in _listing(ctx, "/queries"):
        current = int(q.get("current_version") or 1)
        out.append((f"query:{q['id']}:", f"Query: {q['name']} (newest, version {current})"))
        out.extend((f"query:{q['id']}:{v}", f"Query: {q['name']}, version {v}") for v in range(current, 0, -1))
    out.extend((f"report:{r['id']}", f"Report: {r['name']}") for r in _listing(ctx, "/reports"))
    return out


def form_page(ctx: Request, draft: Draft, *, saved: dict[str, Any] | None = None, key: str | None = None,
              problem: dict[str, Any] | None = None, notice: str | None = None,
              rule_preview: dict[str, Any] | None = None, message: dict[str, Any] | None = None,
              http_status: int = 200) -> Response:
    """The delivery form (new when ``saved`` is None, else the edit form of that delivery)
    with the draft's values, the API's ``problem`` on the control it names, and the
    previews asked for."""
    members = _listing(ctx, "/members")
    named = {m["user_id"]: m for m in members}
    for uid, name in ((saved or {}).get("recipient_names") or {}).items():
        named.setdefault(uid, {"user_id": uid, "display_name": name, "email": None})
    zones = rule_zones(ctx)
    if draft.rule.timezone not in zones:
        zones = sorted({*zones, draft.rule.timezone})
    if rule_preview is not None:
        rule_preview = {**rule_preview, "rows": occurrence_rows(rule_preview["next_occurrences"]),
                              "change_days": change_day_rows(rule_preview.get("change_days") or []),
                        "json": json.dumps(rule_preview.get("recurrence"), indent=2, sort_keys=True)}
    problem_control = None
    if problem:
        api_field = str(problem.get("field") or "")
        problem_control = rule_form.control_for(api_field) or _CONTROLS.get(
            api_field.split(".")[0].split("[")[0], "d-form")
    return ctx.page("delivery_form.html", http_status, d=draft, saved=saved, key=key or str(uuid.uuid4()),
                    sources=[] if saved else source_choices(ctx), formats=_FORMATS, members=members,
                    named=named, problem=problem, problem_control=problem_control, notice=notice,
                    rule_preview=rule_preview, message=message, rf=rule_form, zones=zones,
                    recipients_json=json.dumps(list(draft.recipients)), form=draft.rule,
                    submitted="form" if draft.rule_mode == "form" else "json")


def _problem(reply: ApiReply) -> dict[str, Any] | None:
    if reply.status == 422 and isinstance(reply.body, dict):
        return {"field": reply.body.get("field"), "message": reply.body.get("message")}
    return None


def _may_write(ctx: Request) -> Response | None:
    if ctx.session.has(*WRITE_ROLES):
        return None
    return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Not allowed",
                    message="Making and changing deliveries needs queries:write.")


@router.get(f"{PREFIX}/deliveries/new")
@signed_in
def new_delivery(ctx: Request) -> Response:
    """``GET /console/deliveries/new``: the empty "New delivery" form (the rule every
    Monday at 09:00 in the workspace's zone)."""
    refused = _may_write(ctx)
    if refused:
        return refused
    zone = ctx.api().call("GET", "/query-schedules", query={"limit": "1"})
    tz = zone.body.get("timezone") if zone.status == 200 and isinstance(zone.body, dict) else None
    rule = replace(rule_form.default_form(tz or "UTC"), frequency="weekly", weekdays=("MO",))
    return form_page(ctx, Draft(rule=rule))


def _draft_preview_body(draft: Draft, user_id: str) -> dict[str, Any]:
    return {"source": source_body(draft.source) or {}, "format": draft.format or None, "name": draft.name,
            "subject_template": draft.subject, "body_template": draft.body, "link_ttl_hours": _ttl(draft),
            "user_id": user_id}


def _common_intent(ctx: Request, draft: Draft, intent: str, *, saved: dict[str, Any] | None,
                   source: dict[str, Any] | None) -> Response | None:
    """Handle the intents the new and the edit form share (add, remove, rule and message
    previews); None for ``save``."""
    key = ctx.fields.get("key") or None
    page = {"saved": saved, "key": key}
    if intent == "add":
        candidate = ctx.fields.get("candidate", "").strip()
        if not candidate:
            return form_page(ctx, draft, **page, problem={"field": "user_id", "message": "choose a member to add"},
                             http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
        reply = ctx.api().call("POST", "/query-schedules/recipient-check",
                               body={"source": source or {}, "user_id": candidate})
        if reply.status != 200:
            problem = _problem(reply)
            if problem is None:
                return ctx.api_error(reply)
            return form_page(ctx, draft, **page, problem=problem, http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
        if not reply.body["allowed"]:
            return form_page(ctx, draft, **page, problem={"field": "user_id", "message": reply.body["message"]},
                             http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
        added = replace(draft, recipients=tuple(dict.fromkeys((*draft.recipients, candidate))))
        who = reply.body.get("display_name") or candidate
        if not reply.body.get("email"):
            return form_page(ctx, added, **page, notice=f"{who} was added: they may read the source, but they have "
                                                         "no e-mail address, so a run sends them nothing until the "
                                                         "directory has one.")
        return form_page(ctx, added, **page, notice=f"{who} was added: they may read the source.")
    if intent == "keep":  # Enter in a field: the form again, as typed, nothing sent
        return form_page(ctx, draft, **page)
    if intent.startswith("remove:"):
        gone = intent.partition(":")[2]
        return form_page(ctx, replace(draft, recipients=tuple(u for u in draft.recipients if u != gone)), **page)
    if intent == "rule":
        try:
            recurrence = recurrence_of(draft)
        except _Refused as refused:
            return form_page(ctx, draft, **page, problem={"field": refused.field, "message": refused.message},
                             http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
        reply = ctx.api().call("POST", "/query-schedules/rule-preview",
                               body={"recurrence": recurrence, "count": UPCOMING})
        if reply.status == 200:
            return form_page(ctx, draft, **page, rule_preview=reply.body)
        return _refusal(ctx, draft, reply, page)
    if intent == "message":
        user_id = draft.preview_user or (draft.recipients[0] if draft.recipients else "")
        if not user_id:
            return form_page(ctx, draft, **page, problem={"field": "user_id", "message": "add a recipient to preview "
                                                                                     "their message"},
                             http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
        body = _draft_preview_body(draft, user_id)
        if saved is not None:
            body = {**body, "source": source or {}, "format": saved["format"]}
        reply = ctx.api().call("POST", "/query-schedules/message-preview", body=body)
        if reply.status == 200:
            return form_page(ctx, replace(draft, preview_user=user_id), **page, message=reply.body,
                             rule_preview=_quiet_rule_preview(ctx, draft))
        return _refusal(ctx, draft, reply, page)
    return None


def _quiet_rule_preview(ctx: Request, draft: Draft) -> dict[str, Any] | None:
    """The draft's rule preview (``POST /query-schedules/rule-preview``) shown beside another
    preview, so one preview does not hide the other; None when the rule as typed is refused
    (its own button says why)."""
    try:
        recurrence = recurrence_of(draft)
    except _Refused:
        return None
    reply = ctx.api().call("POST", "/query-schedules/rule-preview", body={"recurrence": recurrence, "count": UPCOMING})
    return reply.body if reply.status == 200 and isinstance(reply.body, dict) else None


def _refusal(ctx: Request, draft: Draft, reply: ApiReply, page: dict[str, Any]) -> Response:
    problem = _problem(reply)
    if problem is None:
        return ctx.api_error(reply)
    return form_page(ctx, draft, **page, problem=problem, http_status=HTTPStatus.UNPROCESSABLE_ENTITY)


@router.post(f"{PREFIX}/deliveries/new")
@checked_post
def create_delivery(ctx: Request) -> Response:
    """``POST /console/deliveries/new``: a button of the "New delivery" form (see the
    module's description); ``save`` creates it and leads to its page."""
    refused = _may_write(ctx)
    if refused:
        return refused
    draft = read_draft(ctx.fields)
    source = source_body(draft.source)
    handled = _common_intent(ctx, draft, ctx.fields.get("intent", "save"), saved=None, source=source)
    if handled is not None:
        return handled
    key = ctx.fields.get("key") or str(uuid.uuid4())
    try:
        recurrence = recurrence_of(draft)
    except _Refused as problem:
        return form_page(ctx, draft, key=key, problem={"field": problem.field, "message": problem.message},
                         http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
    if source is None:
        return form_page(ctx, draft, key=key, problem={"field": "source", "message": "choose a query or a report"},
                         http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
    body = {"name": draft.name, "recurrence": recurrence, "source": source, "format": draft.format,
            "recipients": list(draft.recipients), "subject_template": draft.subject, "body_template": draft.body,
            "skip_when_empty": draft.skip_when_empty, "link_ttl_hours": _ttl(draft)}
    reply = ctx.api().call("POST", "/query-schedules", body=body, headers={"Idempotency-Key": key[:200]})
    if reply.status == 201:
        return ctx.redirect(f"{PREFIX}/deliveries/{quote(str(reply.body['id']), safe='')}?done=created")
    # Refused: nothing was made, and the API holds the key to the refused body; the next
    # try is a new request with a key of its own.
    return _refusal(ctx, draft, reply, {"saved": None, "key": None})


def _writable_delivery(ctx: Request, schedule_id: str) -> tuple[dict[str, Any] | None, Response | None]:
    """The saved delivery a writer may change: ``(delivery, None)``, or ``(None, page)`` with
    the 403 page for a person without queries:write or the API's refusal (404 for another
    workspace's id)."""
    refused = _may_write(ctx)
    if refused:
        return None, refused
    reply = ctx.api().call("GET", f"/query-schedules/{quote(schedule_id, safe='')}")
    if reply.status != 200:
        return None, ctx.api_error(reply)
    return reply.body, None


def draft_of(saved: dict[str, Any]) -> Draft:
    """The edit form's starting values: the saved delivery's."""
    src = saved["source"]
    source = (f"query:{src['query_id']}:{src.get('query_version') or ''}" if src["kind"] == "query"
              else f"report:{src['report_id']}")
    recurrence = saved.get("recurrence") or {}
    zone = recurrence.get("timezone") or saved.get("timezone") or "UTC"
    return Draft(name=saved["name"], source=source, format=saved["format"],
                 recipients=tuple(saved.get("recipients") or ()), subject=saved["subject_template"],
                 body=saved["body_template"], skip_when_empty=saved["skip_when_empty"],
                 link_ttl_hours=str(saved["link_ttl_hours"]), rule=rule_form.form_of(recurrence, zone),
                 rule_mode="json" if rule_form.form_of(recurrence, zone).unsupported else "form",
                 rule_json=json.dumps(recurrence, indent=2, sort_keys=True))


@router.get(f"{PREFIX}/deliveries/<schedule_id>/edit")
@signed_in
def edit_delivery(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/deliveries/{id}/edit``: the edit form with the saved values."""
    saved, refused = _writable_delivery(ctx, schedule_id)
    if refused is not None:
        return refused
    return form_page(ctx, draft_of(saved), saved=saved)


def changes_of(saved: dict[str, Any], draft: Draft, recurrence: dict[str, Any]) -> dict[str, Any]:
    """The PATCH body: only the fields whose value differs from the saved delivery (the
    rule when the one the editor holds is not the saved one)."""
    before = draft_of(saved)
    out: dict[str, Any] = {}
    if draft.name != saved["name"]:
        out["name"] = draft.name
    if sorted(draft.recipients) != sorted(saved.get("recipients") or []):
        out["recipients"] = list(draft.recipients)
    if draft.subject != saved["subject_template"]:
        out["subject_template"] = draft.subject
    if draft.body != saved["body_template"]:
        out["body_template"] = draft.body
    if draft.skip_when_empty != saved["skip_when_empty"]:
        out["skip_when_empty"] = draft.skip_when_empty
    if _ttl(draft) != saved["link_ttl_hours"]:
        out["link_ttl_hours"] = _ttl(draft)
    try:
        unchanged = recurrence == recurrence_of(before) or recurrence == saved.get("recurrence")
    except _Refused:
        unchanged = recurrence == saved.get("recurrence")
    if not unchanged:
        out["recurrence"] = recurrence
    return out


@router.post(f"{PREFIX}/deliveries/<schedule_id>/edit")
@checked_post
def change_delivery(ctx: Request, schedule_id: str) -> Response:
    """``POST /console/deliveries/{id}/edit``: a button of the edit form; ``save`` sends
    the changed fields (``PATCH /query-schedules/{id}``) and leads back to its page."""
    saved, refused = _writable_delivery(ctx, schedule_id)
    if refused is not None:
        return refused
    draft = replace(read_draft(ctx.fields), source=draft_of(saved).source, format=saved["format"])
    src = saved["source"]
    source = ({"kind": "query", "query_id": src["query_id"], "query_version": src["query_version"]}
              if src["kind"] == "query" else {"kind": "report", "report_id": src["report_id"]})
    handled = _common_intent(ctx, draft, ctx.fields.get("intent", "save"), saved=saved, source=source)
    if handled is not None:
        return handled
    try:
        recurrence = recurrence_of(draft)
    except _Refused as problem:
        return form_page(ctx, draft, saved=saved, problem={"field": problem.field, "message": problem.message},
                         http_status=HTTPStatus.UNPROCESSABLE_ENTITY)
    changes = changes_of(saved, draft, recurrence)
    if changes:
        patched = ctx.api().call("PATCH", f"/query-schedules/{quote(schedule_id, safe='')}", body=changes)
        if patched.status != 200:
            return _refusal(ctx, draft, patched, {"saved": saved, "key": None})
    return ctx.redirect(f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}?done=updated")


@router.get(f"{PREFIX}/deliveries/<schedule_id>/delete")
@signed_in
def confirm_delete(ctx: Request, schedule_id: str) -> Response:
    """``GET /console/deliveries/{id}/delete``: what deleting keeps, and Delete."""
    saved, refused = _writable_delivery(ctx, schedule_id)
    if refused is not None:
        return refused
    return ctx.page("delivery_delete.html", s=saved)


@router.post(f"{PREFIX}/deliveries/<schedule_id>/delete")
@checked_post
def delete_delivery(ctx: Request, schedule_id: str) -> Response:
    """``POST /console/deliveries/{id}/delete``: delete (``DELETE /query-schedules/{id}``),
    then back to the list, which says so."""
    reply = ctx.api().call("DELETE", f"/query-schedules/{quote(schedule_id, safe='')}")
    if reply.status != 204:
        return ctx.api_error(reply)
    return ctx.redirect(f"{PREFIX}/deliveries?done=deleted")
