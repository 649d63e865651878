"""The OpenAPI document as clients generate from it: what :func:`finish` does to the
document Powertools generates from the route models.

Code generators (openapi-python-client, openapi-generator) turn every named schema into a
model and every enum into an enum type. So that each does so with its default settings:

* the time zones are one component, ``TimeZone`` (an enum of
  :func:`timekeeper.schedules.zones.canonical_zones`, with ``x-enum-varnames`` naming each
  member uniquely: ``Etc/GMT0``, ``Etc/GMT+0`` and ``Etc/GMT-0`` are ``ETC_GMT0``,
  ``ETC_GMT_PLUS_0`` and ``ETC_GMT_MINUS_0``), referenced by every ``timezone`` of a rule;
* the recurrence rule is one component, ``Recurrence``, referenced by every body and
  answer that carries a rule;
* every titled object schema written inline (a member of a ``oneOf`` / ``anyOf``, or a
  property) is a component named by its title (``CronRule``, ``DailyCalendar``,
  ``InvoicesDueDateRangeFilter``, ``QuerySource``, ...): a union of named models, never
  of anonymous objects whose generated names collide. Two different schemas with one
  title are a ``ValueError``;
* every operation documents the one error shape (:class:`~timekeeper.api.errors.ErrorBody`)
  for its 422 (never Powertools' ``HTTPValidationError``), a 500 and a 503 (the database
  did not answer; ``Retry-After`` in seconds). The headers of a route's own answers
  (``Location``, ``Idempotent-Replayed``) are declared by the route
  (:func:`timekeeper.api.errors.responses`).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from timekeeper.api.errors import ErrorBody

ZONE = "TimeZone"
RECURRENCE = "Recurrence"
_REF = "#/components/schemas/"
_ERROR_REF = {"$ref": f"{_REF}{ErrorBody.__name__}"}
#: Powertools' own error shapes, replaced by ErrorBody.
_POWERTOOLS_ERRORS = ("HTTPValidationError", "ResponseValidationError", "ValidationError")
#: The statuses every operation may answer whatever it is asked, with their descriptions.
_ALWAYS = {
    "500": "An unexpected fault (logged by type and place; the body says nothing more)",
    "503": "The database did not answer; nothing was half done: retry after Retry-After seconds "
           "(with the same Idempotency-Key, where the route takes one)",
}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "required": True,
                               "schema": {"type": "integer", "minimum": 0}}}
_TITLE = re.compile(r"[A-Z][A-Za-z0-9]*")


def zone_varname(zone: str) -> str:
    """The enum member name of ``zone`` in a generated client: upper case, ``/`` and other
    separators as ``_``, a sign before a digit spelt out (``"Etc/GMT-14"`` ->
    ``"ETC_GMT_MINUS_14"``, ``"America/Port-au-Prince"`` -> ``"AMERICA_PORT_AU_PRINCE"``)."""
    text = re.sub(r"\+(?=[0-9])", "_PLUS_", zone)
    text = re.sub(r"-(?=[0-9])", "_MINUS_", text)
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9]", "_", text)).strip("_").upper()


def zone_component(zones: list[str]) -> dict[str, Any]:
    """The ``TimeZone`` component: an enum of ``zones`` (sorted canonical IANA names) with
    unique ``x-enum-varnames``; raises ``ValueError`` if two zones would share a name."""
    names = [zone_varname(z) for z in zones]
    if len(set(names)) != len(names):
        raise ValueError("two zones have one enum member name")
    return {"title": ZONE, "type": "string", "enum": zones, "x-enum-varnames": names,
            "description": "a canonical IANA time zone (the tzdata package's zones, less those that name "
                           "no place)", "examples": ["America/New_York", "Europe/London", "Asia/Kolkata"]}


def finish(doc: dict[str, Any], *, recurrence: dict[str, Any], zones: list[str]) -> dict[str, Any]:
    """``doc`` (Powertools' document, JSON-ready) made generator-friendly as the module
    docstring says, in place; returns it. ``recurrence`` is the rule schema the models
    publish (every copy of it becomes a reference to ``Recurrence``), ``zones`` the zone
    enum's values (every enum equal to it becomes a reference to ``TimeZone``)."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    _one_error_shape(doc)
    rule = copy.deepcopy(recurrence)
    # Each copy is the rule's forms with the field's own title, description and examples.
    _replace(doc, lambda node: node.get("oneOf") == recurrence["oneOf"], {"$ref": f"{_REF}{RECURRENCE}"})
    schemas[RECURRENCE] = rule
    _replace(doc, lambda node: node.get("enum") == zones and node.get("type") == "string",
             {"$ref": f"{_REF}{ZONE}"})
    schemas[ZONE] = zone_component(zones)
    _name_union_members(schemas)
    _drop_unused(doc)
    return doc


def _one_error_shape(doc: dict[str, Any]) -> None:
    for item in doc.get("paths", {}).values():
        for operation in item.values():
            answers = operation.setdefault("responses", {})
            for answer in answers.values():
                media = answer.get("content", {}).get("application/json", {})
                ref = media.get("schema", {}).get("$ref", "")
                if ref.removeprefix(_REF) in _POWERTOOLS_ERRORS:
                    media["schema"] = dict(_ERROR_REF)
            for status, text in _ALWAYS.items():
                answers.setdefault(status, {"description": text,
                                            "content": {"application/json": {"schema": dict(_ERROR_REF)}}})
            answers["503"].setdefault("headers", {}).update(copy.deepcopy(RETRY_AFTER))


def _replace(node: Any, matches: Any, by: dict[str, Any]) -> Any:
    """Replace (in place) every dict under ``node`` for which ``matches(dict)`` holds by a
    copy of ``by``; returns the replacement of ``node`` itself."""
    if isinstance(node, dict):
        if matches(node):
            return dict(by)
        for key, value in node.items():
            node[key] = _replace(value, matches, by)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            node[i] = _replace(value, matches, by)
    return node


def _name_union_members(schemas: dict[str, Any]) -> None:
    """Move every titled object schema written inline (a member of a ``oneOf`` /
    ``anyOf``, or a property's: ``QuerySource`` in a delivery's body), innermost first,
    into ``schemas`` under its title, leaving a reference."""

    def named(node: Any) -> bool:
        return isinstance(node, dict) and "title" in node and ("properties" in node or "oneOf" in node)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                visit(value)
            for key in ("oneOf", "anyOf"):
                for i, member in enumerate(node.get(key, [])):
                    if named(member):
                        node[key][i] = {"$ref": f"{_REF}{_component(schemas, member)}"}
            properties = node.get("properties")
            if isinstance(properties, dict):
                for name, prop in properties.items():
                    if named(prop):
                        properties[name] = {"$ref": f"{_REF}{_component(schemas, prop)}"}
        elif isinstance(node, list):
            for value in node:
                visit(value)

    for name in list(schemas):
        visit(schemas[name])


def _component(schemas: dict[str, Any], schema: dict[str, Any]) -> str:
    name = schema["title"]
    if not _TITLE.fullmatch(name):
        raise ValueError(f"a union member's title is not a model name: {name!r}")
    if name in schemas and schemas[name] != schema:
        raise ValueError(f"two different schemas are titled {name!r}")
    schemas[name] = schema
    return name


def _drop_unused(doc: dict[str, Any]) -> None:
    """Remove the components no operation reaches (Powertools' own error shapes, and the
    copies a hoisted schema left behind)."""
    schemas = doc.get("components", {}).get("schemas", {})
    reached: set[str] = set()
    todo = [json.dumps(doc.get("paths", {}))]
    while todo:
        for name in re.findall(r'"#/components/schemas/([^"]+)"', todo.pop()):
            if name not in reached and name in schemas:
                reached.add(name)
                todo.append(json.dumps(schemas[name]))
    for name in set(schemas) - reached:
        del schemas[name]
