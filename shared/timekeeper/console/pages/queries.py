"""The saved queries' pages: the list, New query and New version (entity, columns,
filters from the catalogue's operators, sort and limit; Preview before Save), a query's
page (its versions, a side-by-side diff of two, the deliveries that pin them, Export now,
Delete) and an export's progress.

Filter values are typed as people type them in the workspace's locale (the catalogue's
``entry``: ``31.12.2026``, ``1.234,50`` in de_DE) and sent with ``"values": "locale"``:
the API parses them and names the value it cannot read, which the form shows on that
field with everything typed kept.
"""

from __future__ import annotations

import difflib
import json
import uuid
from datetime import date
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from babel import Locale, UnknownLocaleError
from babel.dates import format_date
from babel.numbers import format_decimal

from timekeeper.console.api_client import ApiReply
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX
from timekeeper.console.people import people_by_id

router = Router()

#: Filter and sort rows a form offers (blank rows are left out of the definition).
FILTER_ROWS = 4
SORT_ROWS = 2
#: Rows a preview shows.
PREVIEW_ROWS = 20
#: Separates the values of an ``in`` list or a ``between`` pair typed in one field.
LIST_SEPARATOR = ";"
_OPERATOR_WORDS = {"eq": "is", "ne": "is not", "lt": "is before / less than", "lte": "is on or before / at most",
                   "gt": "is after / more than", "gte": "is on or after / at least", "between": "is between",
                   "in": "is one of", "not_in": "is none of", "contains": "contains", "starts_with": "starts with",
                   "is_null": "is missing", "is_not_null": "is present"}


def _may_write(ctx: Request) -> bool:
    return ctx.session.has("queries:write", "queries:admin")


def _not_a_writer(ctx: Request) -> Response:
    """The 403 page of a query form opened by a person whose roles do not write queries."""
    return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Not allowed",
                    message="Your roles do not allow writing queries (queries:write).",
                    back=("/queries", "Back to the queries"))


def _body(reply: ApiReply) -> dict[str, Any]:
    return reply.body if isinstance(reply.body, dict) else {}


# ------------------------------------------------------------- values in the locale


def _date_pattern(locale: str) -> str:
    """The locale's short date pattern with a four-digit year (``dd.MM.y`` in de_DE)."""
    try:
        pattern = Locale.parse(locale).date_formats["short"].pattern
    except (UnknownLocaleError, ValueError, KeyError):
        return "yyyy-MM-dd"
    return pattern.replace("yy", "y") if "yyy" not in pattern else pattern


