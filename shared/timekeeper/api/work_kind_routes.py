"""The work kinds the owner modules registered, and the subjects a schedule of one may
name: what a client needs to make a schedule (``POST /schedules``) without knowing an
owner module.

Routes (:data:`router`, tagged ``schedules``; role ``schedules:read``, as the schedules'
reads):

* ``GET /work-kinds``: every registered work kind with its owner, description, whether
  ``POST /schedules`` takes it (``route`` names the route of a kind that has its own)
  and its subject requirement (the noun, whether it is required, whether the owner lists
  candidates).
* ``GET /work-kinds/{owner}/{kind}/subjects``: the caller's workspace's subjects a
  schedule of the kind may name, by name, as the owner's registration lists them
  (:attr:`~timekeeper.schedules.work.SubjectRequirement.candidates`); read on the walled
  connection, so another workspace's subjects are never listed. 404 for an unknown kind
  or one that takes no subject or lists none.

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from functools import partial
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel, Field

from timekeeper.api import errors
from timekeeper.api.auth import READ
from timekeeper.api.errors import ApiError
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.schedules.work import WorkKind

_ERRORS = {401: "No or invalid authorizer claims",
           403: "The caller's roles do not allow this (forbidden), or the caller is not an active member of "
                "the token's workspace (not_a_member, left_workspace, user_deactivated)",
           404: "No such work kind, or it takes no subject the owner lists",
           422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)

Reader = Annotated[WorkspaceScope, Depends(scope_for(READ))]

#: The most subjects one answer lists.
MAX_SUBJECTS = 500


class SubjectNeed(BaseModel):
    """What a work kind's schedule names as its subject."""

    noun: str = Field(description="what the subject is, e.g. recurring batch")
    required: bool = Field(description="false: a schedule may name no subject")
    listed: bool = Field(description="the owner lists the candidates (GET /work-kinds/{owner}/{kind}/subjects)")


class WorkKindOut(BaseModel):
    """A registered work kind."""

    owner: str = Field(description="the owner module (pipeline) of the work")
    kind: str = Field(description="the work kind's name, POST /schedules' work_kind", examples=["batch.roll"])
    description: str
    route: str | None = Field(description="the route that alone makes this kind's schedules (null: POST /schedules)")
    subject: SubjectNeed | None = Field(description="the subject its schedules name (null: none)")


class WorkKindList(BaseModel):
    """Every registered work kind, by owner then name."""

    items: list[WorkKindOut]


class SubjectOut(BaseModel):
    """A subject a schedule may name: POST /schedules' ``subject_id`` and its name."""

    id: UUID
    name: str


class SubjectList(BaseModel):
    """The workspace's subjects a schedule of the kind may name, by name."""

    noun: str
    required: bool
    items: list[SubjectOut]


router = ApiRouter()


def _out(kind: WorkKind) -> WorkKindOut:
    need = kind.subject
    return WorkKindOut(owner=kind.owner, kind=kind.name, description=kind.description, route=kind.route,
                       subject=SubjectNeed(noun=need.noun, required=need.required, listed=need.candidates is not None)
                       if need is not None else None)


@router.get("/work-kinds", tags=["schedules"], operation_id="listWorkKinds", security=SECURITY,
            summary="The registered work kinds with their owner, description and subject requirement",
            responses=_responses(200, "The work kinds, by owner then name"))
def list_work_kinds(scope: Reader) -> WorkKindList:
    kinds = sorted(scope.kinds.kinds() if scope.kinds is not None else [], key=lambda k: (k.owner, k.name))
    return WorkKindList(items=[_out(kind) for kind in kinds])


@router.get("/work-kinds/<owner>/<kind>/subjects", tags=["schedules"], operation_id="listWorkKindSubjects",
            security=SECURITY, summary="The caller's workspace's subjects a schedule of this work kind may name",
            responses=_responses(200, "The subjects, by name", 404))
def list_subjects(
    scope: Reader,
    owner: Annotated[str, Path(max_length=100, description="the owner module")],
    kind: Annotated[str, Path(max_length=100, description="the work kind's name")],
    limit: Annotated[int, Query(ge=1, le=MAX_SUBJECTS, description="the most subjects to list")] = MAX_SUBJECTS,
) -> SubjectList:
    found = scope.kinds.find(owner, kind) if scope.kinds is not None else None
    need = found.subject if found is not None else None
    if need is None or need.candidates is None:
        raise ApiError(404, errors.NOT_FOUND, "no such work kind listing subjects")
    with scope.unit() as conn:
        choices = need.candidates(conn, scope.workspace_id, limit)
    return SubjectList(noun=need.noun, required=need.required,
                       items=[SubjectOut(id=c.id, name=c.name) for c in choices])
