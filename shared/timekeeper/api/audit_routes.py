"""The workspace's audit log, for its admins (``workspace:admin`` by the token and by the
access rule).

* ``GET /audit-events?kind=&actor=&cursor=&limit=``: the workspace's changes newest first
  (:mod:`timekeeper.platform.audit`): who (``actor`` and, when the directory shows them,
  ``actor_name``), when (``at``, UTC; ``timezone`` is the workspace's zone to show it in),
  the kind and the object, the changed fields before and after, and the reason. ``kind``
  filters by area (``settings``, ``schedule``, ``delivery``, ...), ``actor`` by user id.
  ``limit`` <= 100 (50 by default). The page's ``older`` and ``newer`` cursors (null at
  either end) are passed back as ``cursor``; an unknown kind or a cursor this API did not
  return is a 422 naming the field.
"""

import re
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from timekeeper.api import errors
from timekeeper.api.auth import WORKSPACE_ADMIN
from timekeeper.api.errors import ApiError
from timekeeper.api.models import TOKEN_PATTERN, UtcDatetime, rule_description
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform import access, audit
from timekeeper.platform.directory import workspace_timezone
from timekeeper.reporting import message_states
from timekeeper.schedules import operations

MAX_PAGE = 100
#: A cursor: ``o<id>`` (the events older than id) or ``n<id>`` (newer).
_CURSOR = re.compile(r"^([on])([1-9][0-9]{0,17})$")

_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)
Admin = Annotated[WorkspaceScope, Depends(scope_for(WORKSPACE_ADMIN))]
Area = Literal[audit.AREAS]  # type: ignore[valid-type]

router = ApiRouter()


class AuditEventOut(BaseModel):
    """One change in the workspace."""

    id: int
    kind: str = Field(description="<area>.<verb>", examples=["settings.updated", "schedule.updated"])
    actor: str = Field(description="the user id who made the change")
    actor_name: str | None = Field(description="their display name (null: not in the workspace's directory)")
    subject_type: str = Field(examples=["workspace", "schedule", "person"])
    subject_id: str | None
    before: dict[str, Any] = Field(description="the changed fields before")
    after: dict[str, Any] = Field(description="the changed fields after")
    reason: str | None
    at: UtcDatetime
    rules: dict[str, str | None] = Field(default_factory=dict, description="a schedule's rule (``recurrence``) "
                                         "of before and after in words with its zone, by side (``before``, "
                                         "``after``); null: the rule no longer validates; absent: no rule")
    schedule_name: str | None = Field(None, description="the name of the schedule the event's ``schedule_id`` "
                                                        "names (a run's or a dead letter's), null: none or deleted")
    address: str | None = Field(None, description="the address a ``suppression.removed`` event took off the "
                                                  "suppression list (null: another kind, or erased since)")


class AuditPage(BaseModel):
    """A page of the audit log, newest first."""

    items: list[AuditEventOut]
    older: str | None = Field(description="cursor of the next older page (null: none)")
    newer: str | None = Field(description="cursor of the next newer page (null: this is the newest)")
    timezone: str = Field(description="the workspace's zone (instants stay UTC; the zone is for showing them)")


def _parse_cursor(cursor: str | None) -> tuple[int | None, int | None]:
    if cursor is None:
        return None, None
    match = _CURSOR.match(cursor)
    if match is None:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.INVALID_CURSOR, errors.CURSOR_MESSAGE, "cursor")
    value = int(match.group(2))
    return (value, None) if match.group(1) == "o" else (None, value)


@router.get("/audit-events", tags=["audit"], operation_id="listAuditEvents", security=SECURITY,
            summary="The workspace's audit log: every change with who, when and before/after, newest first (admins)",
            responses=_responses(200, "A page of audit events"))
def list_audit_events(scope: Admin,
                      kind: Annotated[Area | None, Query(description="the area of the changes")] = None,
                      actor: Annotated[str | None, Query(min_length=1, max_length=200, pattern=TOKEN_PATTERN,
                                                         description="the user id who made them")] = None,
                      cursor: Annotated[str | None, Query(max_length=20, description="older or newer of a "
                                                                                      "previous page")] = None,
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")] = 50) -> AuditPage:
    before_id, after_id = _parse_cursor(cursor)
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        rows = audit.list_events(conn, workspace_id=scope.workspace_id, area=kind, actor=actor, before_id=before_id,
                                 after_id=after_id, limit=limit + 1)
        zone = workspace_timezone(conn, scope.workspace_id)
        named = operations.schedule_names(conn, sorted({i for e in rows for i in _schedule_ids(e)}))
        addresses = message_states.removal_addresses(conn, workspace_id=scope.workspace_id, ids=[
            int(e.subject_id) for e in rows if e.subject_type == "mail_suppression" and (e.subject_id or "").isdigit()])
    if after_id is not None:
        more_newer, page = len(rows) > limit, rows[-limit:] if len(rows) > limit else rows
        older = f"o{page[-1].id}" if page else None
        newer = f"n{page[0].id}" if more_newer and page else None
    else:
        page = rows[:limit]
        older = f"o{page[-1].id}" if len(rows) > limit else None
        newer = f"n{page[0].id}" if before_id is not None and page else None
    return AuditPage(items=[AuditEventOut(id=e.id, kind=e.kind, actor=e.actor, actor_name=e.actor_name,
                                          subject_type=e.subject_type, subject_id=e.subject_id, before=e.before,
                                          after=e.after, reason=e.reason, at=e.at, rules=_rules(e),
                                          schedule_name=next((named[i]["name"] for i in _schedule_ids(e)
                                                              if i in named), None),
                                          address=addresses.get(int(e.subject_id))
                                          if e.subject_type == "mail_suppression" and (e.subject_id or "").isdigit()
                                          else None) for e in page],
                     older=older, newer=newer, timezone=zone)


def _schedule_ids(event: Any) -> list[UUID]:
    """The schedule ids an event's ``schedule_id`` fields name (a run's or a dead letter's)."""
    ids = []
    for side in (event.before or {}, event.after or {}):
        try:
            ids.append(UUID(str(side["schedule_id"])))
        except (KeyError, ValueError):
            continue
    return ids


def _rules(event: Any) -> dict[str, str | None]:
    """The event's rules in words by side (``before``/``after``), for the sides that hold one."""
    return {side: rule_description(values["recurrence"])
            for side, values in (("before", event.before or {}), ("after", event.after or {}))
            if isinstance(values.get("recurrence"), dict)}


__all__ = ["router"]
