"""The workspace's mail suppression list: the addresses its sends skip, and taking one
off it (:mod:`timekeeper.reporting.message_states`).

Routes (:data:`router`; tagged ``opt-outs`` in the document, beside the opt-outs):

* ``GET /mail-suppressions`` (``queries:read``): the workspace's suppression list (the
  addresses later sends skip as ``suppressed``: a permanent bounce or a complaint).
* ``POST /mail-suppressions/removals`` (``workspace:admin``, by the token and by the
  membership, as the other admin routes): take one address off the list, with a reason
  (``address`` compared lower-cased; 404 when it is not on the list, so a second removal
  is a 404 and changes nothing); the removal is recorded and the next send goes out.
  The address travels in the body, not the path: paths land in access logs. The removal
  is also a ``suppression.removed`` event of the workspace's audit log (who, the reason,
  the removal record's id; the log holds no address, ``GET /audit-events`` names it from
  the record while an erasure has not deleted it).
* ``GET /mail-suppressions/removals`` (``workspace:admin``): the removal records, newest
  first (who, when, why, and the suppression as it stood).
"""

from datetime import datetime
from http import HTTPStatus
from typing import Annotated

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import QUERIES_READ, WORKSPACE_ADMIN
from timekeeper.api.errors import ApiError
from timekeeper.api.models import NOT_BLANK_PATTERN, TOKEN_PATTERN
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform import access, audit
from timekeeper.platform.directory import workspace_timezone
from timekeeper.reporting import message_states

_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           422: "Invalid input (the field and the reason)"}


class SuppressionOut(BaseModel):
    """An address the workspace's sends skip: ``reason`` bounced (permanently) | complained."""

    address: str
    reason: str
    provider_message_id: str
    suppressed_at: datetime


class SuppressionList(BaseModel):
    """The workspace's suppression list, oldest first."""

    items: list[SuppressionOut]
    timezone: str = Field(description="the workspace's IANA zone, in which people's times are shown")


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty or only white space")
    return text


#: The most characters a removal's reason holds.
MAX_REMOVAL_REASON = 500
#: A removal page's largest size, and the largest ``before`` (an identity id: at most the
#: largest integer every JSON client holds exactly).
MAX_PAGE, MAX_ID = 100, 2**53 - 1


class SuppressionRemovalIn(BaseModel):
    """``POST /mail-suppressions/removals``: the address to take off the list, and why."""

    model_config = ConfigDict(extra="forbid")

    address: Annotated[str, Field(min_length=3, max_length=320, pattern=TOKEN_PATTERN,
                                  description="the suppressed address (compared lower-cased)")]
    reason: Annotated[str, Field(max_length=MAX_REMOVAL_REASON, pattern=NOT_BLANK_PATTERN,
                                 description="why the address may be sent to again (recorded)"),
                      AfterValidator(_not_blank)]


class SuppressionRemovalOut(BaseModel):
    """An address a workspace admin took off the suppression list: the suppression as it
    stood (``suppression_reason`` bounced | complained, from which message, since when),
    and who removed it, when and why."""

    id: int
    address: str
    suppression_reason: str
    provider_message_id: str
    suppressed_at: datetime
    removed_by: str
    removed_at: datetime
    reason: str


class SuppressionRemovalPage(BaseModel):
    """A page of suppression removals, newest first; pass ``next_before`` as ``before``."""

    items: list[SuppressionRemovalOut]
    next_before: int | None = Field(description="null on the last page")
    timezone: str = Field(description="the workspace's IANA zone, in which people's times are shown")


def _removal_out(r: message_states.SuppressionRemoval) -> SuppressionRemovalOut:
    return SuppressionRemovalOut(**{k: getattr(r, k) for k in SuppressionRemovalOut.model_fields})


Reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]
Admin = Annotated[WorkspaceScope, Depends(scope_for(WORKSPACE_ADMIN))]
BeforeQuery = Annotated[int | None, Query(ge=1, le=MAX_ID, description="next_before of the previous page")]
LimitQuery = Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")]
_TAGS = ["opt-outs"]

router = ApiRouter()


@router.get("/mail-suppressions", tags=_TAGS, operation_id="mailSuppressions", security=SECURITY,
            summary="The addresses the workspace's sends skip (a permanent bounce or a complaint)",
            responses=errors.responses(200, "The suppression list", texts=_ERRORS))
def suppressions(scope: Reader) -> SuppressionList:
    with scope.unit(access.QUERIES_READ) as conn:
        return SuppressionList(items=[
            SuppressionOut(address=s.address, reason=s.reason, provider_message_id=s.provider_message_id,
                           suppressed_at=s.suppressed_at)
            for s in message_states.list_suppressions(conn, workspace_id=scope.workspace_id)],
            timezone=workspace_timezone(conn, scope.workspace_id))


@router.post("/mail-suppressions/removals", tags=_TAGS, operation_id="removeMailSuppression",
             security=SECURITY, summary="Take an address off the suppression list, with a reason (admins; recorded)",
             responses=errors.responses(200, "Removed: the removal record", 404, 415,
                                        texts={**_ERRORS, 404: "The address is not on the suppression list",
                                               415: "The body is not application/json"}))
def remove_suppression(scope: Admin, body: Annotated[SuppressionRemovalIn, Body()]) -> SuppressionRemovalOut:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        removed = message_states.remove_suppression(conn, workspace_id=scope.workspace_id, address=body.address,
                                                    actor=scope.user_id, reason=body.reason, now=scope.now)
        if removed is not None:
            audit.record_event(conn, workspace_id=scope.workspace_id, actor=scope.user_id, kind="suppression.removed",
                               subject_type="mail_suppression", subject_id=str(removed.id), before=None,
                               after={"suppression_reason": removed.suppression_reason}, reason=body.reason,
                               now=scope.now)
    if removed is None:
        raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "this address is not on the suppression list",
                       "address")
    return _removal_out(removed)


@router.get("/mail-suppressions/removals", tags=_TAGS, operation_id="mailSuppressionRemovals",
            security=SECURITY, summary="Addresses taken off the suppression list: who, when, why (admins)",
            responses=errors.responses(200, "A page of removals, newest first", texts=_ERRORS))
def suppression_removals(scope: Admin, before: BeforeQuery = None, limit: LimitQuery = 50) -> SuppressionRemovalPage:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        rows = message_states.list_suppression_removals(conn, workspace_id=scope.workspace_id, before_id=before,
                                                        limit=limit + 1)
        zone = workspace_timezone(conn, scope.workspace_id)
    page = rows[:limit]
    return SuppressionRemovalPage(items=[_removal_out(r) for r in page],
                                  next_before=page[-1].id if len(rows) > limit else None, timezone=zone)


__all__ = ["MAX_REMOVAL_REASON", "router"]