def typed_value(column_type: str, value: Any, entry: dict[str, Any]) -> str:
    """A stored filter value (JSON form) as people type it in the workspace's locale
    (``entry``: ``locale``, ``currency_digits``): dates ``31.12.2026`` and amounts
    ``1.234,50`` in de_DE; a list or pair joined by ``;``; anything else as text."""
    if isinstance(value, list):
        return f"{LIST_SEPARATOR} ".join(typed_value(column_type, v, entry) for v in value)
    locale = str(entry.get("locale") or "en_US")
    if column_type == "date" and isinstance(value, str):
        try:
            return format_date(date.fromisoformat(value), _date_pattern(locale), locale=locale)
        except ValueError:
            return value
    if column_type == "money" and isinstance(value, int) and not isinstance(value, bool):
        from decimal import Decimal

        digits = int(entry.get("currency_digits") or 0)
        pattern = "#,##0" + ("." + "0" * digits if digits else "")
        return format_decimal(Decimal(value).scaleb(-digits), format=pattern, locale=locale,
                              decimal_quantization=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def operator_words(op: str, column_type: str) -> str:
    """A filter operator in words for a column of ``column_type``: ``lt`` is "is before"
    for a date, "is less than" for a number."""
    words = _OPERATOR_WORDS.get(op, op)
    if " / " not in words:
        return words
    for_dates, for_numbers = words.split(" / ")
    if column_type in ("date", "datetime", "timestamp"):
        return for_dates
    return for_numbers if for_numbers.startswith("is ") else f"is {for_numbers}"


def definition_words(definition: dict[str, Any], catalogue: dict[str, Any], entry: dict[str, Any]
                     ) -> dict[str, Any]:
    """A stored ``definition`` as people read it: ``{"entity", "columns", "filters",
    "sort", "limit"}`` with the catalogue's labels, each filter ``{"column", "op",
    "value"}`` with its operator in words and its value written in the workspace's locale
    (``entry``: money in major units, dates as the locale writes them; "" for none); an
    entity or column the catalogue does not know keeps its name."""
    entity = _entities(catalogue).get(definition.get("entity", ""), {"label": definition.get("entity"),
                                                                       "columns": []})
    columns = {c["name"]: c for c in entity["columns"]}

    def label(name: str) -> str:
        return str(columns.get(name, {}).get("label") or name)

    filters = [{"column": label(f["column"]),
                "op": operator_words(f["op"], columns.get(f["column"], {}).get("type", "text")),
                "value": typed_value(columns.get(f["column"], {}).get("type", "text"), f.get("value"), entry)}
               for f in definition.get("filters") or []]
    sort = [f"{label(s['column'])} {'descending' if s.get('direction') == 'desc' else 'ascending'}"
            for s in definition.get("sort") or []]
    return {"entity": entity.get("label") or definition.get("entity"),
            "columns": [label(c) for c in definition.get("columns") or []], "filters": filters, "sort": sort,
            "limit": definition.get("limit")}


def _json_value(column_type: str, op: str, text: str, takes: str) -> Any:
    """What a typed filter value is sent as: a list for ``in``/``between`` (split at ``;``),
    integers and booleans as JSON, text (dates and money as typed) for the API to parse."""
    if takes == "none":
        return None
    if takes in ("list", "pair"):
        return [_json_value(column_type, op, part.strip(), "one") for part in text.split(LIST_SEPARATOR)]
    if column_type == "integer":
        try:
            return int(text.replace("_", ""))
        except ValueError:
            return text
    if column_type == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


# ------------------------------------------------------------------ the form


def _entities(catalogue: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in catalogue.get("entities", [])}


def _conditions(catalogue: dict[str, Any], entity: dict[str, Any]) -> list[dict[str, str]]:
    """Every column and operator its type allows, as one choice (``column|op``) each."""
    by_type = {t["name"]: t["operators"] for t in catalogue.get("types", [])}
    return [{"value": f"{c['name']}|{op}", "label": f"{c['label']} {operator_words(op, c['type'])}"}
            for c in entity["columns"] for op in by_type.get(c["type"], [])]


def blank_form(catalogue: dict[str, Any], entity_name: str | None) -> dict[str, Any]:
    """The typed fields of an empty form for ``entity_name`` (the catalogue's first entity
    when None or unknown), every column of the entity ticked."""
    entities = _entities(catalogue)
    name = entity_name if entity_name in entities else next(iter(entities), "")
    columns = [c["name"] for c in entities[name]["columns"]] if name else []
    return {"entity": name, "columns": columns, "filters": [{"cond": "", "value": ""} for _ in range(FILTER_ROWS)],
            "sort": [{"column": "", "direction": "asc"} for _ in range(SORT_ROWS)], "limit": "",
            "name": "", "description": ""}


def form_of(definition: dict[str, Any], catalogue: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The typed fields of a form prefilled with a stored ``definition`` (values as people
    type them in the workspace's locale)."""
    typed = blank_form(catalogue, definition.get("entity"))
    entity = _entities(catalogue).get(typed["entity"], {"columns": []})
    types = {c["name"]: c["type"] for c in entity["columns"]}
    typed["columns"] = list(definition.get("columns") or [])
    filters = [{"cond": f"{f['column']}|{f['op']}", "value": typed_value(types.get(f["column"], "text"),
                                                                          f.get("value"), entry)}
               for f in definition.get("filters") or []]
    typed["filters"] = (filters + typed["filters"])[:max(FILTER_ROWS, len(filters) + 1)]
    sort = [{"column": s["column"], "direction": s.get("direction", "asc")} for s in definition.get("sort") or []]
    typed["sort"] = (sort + typed["sort"])[:max(SORT_ROWS, len(sort))]
    typed["limit"] = "" if definition.get("limit") is None else str(definition["limit"])
    return typed


def typed_form(fields: dict[str, str], catalogue: dict[str, Any]) -> dict[str, Any]:
    """The form's fields as typed (``fields``: the posted form), for the draft and to show
    again."""
    typed = blank_form(catalogue, fields.get("entity"))
    entity = _entities(catalogue).get(typed["entity"], {"columns": []})
    typed["columns"] = [c["name"] for c in entity["columns"] if fields.get(f"col.{c['name']}")]
    typed["filters"] = [{"cond": fields.get(f"f{i}.cond", ""), "value": fields.get(f"f{i}.value", "")}
                        for i in range(FILTER_ROWS)]
    typed["sort"] = [{"column": fields.get(f"s{i}.column", ""),
                      "direction": "desc" if fields.get(f"s{i}.dir") == "desc" else "asc"} for i in range(SORT_ROWS)]
    typed["limit"] = fields.get("limit", "").strip()
    typed["name"] = fields.get("name", "").strip()
    typed["description"] = fields.get("description", "").strip()
    return typed


def draft_of(typed: dict[str, Any], catalogue: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The definition the typed form asks for, and where each of its fields is on the form
    (the API's field name -> the form's): blank filter and sort rows are left out."""
    entity = _entities(catalogue).get(typed["entity"], {"columns": []})
    types = {c["name"]: c["type"] for c in entity["columns"]}
    takes = {o["name"]: o["value"] for o in catalogue.get("operators", [])}
    where = {"definition.entity": "entity", "definition.columns": "columns", "definition.limit": "limit",
             "definition": "definition", "limit": "limit", "name": "name", "description": "description"}
    for i in range(len(typed["columns"])):
        where[f"definition.columns[{i}]"] = "columns"
    filters = []
    for row, f in enumerate(typed["filters"]):
        if not f["cond"]:
            continue
        column, _, op = f["cond"].partition("|")
        item: dict[str, Any] = {"column": column, "op": op}
        value = _json_value(types.get(column, "text"), op, f["value"].strip(), takes.get(op, "one"))
        if value is not None:
            item["value"] = value
        for suffix, to in ((".column", f"f{row}.cond"), (".op", f"f{row}.cond"), (".value", f"f{row}.value"),
                           ("", f"f{row}.cond")):
            where[f"definition.filters[{len(filters)}]{suffix}"] = to
        filters.append(item)
    sort = []
    for row, s in enumerate(typed["sort"]):
        if s["column"]:
            where[f"definition.sort[{len(sort)}].column"] = where[f"definition.sort[{len(sort)}]"] = f"s{row}.column"
            sort.append({"column": s["column"], "direction": s["direction"]})
    definition: dict[str, Any] = {"entity": typed["entity"], "columns": typed["columns"], "filters": filters,
                                  "sort": sort}
    if typed["limit"]:
        definition["limit"] = int(typed["limit"]) if typed["limit"].isdigit() else typed["limit"]
    return definition, where


def problems_of(reply: ApiReply, where: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The API's refusal as the form shows it: one line for the page, and the reason on the
    form field the API names (a value inside a list: the whole value's field)."""
    body = _body(reply)
    field = str(body.get("field") or "")
    message = str(body.get("message") or "the request was refused")
    at = where.get(field)
    while at is None and "[" in field:
        field = field[:field.rindex("[")]
        at = where.get(field)
    summary = f"Refused: {message}" + (f" ({body['field']})" if body.get("field") else "")
    return summary, ({at: message} if at else {})


def _form_page(ctx: Request, catalogue: dict[str, Any], typed: dict[str, Any], *, query: dict[str, Any] | None,
               key: str, preview: dict[str, Any] | None = None, problem: str | None = None,
               problems: dict[str, str] | None = None, status_code: int = 200) -> Response:
    entities = _entities(catalogue)
    entity = entities.get(typed["entity"]) or {"columns": [], "name": "", "label": ""}
    entry = catalogue.get("entry") or {}
    return ctx.page("query_form.html", status_code, catalogue=catalogue, entities=list(entities.values()),
                    entity=entity, conditions=_conditions(catalogue, entity) if entity["columns"] else [],
                    typed=typed, query=query, key=key, preview=preview, problem=problem, problems=problems or {},
                    entry=entry, date_example=typed_value("date", "2026-12-31", entry),
                    money_example=typed_value("money", 123450, entry), separator=LIST_SEPARATOR,
                    max_preview=PREVIEW_ROWS)


def _catalogue(ctx: Request) -> dict[str, Any] | Response:
    reply = ctx.api().call("GET", "/catalogue")
    return reply.body if reply.status == 200 and isinstance(reply.body, dict) else ctx.api_error(reply)


def _new_key() -> str:
    return str(uuid.uuid4())


# ------------------------------------------------------------------ pages


@router.get(f"{PREFIX}/queries")
@signed_in
def queries_list(ctx: Request) -> Response:
    """``GET /console/queries``: the workspace's saved queries (name, current version,
    entity, who changed each last and when), with New query for writers."""
    params = ctx.params
    reply = ctx.api().call("GET", "/queries", query={"limit": "100", "cursor": params.get("cursor", "")})
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = zone_of(reply.body)
    items = [{**q, "changed": when(q["updated_at"], zone)} for q in reply.body["items"]]
    done = "The query was deleted." if params.get("done") == "deleted" else None
    catalogue = _catalogue(ctx)
    labels = entity_labels(catalogue if isinstance(catalogue, dict) else {})
    return ctx.page("queries.html", items=items, zone=zone, next_cursor=reply.body.get("next_cursor"),
                    may_write=_may_write(ctx), done=done, labels=labels)


def entity_labels(catalogue: dict[str, Any]) -> dict[str, str]:
    """``{entity name: its catalogue label}`` (``"invoices"`` -> ``"Invoices"``); empty
    when the catalogue is not known (pages then show the name)."""
    return {name: str(e.get("label") or name) for name, e in _entities(catalogue).items()}


@router.get(f"{PREFIX}/queries/new")
@signed_in
def query_new(ctx: Request) -> Response:
    """``GET /console/queries/new?entity=``: the New query form for the entity."""
    if not _may_write(ctx):
        return _not_a_writer(ctx)
    catalogue = _catalogue(ctx)
    if isinstance(catalogue, Response):
        return catalogue
    return _form_page(ctx, catalogue, blank_form(catalogue, ctx.params.get("entity")), query=None, key=_new_key())


def _submitted(ctx: Request, query: dict[str, Any] | None) -> Response:
    """Preview, change entity or Save a posted form: of a new query (``query`` None) or a
    new version of ``query``."""
    catalogue = _catalogue(ctx)
    if isinstance(catalogue, Response):
        return catalogue
    fields = ctx.fields
    typed = typed_form(fields, catalogue)
    key = fields.get("key") or _new_key()
    action = fields.get("action", "")
    if action == "entity":
        fresh = blank_form(catalogue, fields.get("entity"))  # every column of the chosen entity ticked
        return _form_page(ctx, catalogue, {**fresh, "name": typed["name"], "description": typed["description"]},
                          query=query, key=key)
    definition, where = draft_of(typed, catalogue)
    if action == "preview":
        reply = ctx.api().call("POST", "/queries/preview",
                               body={"definition": definition, "values": "locale", "limit": PREVIEW_ROWS})
        if reply.status == 200:
            return _form_page(ctx, catalogue, typed, query=query, key=key, preview=reply.body)
    elif query is None:
        reply = ctx.api().call("POST", "/queries", headers={"Idempotency-Key": key}, body={
            "name": typed["name"], "description": typed["description"], "definition": definition,
            "values": "locale"})
        if reply.status in (200, 201):
            return ctx.redirect(f"{PREFIX}/queries/{quote(reply.body['query']['id'], safe='')}?done=saved")
    else:
        body: dict[str, Any] = {"definition": definition, "values": "locale"}
        if typed["name"] and typed["name"] != query["name"]:
            body["name"] = typed["name"]
        if typed["description"] != query["description"]:
            body["description"] = typed["description"]
        reply = ctx.api().call("POST", f"/queries/{quote(query['id'], safe='')}/versions",
                               headers={"Idempotency-Key": key}, body=body)
        if reply.status in (200, 201):
            return ctx.redirect(f"{PREFIX}/queries/{quote(query['id'], safe='')}?done=version")
    if reply.status in (401, 403, 404):
        return ctx.api_error(reply)
    problem, problems = problems_of(reply, where)
    if action != "preview":
        key = _new_key()  # the refused body answers its key from now on: a corrected form is a new request
    return _form_page(ctx, catalogue, typed, query=query, key=key, problem=problem, problems=problems,
                      status_code=reply.status if 400 <= reply.status < 500 else 502)


@router.post(f"{PREFIX}/queries/new")
@checked_post
def query_create(ctx: Request) -> Response:
    """``POST /console/queries/new``: Preview (``POST /queries/preview``), change the entity,
    or Save (``POST /queries`` with the form's Idempotency-Key), then the query's page."""
    return _submitted(ctx, None)


def _detail(ctx: Request, query_id: str) -> dict[str, Any] | Response:
    reply = ctx.api().call("GET", f"/queries/{quote(query_id, safe='')}")
    return reply.body if reply.status == 200 and isinstance(reply.body, dict) else ctx.api_error(reply)


@router.get(f"{PREFIX}/queries/<query_id>/versions/new")
@signed_in
def version_new(ctx: Request, query_id: str) -> Response:
    """``GET /console/queries/{id}/versions/new?from=N``: the form prefilled with version N
    (the current one by default)."""
    if not _may_write(ctx):
        return _not_a_writer(ctx)
    detail = _detail(ctx, query_id)
    if isinstance(detail, Response):
        return detail
    catalogue = _catalogue(ctx)
    if isinstance(catalogue, Response):
        return catalogue
    versions = {str(v["version"]): v for v in detail["versions"]}
    source = versions.get(ctx.params.get("from", ""), detail["versions"][0])
    typed = form_of(source["definition"], catalogue, detail["entry"])
    typed.update(name=detail["query"]["name"], description=detail["query"]["description"])
    return _form_page(ctx, {**catalogue, "entry": detail["entry"]}, typed, query=detail["query"], key=_new_key())


@router.post(f"{PREFIX}/queries/<query_id>/versions/new")
@checked_post
def version_create(ctx: Request, query_id: str) -> Response:
    """``POST /console/queries/{id}/versions/new``: Preview, change the entity, or Save as
    a new version (``POST /queries/{id}/versions``), then the query's page."""
    detail = _detail(ctx, query_id)
    if isinstance(detail, Response):
        return detail
    return _submitted(ctx, detail["query"])


def side_by_side(left: dict[str, Any], right: dict[str, Any]) -> list[dict[str, Any]]:
    """Two definitions' pretty-printed JSON side by side (:mod:`difflib`), one row per line
    pair: ``{"left", "right", "kind"}`` with ``kind`` equal, replace, delete or insert
    (texts are escaped by the template)."""
    a = json.dumps(left, indent=2, ensure_ascii=False, sort_keys=False).splitlines()
    b = json.dumps(right, indent=2, ensure_ascii=False, sort_keys=False).splitlines()
    rows = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            rows.append({"left": a[i1 + k] if i1 + k < i2 else None, "right": b[j1 + k] if j1 + k < j2 else None,
                         "kind": tag})
    return rows


def compared_words(left: dict[str, Any], right: dict[str, Any]) -> list[dict[str, Any]]:
    """Two versions' definitions in words (:func:`definition_words`) side by side, one row
    per part: ``{"part", "left", "right", "changed"}`` with each side a list of lines
    (entity, columns, each filter, sort, limit as a page says them)."""

    def lines(words: dict[str, Any]) -> dict[str, list[str]]:
        filters = [" ".join(p for p in (f["column"], f["op"], f["value"]) if p) for f in words["filters"]]
        return {"Entity": [str(words["entity"])], "Columns": [", ".join(words["columns"]) or "—"],
                "Filters": filters or ["none: every row"],
                "Sorted by": [", then ".join(words["sort"]) or "the entity's own order"],
                "At most": [f"{words['limit']} rows" if words["limit"] else "the catalogue's limit"]}

    a, b = lines(left), lines(right)
    return [{"part": part, "left": a[part], "right": b[part], "changed": a[part] != b[part]} for part in a]


@router.get(f"{PREFIX}/queries/<query_id>")
@signed_in
def query_page(ctx: Request, query_id: str) -> Response:
    """``GET /console/queries/{id}?left=&right=``: the query, its versions, the deliveries
    that pin them, the diff of two versions (the previous and the current by default),
    Export now, New version and Delete for writers."""
    detail = _detail(ctx, query_id)
    if isinstance(detail, Response):
        return detail
    zone = str(detail["entry"]["timezone"])
    versions = [{**v, "saved": when(v["created_at"], zone)} for v in detail["versions"]]
    numbers = {str(v["version"]): v for v in versions}
    params = ctx.params
    right = numbers.get(params.get("right", ""), versions[0])
    left = numbers.get(params.get("left", ""), versions[1] if len(versions) > 1 else versions[0])
    done = {"saved": "The query was saved.", "version": "The new version was saved."}.get(params.get("done", ""))
    catalogue = _catalogue(ctx)
    known = catalogue if isinstance(catalogue, dict) else {}
    words = definition_words(right["definition"], known, detail["entry"])
    left_words = definition_words(left["definition"], known, detail["entry"])
    return ctx.page("query.html", q=detail["query"], versions=versions, pinned_by=detail["pinned_by"], zone=zone,
                    words=words, people=people_by_id(ctx), labels=entity_labels(known),
                    compared=compared_words(left_words, words),
                    definition_json=json.dumps(right["definition"], indent=2, ensure_ascii=False),
                    changed=when(detail["query"]["updated_at"], zone), left=left, right=right,
                    diff=side_by_side(left["definition"], right["definition"]), may_write=_may_write(ctx),
                    done=done, key=_new_key())


def _query_refused(ctx: Request, query_id: str, reply: ApiReply) -> Response:
    """A query's page action the API refused: its reason on an error page leading back."""
    if reply.status in (401, 403, 404):
        return ctx.api_error(reply)
    body = _body(reply)
    return ctx.page("error.html", reply.status if 400 <= reply.status < 500 else 502, title="Refused",
                    message=str(body.get("message") or "The request was refused."), code=body.get("code"),
                    back=(f"/queries/{quote(query_id, safe='')}", "Back to the query"))


@router.post(f"{PREFIX}/queries/<query_id>/export")
@checked_post
def query_export(ctx: Request, query_id: str) -> Response:
    """``POST /console/queries/{id}/export``: Export now (``POST /queries/{id}/exports``
    with the version and format chosen), then the export's progress."""
    body: dict[str, Any] = {"format": ctx.fields.get("format", "")}
    version = ctx.fields.get("version", "")
    if version.isdigit():
        body["version"] = int(version)
    reply = ctx.api().call("POST", f"/queries/{quote(query_id, safe='')}/exports", body=body,
                           headers={"Idempotency-Key": ctx.fields.get("key") or _new_key()})
    if reply.status in (200, 202):
        return ctx.redirect(f"{PREFIX}/exports/{quote(reply.body['id'], safe='')}")
    return _query_refused(ctx, query_id, reply)


@router.get(f"{PREFIX}/exports/<export_id>")
@signed_in
def export_page(ctx: Request, export_id: str) -> Response:
    """``GET /console/exports/{id}``: an export's progress (``GET /exports/{id}``); the page
    reloads itself every few seconds until the export succeeded (then its download link)
    or failed (then why)."""
    reply = ctx.api().call("GET", f"/exports/{quote(export_id, safe='')}")
    if reply.status != 200:
        return ctx.api_error(reply)
    export = reply.body
    return ctx.page("export.html", e=export, waiting=export["state"] in ("queued", "running"))


@router.post(f"{PREFIX}/queries/<query_id>/delete")
@checked_post
def query_delete(ctx: Request, query_id: str) -> Response:
    """``POST /console/queries/{id}/delete``: ``DELETE /queries/{id}`` (the form asked for
    confirmation), then the list; the API's refusal is shown as its reason."""
    reply = ctx.api().call("DELETE", f"/queries/{quote(query_id, safe='')}")
    if reply.status == 204:
        return ctx.redirect(f"{PREFIX}/queries?" + urlencode({"done": "deleted"}))
    return _query_refused(ctx, query_id, reply)
