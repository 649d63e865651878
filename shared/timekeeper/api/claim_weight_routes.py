"""Staff's claim weights: each workspace's tier in the dispatcher's fair claim.

=======  ========================================  ======  ==============================================
method   path                                      role    what
=======  ========================================  ======  ==============================================
GET      ``/operations/workspaces``                staff   every workspace's claim weight, by name
                                                           (``search``: a part of the name)
PATCH    ``/operations/workspaces/{workspace_id}``  staff   set a workspace's claim weight (1-10), with a
                                                           reason
=======  ========================================  ======  ==============================================

When one workspace crowds a claim batch, the workspaces with due work share it in
proportion to their weights (default 1: equal shares; docs/architecture.md "The fair
claim"). Staff are the callers holding a staff role (the Platform's ``platform:staff``), the
operations routes' rule (:meth:`~timekeeper.api.scope.StaffScope.of`); anyone else is 403
``forbidden``. A change is made in that workspace (entered on the walled connection) and
recorded in its audit log as ``staff.claim_weight_changed`` with the weight before and after
and the reason (:mod:`timekeeper.platform.claim_weights`), and logged as an ``operations
action``; the answer's ``changed`` is true. Setting the weight a workspace already has is a
200 with ``changed`` false that changes and records nothing (no audit event, no operations
action). An unknown workspace is 404 ``not_found``; a weight that is not a
JSON integer 1-10 (``5`` or ``5.0``, as JSON Schema counts one; ``true``, ``"5"`` and ``2.5``
are refused), or a missing or blank reason, is 422 ``validation_error`` naming
``claim_weight`` or ``reason``.

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from functools import partial
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.request import Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from timekeeper import observability as obs
from timekeeper.api import errors
from timekeeper.api.auth import Identity
from timekeeper.api.errors import ApiError
from timekeeper.api.models import PLAIN_PATTERN, CanonicalUuid
from timekeeper.api.operations_routes import MAX_REASON, REASON_PATTERN
from timekeeper.api.routing import SECURITY, ApiContext, ApiRouter, checked_first
from timekeeper.api.scope import StaffScope, require_staff, staff_scope
from timekeeper.observability import logger, metrics
from timekeeper.platform import claim_weights

_TAGS = ["operations"]

_ERRORS = {
    401: "No or invalid authorizer claims",
    403: "The caller holds no staff role (forbidden), or is not an active member of the token's workspace "
         "(not_a_member, left_workspace, user_deactivated)",
    404: "No such workspace",
    415: "The body is not application/json",
    422: "Invalid input (the field is named)",
}
_responses = partial(errors.responses, texts=_ERRORS)



def _platform_staff_first(identity: Identity, api: ApiContext) -> None:
    """The staff check asked before validation, worded for these routes."""
    try:
        require_staff(identity, api.adapters.snapshot_registry())
    except ApiError as refused:
        raise ApiError(403, errors.FORBIDDEN, "this action needs platform staff (platform:staff)") from refused


@checked_first(_platform_staff_first)
def _platform_staff(request: Request) -> StaffScope:
    """:func:`~timekeeper.api.scope.staff_scope`, its refusal worded for these routes
    (platform staff, not a snapshot type's)."""
    try:
        return staff_scope(request)
    except ApiError as refused:
        if refused.status == 403 and refused.code == errors.FORBIDDEN:
            raise ApiError(403, errors.FORBIDDEN, "this action needs platform staff (platform:staff)") from None
        raise


Staff = Annotated[StaffScope, Depends(_platform_staff)]
_Weight = Annotated[int, Field(ge=claim_weights.MIN_WEIGHT, le=claim_weights.MAX_WEIGHT,
                               description="its share of a crowded claim batch relative to the other workspaces "
                                           "with due work (1-10; 1: an equal share)")]


class WorkspaceWeightOut(BaseModel):
    """A workspace and its claim weight."""

    id: UUID
    name: str
    timezone: str = Field(description="its IANA zone", examples=["Europe/Berlin"])
    status: str = Field(description="the directory's state of the workspace", examples=["active"])
    claim_weight: _Weight


class WorkspaceWeightSet(WorkspaceWeightOut):
    """``PATCH /operations/workspaces/{id}``: the workspace with its weight, and whether it changed."""

    changed: bool = Field(description="false when the workspace already had this weight: nothing was changed "
                                      "or recorded")


class WorkspaceWeightList(BaseModel):
    """``GET /operations/workspaces``: workspaces by name with their claim weights."""

    items: list[WorkspaceWeightOut]


def _json_integer(value: object) -> object:
    """A JSON integer as JSON Schema counts one (a number with no fraction: 5 or 5.0), else
    refused: a boolean, a string or a fraction is not a weight. Raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be a JSON integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a JSON integer")
        return int(value)
    return value


class ClaimWeightChange(BaseModel):
    """The new claim weight and why."""

    model_config = ConfigDict(extra="forbid")

    claim_weight: Annotated[int, Field(ge=claim_weights.MIN_WEIGHT, le=claim_weights.MAX_WEIGHT,
                                       description="its share of a crowded claim batch relative to the other "
                                                   "workspaces with due work (1-10; 1: an equal share); a JSON "
                                                   "integer (5 or 5.0, as JSON Schema counts integers; not true or "
                                                   "\"5\")"),
                            BeforeValidator(_json_integer)]
    reason: str = Field(min_length=1, max_length=MAX_REASON, pattern=REASON_PATTERN,
                        description="why (recorded in the workspace's audit log; not blank)")


#: The claim weight routes (the app's adapters give ``connection()`` and ``now()``).
router = ApiRouter()


def _out(w: claim_weights.WorkspaceWeight) -> WorkspaceWeightOut:
    return WorkspaceWeightOut(id=w.id, name=w.name, timezone=w.timezone, status=w.status,
                              claim_weight=w.claim_weight)


@router.get("/operations/workspaces", tags=_TAGS, operation_id="listClaimWeights", security=SECURITY,
            summary="Staff: every workspace's claim weight (its tier in the fair claim), by name",
            responses=_responses(200, "Workspaces by name"))
def list_weights(
    scope: Staff,
    search: Annotated[str | None, Query(min_length=1, max_length=200, pattern=PLAIN_PATTERN,
                                        description="only workspaces whose name contains this (any case)")] = None,
    limit: Annotated[int, Query(ge=1, le=claim_weights.MAX_LISTED, description="rows")] = 100,
) -> WorkspaceWeightList:
    with scope.conn.transaction():
        rows = claim_weights.staff_weights(scope.conn, search=search, limit=limit)
    return WorkspaceWeightList(items=[_out(w) for w in rows])


@router.patch("/operations/workspaces/<workspace_id>", tags=_TAGS, operation_id="setClaimWeight",
              security=SECURITY, summary="Staff: set a workspace's claim weight, recorded in its audit log",
              responses=_responses(200, "The workspace with its weight (changed false: it already had it)", 404,
                                   415))
def set_weight(scope: Staff, workspace_id: Annotated[CanonicalUuid, Path(description="the workspace")],
               body: Annotated[ClaimWeightChange, Body()]) -> WorkspaceWeightSet:
    with scope.conn.entered(workspace_id), scope.conn.transaction():
        found = claim_weights.set_claim_weight(scope.conn, workspace_id=workspace_id, weight=body.claim_weight,
                                               actor=scope.identity.user_id, reason=body.reason, now=scope.now)
    if found is None:
        raise ApiError(404, errors.NOT_FOUND, "no such workspace")
    workspace, changed = found
    if changed:
        logger.info("operations action", extra={"action": "claim_weight", "actor": scope.identity.user_id,
                                                "workspace_id": str(workspace_id), "claim_weight": body.claim_weight,
                                                "reason": body.reason})
        metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)
    return WorkspaceWeightSet(**_out(workspace).model_dump(), changed=changed)
