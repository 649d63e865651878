"""What the making of a delivery needs besides the delivery itself: the workspace's members
to pick recipients from, the access rule asked for one candidate recipient, and the
message a draft would send.

Routes (:data:`router`), each ``queries:write`` by the token and by the access rule (the
people who may make deliveries):

* ``GET /members``: the workspace's current members who are active users, by display
  name (``limit`` <= 200, 50 by default; opaque ``cursor``): user id, display name and
  address.
* ``POST /query-schedules/recipient-check``: may this person be a recipient of a delivery
  of this source? The access rule the saving applies (a current, active member allowed to
  read the query or the report now): ``allowed`` and, when not, the rule's ``reason`` and a
  ``message`` naming the person. A source not in the workspace is a 422 naming
  ``source.*``.
* ``POST /query-schedules/rule-preview``: ``POST /rules/preview`` for the people who make
  deliveries (whose roles need not include ``schedules:read``): an unsaved rule in words
  with its next occurrences, as a delivery's rule is saved.
* ``POST /query-schedules/message-preview``: the message a chosen member would receive
  from a delivery not saved yet (its source, format, name, templates and link lifetime),
  composed by the delivery's own code with stand-in links; nothing is written. The
  caller must be allowed to read the source (403 with the rule's reason).
"""

import base64
import binascii
import json
import os
from functools import partial
from http import HTTPStatus
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import QUERIES_WRITE
from timekeeper.api.delivery_routes import (
    PREVIEW_BASE_URL,
    MessagePreviewOut,
    SourceIn,
    _Hours,
    _Name,
    _Text,
)
from timekeeper.api.errors import ApiError
from timekeeper.api.models import (
    TOKEN_PATTERN,
    RulePreview,
    RulePreviewRequest,
    change_days_out,
    check_rule_shape,
    occurrences_out,
)
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform import access
from timekeeper.platform.directory import list_members
from timekeeper.reporting import delivery_preview
from timekeeper.reporting.delivery_store import contacts
from timekeeper.reporting.query_schedules import Source, check_recipient, draft_settings
from timekeeper.schedules.change_days import change_days
from timekeeper.settings import DOWNLOAD_BASE_URL_VARIABLE

#: The largest page of ``GET /members``.
MAX_MEMBERS_PAGE = 200
#: A members cursor: base64url of the previous page's last ``[display_name, user_id]``.
MEMBERS_CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,1200}={0,2}$"

_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           404: "No such object in the caller's workspace",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)
Writer = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_WRITE))]
_UserId = Annotated[str, Field(min_length=1, max_length=200, pattern=TOKEN_PATTERN)]

router = ApiRouter()


class MemberOut(BaseModel):
    """A member one may pick as a recipient."""

    user_id: str
    display_name: str
    email: str | None = Field(description="their address (null: none on file; a delivery would skip them)")


class MemberPage(BaseModel):
    """A page of the workspace's members, by display name; pass ``next_cursor`` as
    ``cursor`` for the next."""

    items: list[MemberOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")


class RecipientCheckIn(BaseModel):
    """A candidate recipient of a delivery of ``source``."""

    model_config = ConfigDict(extra="forbid")

    source: SourceIn
    user_id: _UserId


class RecipientCheckOut(BaseModel):
    """The access rule's answer for a candidate recipient: ``allowed``, or the rule's
    ``reason`` (not_a_member, left_workspace, user_deactivated, missing_role, not_found)
    with a ``message`` naming them."""

    user_id: str
    display_name: str | None = Field(description="their display name (null: not in the directory)")
    email: str | None = Field(None, description="their address (null: none, so a run sends them nothing)")
    allowed: bool
    reason: str | None
    message: str | None


class DraftPreviewIn(BaseModel):
    """A delivery not saved yet and the member whose message to compose."""

    model_config = ConfigDict(extra="forbid")

    source: SourceIn
    format: Literal["csv", "xlsx", "pdf"] | None = None
    name: _Name
    subject_template: _Text
    body_template: Annotated[str, Field(min_length=1, max_length=20000)]
    link_ttl_hours: _Hours = 168
    user_id: _UserId


def _decode(cursor: str | None) -> tuple[str, str] | None:
    if not cursor:
        return None
    try:
        name, user_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(name, str) and isinstance(user_id, str):
            return name, user_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.INVALID_CURSOR, "not a cursor this listing gave",
                   "cursor")


def _encode(name: str, user_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([name, user_id]).encode()).decode()


def _source(body: SourceIn) -> Source:
    return Source(body.kind, query_id=body.query_id, query_version=body.query_version, report_id=body.report_id)


