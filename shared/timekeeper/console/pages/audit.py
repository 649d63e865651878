"""The workspace admin's audit log page: every change with who, when (the workspace's zone
with UTC beside) and what changed (before and after, field by field), filtered by kind and
person, with Older and Newer links (the API's cursor)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console.context import Request, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX

router = Router()

#: The log's kinds (areas) and how the filter names them.
KINDS = (("settings", "Settings"), ("schedule", "Schedules"), ("delivery", "Deliveries"), ("query", "Queries"),
         ("report", "Reports"), ("closure", "Closures"), ("recipient", "Recipients"), ("opt_out", "Opt-outs"),
         ("staff", "Staff reads and actions"), ("run", "Runs"), ("dead_letter", "Dead letters"))
#: The longest value the page shows in full (longer ones are cut, the rest in the API).
MAX_VALUE = 300


def _shown(value: Any) -> str:
    """A changed field's value as text: plain for scalars, compact JSON otherwise."""
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True,
                                                          separators=(", ", ": "))
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + "…"


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, str]]:
    """The fields of an event, each with its value before and after (``—`` when absent),
    in the order before's then after's own fields."""
    names = list(dict.fromkeys([*before, *after]))
    return [{"field": n, "before": _shown(before.get(n)), "after": _shown(after.get(n)),
             "changed": before.get(n) != after.get(n)} for n in names]


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
    items = [{**e, "when": when(e["at"], zone), "changes": diff(e["before"], e["after"])} for e in reply.body["items"]]
    filters = {k: v for k, v in (("kind", kind), ("actor", actor)) if v}

    def link(page_cursor: str | None) -> str | None:
        """The query string of the page at ``page_cursor`` with the same filters."""
        return None if page_cursor is None else urlencode({**filters, "cursor": page_cursor})

    return ctx.page("audit.html", items=items, zone=zone, kinds=KINDS, members=members, kind=kind, actor=actor,
                    older=link(reply.body["older"]), newer=link(reply.body["newer"]))
