"""The reports' pages: the workspace's reports, a report's page (its sections, versions,
the deliveries that send it, a preview render) and the compose form that creates a
report or saves its next version.

The compose form works without JavaScript: adding, removing and moving a section up or
down are the form's own submit buttons (``action``), answered by the server with the
form as it was typed, changed; only "Save" calls the API (``POST /reports`` with the
form's Idempotency-Key, or ``PUT /reports/{id}``). A refusal is shown on the field the
API names (``definition.sections[1].query_version`` is section 2's query) with what was
typed kept.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: Reports per page of the list.
PAGE_SIZE = 50
#: Sections one compose form holds: a console form carries at most 50 fields (seven
#: fixed, six per section); a report with more sections is composed with the API.
MAX_FORM_SECTIONS = 7
#: What a section may show, in the form's words.
DISPLAYS = (("table", "Table"), ("bar_chart", "Bar chart"), ("line_chart", "Line chart"))
#: A section's field in the API's words -> its control in the form.
_SECTION_CONTROLS = {"heading": "heading", "query_id": "query", "query_version": "query", "display": "display",
                     "label_column": "label", "value_column": "value", "period": "period"}
_SECTION_FIELD = re.compile(r"^definition\.sections\[(\d+)\]\.([a-z_]+)")
_PERIOD_TEXT = re.compile(r"^\s*([0-9]{4}-[0-9]{2})\s*(?:v\s*([0-9]{1,6}))?\s*$")


@dataclass
class SectionForm:
    """One section as the form holds it: texts as typed; ``query`` is ``"<query id>:"``
    (the query's current version when rendered) or ``"<query id>:<version>"``."""

    heading: str = ""
    query: str = ""
    display: str = "table"
    label: str = ""
    value: str = ""
    period: str = ""


def period_text(period: dict[str, Any] | None) -> str:
    """A section's snapshot ``period`` (the API's object) as the form writes it: empty
    (none), ``latest``, ``YYYY-MM`` or ``YYYY-MM v3``."""
    if not period:
        return ""
    if period.get("choice") == "version":
        return f"{period.get('month')} v{period.get('version')}"
    return str(period.get("month") or "latest")


def period_object(text: str) -> dict[str, Any] | None:
    """The form's period text as the API's object (see :func:`period_text`); a text that
    is none of them goes to the API as a month, which refuses it naming the field."""
    text = text.strip()
    if not text:
        return None
    if text.lower() == "latest":
        return {"choice": "latest"}
    found = _PERIOD_TEXT.match(text)
    if found and found.group(2):
        return {"choice": "version", "month": found.group(1), "version": int(found.group(2))}
    return {"choice": "month", "month": found.group(1) if found else text[:20]}


def sections_of(definition: dict[str, Any]) -> list[SectionForm]:
    """A stored definition's sections as the form holds them."""
    return [SectionForm(heading=s.get("heading") or "",
                        query=f"{s.get('query_id')}:{s.get('query_version') or ''}",
                        display=s.get("display") or "table", label=s.get("label_column") or "",
                        value=s.get("value_column") or "", period=period_text(s.get("period")))
            for s in definition.get("sections") or []]


def sections_typed(fields: dict[str, str]) -> list[SectionForm]:
    """The posted form's sections, in order (``count`` of them, at most :data:`MAX_FORM_SECTIONS`)."""
    try:
        count = max(0, min(int(fields.get("count", "0")), MAX_FORM_SECTIONS))
    except ValueError:
        count = 0
    return [SectionForm(**{name: fields.get(f"{name}_{i}", "")[:300] for name in SectionForm.__dataclass_fields__})
            for i in range(count)]


def definition_of(title: str, sections: list[SectionForm]) -> dict[str, Any]:
    """The form's title and sections as the API's report definition (a table names no
    columns; the empty query choice is left for the API to refuse)."""
    out = []
    for s in sections:
        query_id, _, version = s.query.partition(":")
        section: dict[str, Any] = {"heading": s.heading, "query_id": query_id, "display": s.display}
        if version:
            section["query_version"] = int(version) if version.isdigit() else version
        if s.display != "table":
            section["label_column"], section["value_column"] = s.label.strip(), s.value.strip()
        period = period_object(s.period)
        if period is not None:
            section["period"] = period
        out.append(section)
    return {"title": title, "sections": out}


def moved(sections: list[SectionForm], action: str) -> list[SectionForm]:
    """``sections`` after the form's ``action``: ``add`` (a table section at the end,
    up to :data:`MAX_FORM_SECTIONS`), ``remove:i``, ``up:i`` or ``down:i`` (i from 0);
    anything else leaves them."""
    verb, _, index = action.partition(":")
    sections = list(sections)
    if verb == "add":
        return sections + [SectionForm()] if len(sections) < MAX_FORM_SECTIONS else sections
    if not index.isdigit() or int(index) >= len(sections):
        return sections
    i = int(index)
    if verb == "remove":
        del sections[i]
    elif verb == "up" and i > 0:
        sections[i - 1], sections[i] = sections[i], sections[i - 1]
    elif verb == "down" and i + 1 < len(sections):
        sections[i], sections[i + 1] = sections[i + 1], sections[i]
    return sections


def control_of(field: str | None) -> str:
    """The form control an API error's ``field`` names: ``name``, ``title``,
    ``<control>_<i>`` for a section's field, ``sections`` for the list itself, else ``form``."""
    if not field:
        return "form"
    if field == "name":
        return "name"
    if field == "definition.title":
        return "title"
    found = _SECTION_FIELD.match(field)
    if found and found.group(2) in _SECTION_CONTROLS:
        return f"{_SECTION_CONTROLS[found.group(2)]}_{found.group(1)}"
    return "sections" if field.startswith("definition.sections") else "form"


def query_choices(ctx: Request) -> list[dict[str, Any]] | None:
    """The workspace's saved queries (first 200, ``GET /queries``) as the form offers them:
    per query its name and choices (``{"value", "label"}``: the current version when
    rendered, then each version, newest first). None when the API refuses the person the
    queries."""
    reply = ctx.api().call("GET", "/queries", query={"limit": "200"})
    if reply.status != 200 or not isinstance(reply.body, dict):
        return None
    return [{"id": q["id"], "name": q["name"], "choices": [
        {"value": f"{q['id']}:", "label": f"{q['name']}: its current version when rendered"},
        *({"value": f"{q['id']}:{v}", "label": f"{q['name']}: version {v}"}
          for v in range(q["current_version"], 0, -1))]} for q in reply.body["items"]]


def section_columns(ctx: Request, sections: list[SectionForm]) -> list[list[dict[str, str]] | None]:
    """Per section, the columns its chosen query version selects as a chart may use them
    (``[{"name", "label"}]`` in the query's order, labels from the catalogue); None for a
    section without a query, or one the API does not show the person. One ``GET
    /queries/{id}`` per chosen query and one ``GET /catalogue``."""
    chosen = {s.query.partition(":")[0] for s in sections if s.query.partition(":")[0]}
    if not chosen:
        return [None for _ in sections]
    client = ctx.api()
    catalogue = client.call("GET", "/catalogue")
    labels = {(e["name"], c["name"]): c["label"] for e in catalogue.body.get("entities", []) for c in e["columns"]
              } if catalogue.status == 200 and isinstance(catalogue.body, dict) else {}
    details = {}
    for query_id in chosen:
        reply = client.call("GET", f"/queries/{quote(query_id, safe='')}")
        if reply.status == 200 and isinstance(reply.body, dict):
            details[query_id] = reply.body
    out: list[list[dict[str, str]] | None] = []
    for s in sections:
        query_id, _, version = s.query.partition(":")
        detail = details.get(query_id)
        versions = (detail or {}).get("versions") or []
        found = next((v for v in versions if str(v["version"]) == version), versions[0] if versions and not version
                     else None)
        if found is None:
            out.append(None)
            continue
        definition = found["definition"]
        out.append([{"name": c, "label": labels.get((definition["entity"], c), c)} for c in definition["columns"]])
    return out


def form_page(ctx: Request, *, report: dict[str, Any] | None, name: str, title: str, sections: list[SectionForm],
              key: str, problem: dict[str, Any] | None = None, status_code: int = 200) -> Response:
    """The compose form (a new report when ``report`` is None, else its next version)
    holding what was typed; ``problem`` (``{"control", "message"}``) is shown on its control.
    A chart's label and value columns are offered by the catalogue's labels of the columns
    the section's query selects."""
    return ctx.page("report_form.html", status_code, report=report, name=name, doc_title=title, sections=sections,
                    columns=section_columns(ctx, sections), key=key, problem=problem, queries=query_choices(ctx),
                    displays=DISPLAYS, max_sections=MAX_FORM_SECTIONS)


@router.get(f"{PREFIX}/reports")
@signed_in
def reports(ctx: Request) -> Response:
    """``GET /console/reports``: the workspace's reports, pages of :data:`PAGE_SIZE`: name,
    current version, sections and who changed it when (the workspace's zone, UTC beside)."""
    reply = ctx.api().call("GET", "/reports", query={"cursor": ctx.params.get("cursor"), "limit": str(PAGE_SIZE)})
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    rows = [{**item, "changed": when(item["updated_at"], zone)} for item in reply.body["items"]]
    cursor = reply.body.get("next_cursor")
    return ctx.page("reports.html", rows=rows, zone=zone,
                    next_page=f"{PREFIX}/reports?" + urlencode({"cursor": cursor}) if cursor else None)


def _not_a_composer(ctx: Request) -> Response:
    """The 403 page of a compose form opened by a person whose roles do not write reports."""
    return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Not allowed",
                    message="Your roles do not allow composing reports (reports:write).",
                    back=("/reports", "Back to the reports"))