@router.get("/members", tags=["members"], operation_id="listMembers", security=SECURITY,
            summary="The workspace's current members to pick recipients from (by display name; cursor pagination)",
            responses=_responses(200, "A page of members"))
def members(
    scope: Writer,
    limit: Annotated[int, Query(ge=1, le=MAX_MEMBERS_PAGE, description="page size")] = 50,
    cursor: Annotated[str | None, Query(pattern=MEMBERS_CURSOR_PATTERN,
                                        description="next_cursor of the previous page")] = None,
) -> MemberPage:
    after = _decode(cursor)
    with scope.unit(access.QUERIES_WRITE) as conn:
        rows = list_members(conn, workspace_id=scope.workspace_id, after=after, limit=limit + 1)
    page, more = rows[:limit], len(rows) > limit
    return MemberPage(items=[MemberOut(user_id=m.user_id, display_name=m.display_name, email=m.email) for m in page],
                      next_cursor=_encode(page[-1].display_name, page[-1].user_id) if more else None)


@router.post("/query-schedules/recipient-check", tags=["query schedules"], operation_id="checkDeliveryRecipient",
             security=SECURITY, summary="Whether a person may be a recipient of a delivery of a source (the access "
                                        "rule the saving applies)",
             responses=_responses(200, "The access rule's answer", 415))
def recipient_check(scope: Writer, body: Annotated[RecipientCheckIn, Body()]) -> RecipientCheckOut:
    with scope.unit(access.QUERIES_WRITE) as conn:
        decision = check_recipient(conn, workspace_id=scope.workspace_id, source=_source(body.source),
                                   user_id=body.user_id)
        contact = contacts(conn, [body.user_id]).get(body.user_id) or {}
    name, email = contact.get("display_name") or None, contact.get("email") or None
    if decision:
        return RecipientCheckOut(user_id=body.user_id, display_name=name, email=email, allowed=True, reason=None,
                                 message=None)
    who = f"{name} ({body.user_id})" if name else body.user_id
    return RecipientCheckOut(user_id=body.user_id, display_name=name, email=email, allowed=False,
                             reason=decision.reason,
                             message=access.refusal_sentence(who, decision.reason, body.source.kind))


@router.post("/query-schedules/message-preview", tags=["query schedules"], operation_id="draftMessagePreview",
             security=SECURITY, summary="The message a member would receive from a delivery not saved yet "
                                        "(nothing is sent or written)",
             responses=_responses(200, "The composed message", 415))
def draft_preview(scope: Writer, body: Annotated[DraftPreviewIn, Body()]) -> MessagePreviewOut:
    with scope.unit(access.QUERIES_WRITE) as conn:
        draft = draft_settings(conn, workspace_id=scope.workspace_id, actor=scope.user_id,
                               source=_source(body.source), fmt=body.format, name=body.name,
                               subject_template=body.subject_template, body_template=body.body_template,
                               link_ttl_hours=body.link_ttl_hours, now=scope.now)
        base = os.environ.get(DOWNLOAD_BASE_URL_VARIABLE) or PREVIEW_BASE_URL
        preview = delivery_preview.preview_draft_message(conn, draft, user_id=body.user_id, now=scope.now,
                                           base_url=base if base.endswith("/") else base + "/")
    return MessagePreviewOut(user_id=preview.user_id, recipient_name=preview.recipient_name,
                             skip_reason=preview.skip_reason, subject=preview.message.subject,
                             html=preview.message.html, text=preview.message.text,
                             link_expires_at=preview.link_expires_at, timezone=preview.timezone)


@router.post("/query-schedules/rule-preview", tags=["query schedules"], operation_id="deliveryRulePreview",
             security=SECURITY, summary="A delivery's unsaved rule in words with its next occurrences (nothing is "
                                        "saved)",
             responses=_responses(200, "The rule in words and its next occurrences", 415))
def rule_preview(scope: Writer, body: Annotated[RulePreviewRequest, Body()]) -> RulePreview:
    check_rule_shape(body.recurrence)
    scope.check_access(access.QUERIES_WRITE)
    rule, description, upcoming = scope.preview(body.recurrence, count=body.count)
    zone = rule.timezone or "UTC"
    return RulePreview(description=description, timezone=zone, warnings=list(rule.warnings),
                       recurrence=rule.rule, next_occurrences=occurrences_out(upcoming, rule.timezone),
                       change_days=change_days_out(change_days(rule, scope.now), zone))


__all__ = ["router"]
