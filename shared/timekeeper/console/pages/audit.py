"""The workspace admin's audit log page: every change with who, when (the workspace's zone
with UTC beside) and what changed (before and after, field by field), filtered by kind and
person, with Older and Newer links (the API's cursor)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console import glossary
from timekeeper.console.context import Request, signed_in
from timekeeper.console.display import rule_text, when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: The log's kinds (areas) and how the filter names them.
KINDS = (("settings", "Settings"), ("schedule", "Schedules"), ("delivery", "Deliveries"), ("query", "Queries"),
         ("report", "Reports"), ("closure", "Closures"), ("recipient", "Recipients"), ("opt_out", "Opt-outs"),
         ("staff", "Staff reads and actions"), ("run", "Runs"), ("dead_letter", "Dead letters"),
         ("suppression", "Suppressions"))
#: The longest value the page shows in one line; a longer one is cut at a word and shown
#: in full (pretty JSON for a structure) in a disclosure.
SHORT_VALUE = 120
#: The console page of each kind of object the log names (its id appended), by subject type.
OBJECT_PAGES = {"schedule": "/schedules/", "delivery": "/deliveries/", "query": "/queries/", "report": "/reports/",
                "run": "/runs/"}
#: Verbs whose event lists facts about the object (no before): not a change of its name.
_CHANGING = ("created", "updated")


def entity_words(entity: str, labels: dict[str, str] | None = None) -> str:
    """A query's entity as the query editor names it: its catalogue label from ``labels``
    (``{entity name: label}``, :func:`timekeeper.console.pages.queries.entity_labels`);
    without one, a snapshot entity (``snapshot.<owner>.<type>``) as "Receivables aging
    (snapshot)" and any other by the glossary."""
    if labels and entity in labels:
        return labels[entity]
    if entity.startswith("snapshot."):
        return f"{glossary.words(entity.rpartition('.')[2])} (snapshot)"
    return glossary.words(entity)


def _definition_line(value: dict[str, Any], labels: dict[str, str] | None) -> str | None:
    """A query's definition (``entity``) as "Invoices, 4 columns", a report's (``sections``)
    as "1 section: <its heading>" or "3 sections"; None for any other structure."""
    if isinstance(value.get("entity"), str):
        columns = value.get("columns") if isinstance(value.get("columns"), list) else []
        return f"{entity_words(value['entity'], labels)}, {len(columns)} column{'s' * (len(columns) != 1)}"
    sections = value.get("sections")
    if isinstance(sections, list):
        heading = sections[0].get("heading") if len(sections) == 1 and isinstance(sections[0], dict) else None
        if isinstance(heading, str) and heading:
            return f"1 section: {heading}"
        return f"{len(sections)} section{'s' * (len(sections) != 1)}"
    return None


def _shown(value: Any, labels: dict[str, str] | None = None) -> dict[str, str]:
    """A field's value for the page: ``short`` (cut at a word boundary with "…" when it
    is longer than :data:`SHORT_VALUE`) and ``full`` (pretty JSON for a structure; ``""``
    when ``short`` is already all of it). A query's or report's definition is one line
    (:func:`_definition_line`; ``labels`` names the entities) with its JSON in ``full``."""
    if value is None:
        return {"short": "—", "full": ""}
    if isinstance(value, bool):
        return {"short": "yes" if value else "no", "full": ""}
    line = _definition_line(value, labels) if isinstance(value, dict) else None
    if line is not None:
        # A query's or report's definition: one line, its JSON behind the disclosure
        return {"short": line, "full": json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True,
                                                          separators=(", ", ": "))
    if len(text) <= SHORT_VALUE:
        return {"short": text, "full": ""}
    cut = text[:SHORT_VALUE].rsplit(" ", 1)[0].rstrip(",:;[{(") or text[:SHORT_VALUE]
    full = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)
    return {"short": cut + " …", "full": full}


def diff(before: dict[str, Any], after: dict[str, Any], labels: dict[str, str] | None = None
         ) -> list[dict[str, Any]]:
    """The fields of an event, each with its value before and after (``—`` when absent),
    in the order before's then after's own fields; ``field`` in words (``labels``: the
    catalogue's entity labels, for a query's definition)."""
    names = list(dict.fromkeys([*before, *after]))
    return [{"field": glossary.words(n), "before": _shown(before.get(n), labels),
             "after": _shown(after.get(n), labels),
             "changed": before.get(n) != after.get(n)} for n in names]