@router.get(f"{PREFIX}/reports/new")
@signed_in
def new_report(ctx: Request) -> Response:
    """``GET /console/reports/new``: the compose form of a new report (one table section)."""
    if not ctx.session.has("reports:write"):
        return _not_a_composer(ctx)
    return form_page(ctx, report=None, name="", title="", sections=[SectionForm()], key=str(uuid.uuid4()))


@router.get(f"{PREFIX}/reports/<report_id>")
@signed_in
def report_page(ctx: Request, report_id: str) -> Response:
    """``GET /console/reports/{id}``: a report's current version (its sections, each query
    by name), its versions, the deliveries that send it and the preview render."""
    client = ctx.api()
    path = f"/reports/{quote(report_id, safe='')}"
    reply = client.call("GET", path)
    if reply.status != 200:
        return ctx.api_error(reply)
    versions = client.call("GET", f"{path}/versions")
    if versions.status != 200:
        return ctx.api_error(versions)
    zone = zone_of(reply.body)
    names = {q["id"]: q["name"] for q in query_choices(ctx) or []}
    sections = [{**s, "query_name": names.get(s["query_id"]), "period_text": period_text(s.get("period"))}
                for s in reply.body["definition"]["sections"]]
    rows = [{**v, "saved": when(v["created_at"], zone)} for v in versions.body["items"]]
    return ctx.page("report.html", r=reply.body, sections=sections, versions=rows, zone=zone,
                    changed=when(reply.body["version_created_at"], zone), render_key=str(uuid.uuid4()),
                    composable=len(sections) <= MAX_FORM_SECTIONS, saved=ctx.params.get("saved") == "1")


@router.get(f"{PREFIX}/reports/<report_id>/edit")
@signed_in
def edit_report(ctx: Request, report_id: str) -> Response:
    """``GET /console/reports/{id}/edit``: the compose form holding the current version,
    saving the next one."""
    if not ctx.session.has("reports:write"):
        return _not_a_composer(ctx)
    reply = ctx.api().call("GET", f"/reports/{quote(report_id, safe='')}")
    if reply.status != 200:
        return ctx.api_error(reply)
    definition = reply.body["definition"]
    sections = sections_of(definition)
    if len(sections) > MAX_FORM_SECTIONS:
        return ctx.page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, title="Refused",
                        message=f"This report has {len(sections)} sections; the console composes up to "
                                f"{MAX_FORM_SECTIONS}.", back=(f"/reports/{quote(report_id, safe='')}",
                                                               "Back to the report"))
    return form_page(ctx, report=reply.body, name=reply.body["name"], title=definition["title"],
                     sections=sections, key=str(uuid.uuid4()))


@router.post(f"{PREFIX}/reports/compose")
@checked_post
def compose(ctx: Request) -> Response:
    """``POST /console/reports/compose``: the compose form's buttons. ``add``, ``remove:i``,
    ``up:i`` and ``down:i`` show the form again changed; ``save`` creates the report
    (``POST /reports``, the form's Idempotency-Key) or saves its next version (``PUT
    /reports/{report_id}``) and leads to its page; a refusal shows the form again with the
    API's reason on the field it names."""
    fields = ctx.fields
    report_id = fields.get("report_id", "").strip()
    report = None
    if report_id:
        found = ctx.api().call("GET", f"/reports/{quote(report_id, safe='')}")
        if found.status != 200:
            return ctx.api_error(found)
        report = found.body
    name, title = fields.get("name", "")[:300], fields.get("title", "")[:300]
    sections, action = sections_typed(fields), fields.get("action", "")
    key = fields.get("key", "")[:200] or str(uuid.uuid4())
    if action != "save":
        return form_page(ctx, report=report, name=name, title=title, sections=moved(sections, action), key=key)
    body = {"name": name.strip(), "definition": definition_of(title, sections)}
    if report is None:
        reply = ctx.api().call("POST", "/reports", body=body, headers={"Idempotency-Key": key})
    else:
        reply = ctx.api().call("PUT", f"/reports/{quote(report_id, safe='')}", body=body)
    if reply.status in (200, 201) and isinstance(reply.body, dict):
        return ctx.redirect(f"{PREFIX}/reports/{quote(str(reply.body['id']), safe='')}?saved=1")
    answer = reply.body if isinstance(reply.body, dict) else {}
    problem = {"control": control_of(answer.get("field")), "field": answer.get("field"),
               "message": answer.get("message") or "the report was refused"}
    # A refused request may have claimed the key with what it sent: the corrected form is a new request.
    return form_page(ctx, report=report, name=name, title=title, sections=sections, key=str(uuid.uuid4()),
                     problem=problem, status_code=reply.status if 400 <= reply.status < 500 else 502)


@router.post(f"{PREFIX}/reports/<report_id>/renders")
@checked_post
def preview(ctx: Request, report_id: str) -> Response:
    """``POST /console/reports/{id}/renders``: "Preview the PDF": a render of the current
    version (``POST /reports/{id}/renders`` with the page's Idempotency-Key: a repeated
    click is the same render), then the render's page."""
    headers = {"Idempotency-Key": ctx.fields["key"][:200]} if ctx.fields.get("key") else None
    reply = ctx.api().call("POST", f"/reports/{quote(report_id, safe='')}/renders", headers=headers)
    if reply.status == 202 and isinstance(reply.body, dict):
        return ctx.redirect(f"{PREFIX}/reports/{quote(report_id, safe='')}/renders/"
                            f"{quote(str(reply.body['id']), safe='')}")
    return ctx.api_error(reply)