#: A staff snapshot request's kinds (the API's ``mode``) as the snapshot pages name them.
SNAPSHOT_MODES = {"manual": "Re-run", "backfill": "Backfill"}
#: Fields whose values are codes the glossary puts in words (a dead letter's queue, a run's state).
_CODED = ("queue", "state_before", "state", "status", "why", "suppression_reason")


def _readable(values: dict[str, Any], rule_words: str | None = None) -> dict[str, Any]:
    """An event's fields as people read them: a schedule's rule in words with its zone
    (``rule_words``, the API's; else as the schedule pages write it), not its JSON; the codes
    of :data:`_CODED` fields in words."""
    values = {k: glossary.words(v) if k in _CODED and isinstance(v, str) else v for k, v in values.items()}
    if isinstance(values.get("mail"), bool):
        values = {**values, "mail": "on" if values["mail"] else "off"}
    rule = values.get("recurrence")
    if isinstance(rule, dict) and rule_words:
        return {**values, "recurrence": rule_words}
    if isinstance(rule, dict):
        try:
            text = rule_text(rule)
        except (KeyError, TypeError, ValueError, AttributeError):
            return values  # not a rule the console writes in words: shown as recorded
        values = {**values, "recurrence": text + (f" ({rule['timezone']})" if rule.get("timezone") else "")}
    return values


def _snapshot_event(kind: str, before: dict[str, Any], after: dict[str, Any]
                    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """A staff action on a snapshot version: its name (``"Self-test 2026-09 version 2"``:
    the type in words) and what changed (a finalization as "Finalized: no → yes", not its
    unchanged state)."""
    code = str(after.get("snapshot_type") or before.get("snapshot_type") or "").rpartition("/")[2]
    name = " ".join(p for p in (glossary.words(code), str(after.get("period") or ""),
                                f"version {after['version']}" if after.get("version") else "") if p) or None
    if kind.endswith("snapshot_finalized"):
        return name, {"finalized": "no"}, {"finalized": "yes"}
    kept = ("snapshot_type", "period", "version")
    return name, {k: _snapshot_words(k, v) for k, v in before.items() if k not in kept}, {
        k: _snapshot_words(k, v) for k, v in after.items() if k not in kept}


def _snapshot_words(field: str, value: Any) -> Any:
    """A staff snapshot request's ``field`` value in words: its ``mode`` as Re-run or
    Backfill (never a schedule's "Run now"), its ``snapshot_type`` (``owner/name``) by the
    type's name, other codes by the glossary."""
    if field == "mode" and isinstance(value, str):
        return SNAPSHOT_MODES.get(value, glossary.words(value))
    if field == "snapshot_type" and isinstance(value, str):
        return glossary.words(value.rpartition("/")[2])
    return glossary.words(value)


def entry(event: dict[str, Any], zone: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An audit event (``GET /audit-events`` item) for the page: its kind in words, the
    object's ``name`` and ``link`` (a console path, None when it has no page), and either
    ``changes`` (before and after) or, for an event that only states facts (no before,
    not a creation nor an update), ``facts`` without the object's name among them.
    ``labels``: the catalogue's entity labels (a query's entity as its editor names it)."""
    rules = event.get("rules") or {}
    before = _readable(event.get("before") or {}, rules.get("before"))
    after = _readable(event.get("after") or {}, rules.get("after"))
    verb = event["kind"].partition(".")[2]
    name = after.get("name") or before.get("name")
    snapshot_page = None
    if event["subject_type"] == "snapshot_run":
        owner, _, code = str(after.get("snapshot_type") or "").partition("/")
        if owner and code and isinstance(after.get("period"), str):
            snapshot_page = f"{PREFIX}/snapshots/periods/{quote(owner, safe='')}/{quote(code, safe='')}/" \
                            f"{quote(after['period'], safe='')}"
        name, before, after = _snapshot_event(event["kind"], before, after)
    if event["subject_type"] == "snapshot_range":
        after = {k: _snapshot_words(k, v) if k in ("mode", "snapshot_type") else v for k, v in after.items()}
    retried_as = None
    if event["subject_type"] == "run":
        # A run by its schedule's name (the run linked); a retry's new run linked, no raw ids
        name = name or event.get("schedule_name")
        new_run = after.get("run_id") if event["kind"] == "run.retried" else None
        retried_as = f"{PREFIX}/runs/{quote(new_run, safe='')}" if isinstance(new_run, str) else None
        after = {k: v for k, v in after.items() if k not in ("message_id", "run_id")}
    if event["subject_type"] == "mail_suppression":
        # The log holds no address: the API names it from the removal record (gone once erased)
        name = event.get("address") or "an address erased since"
    page = OBJECT_PAGES.get(event["subject_type"])
    link = f"{PREFIX}{page}{event['subject_id']}" if page and event.get("subject_id") else None
    if event["subject_type"] == "workspace":
        link = f"{PREFIX}/settings"
    if event["subject_type"] == "mail_suppression":
        link = f"{PREFIX}/mail-suppressions"
    link = snapshot_page or link
    facts_only = not before and verb not in _CHANGING
    stated = {k: v for k, v in after.items() if k != "name"} if facts_only else {}
    facts = [{"field": glossary.words(k), "value": _shown(v, labels), "link": None} for k, v in stated.items()
             if not (k == "schedule_id" and event.get("schedule_name")) and k != "retry_of"]
    if isinstance(stated.get("retry_of"), str):
        facts.append({"field": "Retry of", "value": _shown("an earlier run"),
                      "link": f"{PREFIX}/runs/{quote(stated['retry_of'], safe='')}"})
    if "schedule_id" in stated and event.get("schedule_name"):
        facts.append({"field": "Schedule", "value": _shown(event["schedule_name"]),
                      "link": f"{PREFIX}/schedules/{quote(str(stated['schedule_id']), safe='')}"})
    reason = event.get("reason")
    return {**event, "reason": glossary.WORDS.get(reason, reason) if reason else reason,
            "when": when(event["at"], zone), "kind_words": glossary.audit_kind(event["kind"]),
            "object_words": glossary.AUDIT_AREAS.get(event["subject_type"], glossary.words(event["subject_type"])),
            "name": name if isinstance(name, str) else None, "link": link,
            "changes": [] if facts_only else diff(before, after, labels),
            "facts": facts, "retried_as": retried_as}


def retries_marked(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` (:func:`entry`'s) with each schedule's Run now request that a retry of a run
    made (its ``retry_of`` names the retried run, the subject of the ``run.retried`` entry)
    said to be part of that retry: both records stay, the request reads "Run now requested
    (a retry)"."""
    return [{**e, "kind_words": e["kind_words"] + " (a retry)"}
            if e["kind"] == "schedule.run_requested" and (e.get("after") or {}).get("retry_of") else e
            for e in items]


def _entity_labels(ctx: Request, events: list[dict[str, Any]]) -> dict[str, str]:
    """The catalogue's entity labels (``GET /catalogue``) when a query's definition is among
    ``events``; empty otherwise, or when the catalogue does not answer (names are then
    derived, :func:`entity_words`)."""
    if not any(isinstance(e.get(side), dict) and isinstance((e[side].get("definition") or {}), dict)
               and "entity" in (e[side].get("definition") or {}) for e in events for side in ("before", "after")):
        return {}
    reply = ctx.api().call("GET", "/catalogue")
    if reply.status != 200 or not isinstance(reply.body, dict):
        return {}
    return {str(e["name"]): str(e.get("label") or e["name"]) for e in reply.body.get("entities", [])
            if isinstance(e, dict) and "name" in e}


@router.get(f"{PREFIX}/audit")
@signed_in
def audit_log(ctx: Request) -> Response:
    """``GET /console/audit?kind=&actor=&cursor=``: a page of the audit log (``GET
    /audit-events``; the person filter lists the members of ``GET /settings`` by name)."""
    params = ctx.params
    kind, actor, cursor = params.get("kind", ""), params.get("actor", ""), params.get("cursor", "")
    query = {k: v for k, v in (("kind", kind), ("actor", actor), ("cursor", cursor)) if v}
    reply = ctx.api().call("GET", "/audit-events", query={**query, "limit": "50"})
    if reply.status != 200:
        return ctx.api_error(reply)
    people = ctx.api().call("GET", "/settings")
    members = people.body["members"] if people.status == 200 else []
    zone = zone_of(reply.body)
    names = {m["user_id"]: m.get("display_name") for m in members}
    labels = _entity_labels(ctx, reply.body["items"])
    items = [{**e, "name": e["name"] or names.get(e["subject_id"]) or None} if e["subject_type"] == "person" else e
             for e in retries_marked([entry(e, zone, labels) for e in reply.body["items"]])]
    filters = {k: v for k, v in (("kind", kind), ("actor", actor)) if v}

    def link(page_cursor: str | None) -> str | None:
        """The query string of the page at ``page_cursor`` with the same filters."""
        return None if page_cursor is None else urlencode({**filters, "cursor": page_cursor})

    return ctx.page("audit.html", items=items, zone=zone, kinds=KINDS, members=members, kind=kind, actor=actor,
                    older=link(reply.body["older"]), newer=link(reply.body["newer"]))
