"""The schedule owners' routes: list, create, read, change, pause, resume, delete and run
the workspace's schedules (:mod:`timekeeper.schedules.service` through
:class:`~timekeeper.api.scope.WorkspaceScope`, walled by the tenant rule).

Roles: ``schedules:read`` (list, get, and the preview of an unsaved rule: ``POST
/rules/preview``), ``schedules:write`` (create, update, pause, resume, delete),
``schedules:run`` (Run now); ``schedules:admin`` all. Another workspace's
schedule, and a schedule of a work kind with a route of its own (``queries.deliver``:
``/query-schedules``), is a 404; ``GET /schedules/{id}`` of a deleted schedule of the
caller's workspace is a 410 ``schedule_deleted`` (:mod:`timekeeper.api.deleted`).

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from datetime import date, datetime
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from timekeeper.api import deleted, errors
from timekeeper.api.auth import ADMIN, READ, RUN, WRITE
from timekeeper.api.errors import ApiError
from timekeeper.api.models import (
    CLOSURE_YEARS,
    CURSOR_PATTERN,
    DATE_PATTERN,
    PLAIN_PATTERN,
    TOKEN_PATTERN,
    CanonicalUuid,
    ChangeDayOut,
    ClosureChange,
    ClosureIn,
    ClosureList,
    OwnerName,
    RulePreview,
    RunAccepted,
    ScheduleCreateBase,
    ScheduleDetail,
    ScheduleOut,
    SchedulePage,
    ScheduleRulePreviewRequest,
    ScheduleStatus,
    ScheduleUpdate,
    change_days_out,
    check_rule_shape,
    closure_out,
    decode_cursor,
    detail_out,
    encode_cursor,
    occurrences_out,
    schedule_out,
)
from timekeeper.api.routing import SECURITY, ApiRouter, idempotency_header, with_annotations
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform.directory import display_names
from timekeeper.schedules import run_ops
from timekeeper.schedules.change_days import change_days
from timekeeper.schedules.recurrence import InvalidRecurrence, parse_rule
from timekeeper.schedules.service import ScheduleNotFound
from timekeeper.topology import pipeline_for_owner

_ERRORS = {401: "No or invalid authorizer claims",
           403: "The caller's roles do not allow this (forbidden), or the caller is not an active member of "
                "the token's workspace (not_a_member, left_workspace, user_deactivated)",
           404: "No such schedule in the caller's workspace", 409: "The action conflicts with the schedule's state",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)

ScheduleId = Annotated[CanonicalUuid, Path(description="the schedule's id")]


Reader = Annotated[WorkspaceScope, Depends(scope_for(READ))]
Writer = Annotated[WorkspaceScope, Depends(scope_for(WRITE))]
Runner = Annotated[WorkspaceScope, Depends(scope_for(RUN))]
Admin = Annotated[WorkspaceScope, Depends(scope_for(ADMIN))]

#: The ``/schedules``, ``/rules/preview`` and ``/closures`` routes but ``POST /schedules``
#: (:func:`create_router`).
router = ApiRouter()

@router.get("/schedules", tags=["schedules"], operation_id="listSchedules", security=SECURITY,
            summary="List the workspace's schedules (filter by owner module, work kind, status and name; cursor "
                    "pagination)",
            responses=_responses(200, "A page of schedules, oldest first"))
def list_schedules(
    scope: Reader,
    owner: Annotated[OwnerName | None, Query(description="only this owner module's schedules")] = None,
    status: Annotated[ScheduleStatus | None, Query(description="only schedules in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="page size")] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                        description="next_cursor of the previous page")] = None,
    kind: Annotated[str | None, Query(min_length=1, max_length=100, pattern=TOKEN_PATTERN,
                                      description="only schedules of this work kind")] = None,
    name: Annotated[str | None, Query(min_length=1, max_length=200, pattern=PLAIN_PATTERN,
                                      description="only schedules whose name contains this (any case)")] = None,
) -> SchedulePage:
    page = scope.list(owner=owner, status=status, after=decode_cursor(cursor), limit=limit, work_kind=kind,
                      name=name)
    return SchedulePage(items=[schedule_out(r) for r in page.rows], next_cursor=encode_cursor(page.next_after),
                        timezone=scope.zone())


@router.get("/schedules/<schedule_id>", tags=["schedules"], operation_id="getSchedule", security=SECURITY,
            summary="A schedule with its latest run, next 5 occurrences (UTC and local) and history",
            responses={**_responses(200, "The schedule", 404), **errors.GONE_DOCS})
def get_schedule(
    scope: Reader, schedule_id: ScheduleId,
    history_limit: Annotated[int, Query(ge=1, le=200, description="runs and events to return")] = 50,
    upcoming: Annotated[int, Query(ge=1, le=50, description="next occurrences to return")] = 5,
) -> ScheduleDetail:
    try:
        details = scope.details(schedule_id, history_limit=history_limit, upcoming=upcoming)
    except ScheduleNotFound:
        with scope.unit() as conn:
            deleted.raise_if_deleted(conn, scope.workspace_id, schedule_id, kinds=scope.kinds, route=None)
        raise
    detail = detail_out(details)
    if details.schedule.status == "active" and details.description is not None:
        detail.change_days = _saved_change_days(details.schedule, scope.now)
    _mark_stuck(detail, details, scope.now)
    detail.timezone = scope.zone()
    people = sorted({p for p in (detail.schedule.created_by, detail.changed_by,
                                 *(r.requested_by for r in detail.history.runs),
                                 *(e.actor for e in detail.history.events)) if p})
    with scope.unit() as conn:
        detail.names = display_names(conn, people)
    return detail


def _mark_stuck(detail: ScheduleDetail, details: Any, now: datetime) -> None:
    """Give each queued or running run of ``detail`` (``details``' runs, in the same order)
    that waits too long at ``now`` its ``stuck`` (the operations overview's definition, as
    ``GET /runs/{id}`` says it), so a page that shows the runs needs no call per run."""
    try:
        pipeline = pipeline_for_owner(details.schedule.owner)
    except KeyError:
        return
    for out, row in zip(detail.history.runs, details.runs, strict=True):
        if row.state in ("queued", "running"):
            out.stuck = run_ops.stuck_why({k: getattr(row, k) for k in run_ops.STUCK_FIELDS},
                                          reoffer_after=pipeline.reoffer_after, now=now)


def _saved_change_days(schedule: Any, now: datetime) -> list[ChangeDayOut]:
    """A saved schedule's change days (:func:`change_days` with its id: windowed occurrences
    have their ``due_at``); none when its rule no longer validates."""
    try:
        rule = parse_rule(schedule.recurrence)
    except InvalidRecurrence:
        return []
    return change_days_out(change_days(rule, now, schedule.id), rule.timezone or "UTC")


@router.post("/rules/preview", tags=["schedules"], operation_id="previewRule", security=SECURITY,
             summary="An unsaved rule in words with its next occurrences (local, UTC, DST markers); checked as a "
                     "create checks it",
             responses=_responses(200, "The rule in words and its next occurrences", 404, 415))
def preview_rule(scope: Reader, body: Annotated[ScheduleRulePreviewRequest, Body()]) -> RulePreview:
    check_rule_shape(body.recurrence)
    schedule_id = body.schedule_id
    rule, description, upcoming = scope.preview(body.recurrence, count=body.count, schedule_id=schedule_id)
    zone = rule.timezone or "UTC"
    return RulePreview(description=description, timezone=zone, warnings=list(rule.warnings),
                       recurrence=rule.rule, next_occurrences=occurrences_out(upcoming, rule.timezone),
                       change_days=change_days_out(change_days(rule, scope.now, schedule_id), zone))


@router.patch("/schedules/<schedule_id>", tags=["schedules"], operation_id="updateSchedule",
              security=SECURITY,
              summary="Change the definition (recomputes the next due instant from now; no backlog), or which "
                      "failures the owner is told of",
              responses=_responses(200, "The updated schedule", 404, 415))
def update_schedule(scope: Writer, schedule_id: ScheduleId,
                    body: Annotated[ScheduleUpdate, Body()]) -> ScheduleOut:
    if body.recurrence is not None:
        check_rule_shape(body.recurrence)
    return schedule_out(scope.update(schedule_id, recurrence=body.recurrence, name=body.name,
                                     subject_id=body.subject_id, notify_on=body.notify_on))


@router.post("/schedules/<schedule_id>/pause", tags=["schedules"], operation_id="pauseSchedule",
             security=SECURITY, summary="Pause (idempotent)", responses=_responses(200, "The paused schedule", 404))
def pause_schedule(scope: Writer, schedule_id: ScheduleId) -> ScheduleOut:
    return schedule_out(scope.pause(schedule_id))


@router.post("/schedules/<schedule_id>/resume", tags=["schedules"], operation_id="resumeSchedule",
             security=SECURITY, summary="Resume from now (resets the failure streak; no backlog run)",
             responses=_responses(200, "The active schedule", 404, 409))
def resume_schedule(scope: Writer, schedule_id: ScheduleId) -> ScheduleOut:
    try:
        return schedule_out(scope.resume(schedule_id))
    except InvalidRecurrence as error:
        raise ApiError(409, errors.DEFINITION_INVALID, f"the saved rule no longer validates: {error.reason}; "
                       "update the recurrence first", "recurrence") from None


@router.delete("/schedules/<schedule_id>", tags=["schedules"], operation_id="deleteSchedule",
               security=SECURITY, summary="Delete (runs and history are kept for audit)",
               responses=_responses(204, "Deleted", 404))
def delete_schedule(scope: Writer, schedule_id: ScheduleId) -> Response[None]:
    scope.delete(schedule_id)
    return Response(status_code=HTTPStatus.NO_CONTENT, content_type=None, body=None)


@router.post("/schedules/<schedule_id>/run", tags=["schedules"], operation_id="runScheduleNow",
             security=SECURITY, summary='"Run now": commit a manual run, then offer it to the queue',
             responses=_responses(202, "Accepted: the run is queued", 404, 409,
                                  texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT}))
def run_now(
    scope: Runner, schedule_id: ScheduleId,
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key returns the same run")] = None,
) -> Response[RunAccepted]:
    run_id, created = scope.run_now(schedule_id, idempotency_key=scope.claim_key(idempotency_key))
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=RunAccepted(run_id=run_id, schedule_id=schedule_id, created=created))

ClosedOn = Annotated[str, Path(pattern=DATE_PATTERN, description="the closed local date YYYY-MM-DD")]

@router.get("/closures", tags=["schedules"], operation_id="listClosures", security=SECURITY,
            summary="The workspace's closures: local dates its business-day rules skip",
            responses=_responses(200, "The closures, by date"))
def list_closures(scope: Reader) -> ClosureList:
    return ClosureList(items=[closure_out(row) for row in scope.closures()], timezone=scope.zone())


@router.post("/closures", tags=["schedules"], operation_id="addClosure", security=SECURITY,
             summary="Close a local date (idempotent): the workspace's business-day schedules are recomputed, "
                     "each with a holidays_changed history event",
             responses={**_responses(201, "Closed", 415),
                        200: {"description": "Already closed: the first closure is kept"}})
def add_closure(scope: Admin, body: Annotated[ClosureIn, Body()]) -> Response[ClosureChange]:
    closed_on = _local_date(body.date, "date")
    today = scope.now.date()
    if not _years_from(today, -CLOSURE_YEARS) <= closed_on <= _years_from(today, CLOSURE_YEARS):
        raise ApiError(422, errors.VALIDATION_ERROR, f"must be within {CLOSURE_YEARS} years of today", "date")
    added, recomputed = scope.add_closure(closed_on, body.reason)
    if added is None:
        existing = next(row for row in scope.closures() if row.closed_on == closed_on)
        return Response(status_code=HTTPStatus.OK, content_type=content_types.APPLICATION_JSON,
                        body=ClosureChange(closure=closure_out(existing), changed=False, schedules_recomputed=0))
    return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                    body=ClosureChange(closure=closure_out(added), changed=True, schedules_recomputed=recomputed))


@router.delete("/closures/<closed_on>", tags=["schedules"], operation_id="removeClosure",
               security=SECURITY, summary="Reopen a closed date: the business-day schedules are recomputed",
               responses=_responses(200, "Reopened", 404, texts={**_ERRORS, 404: "The date is not closed"}))
def remove_closure(scope: Admin, closed_on: ClosedOn) -> ClosureChange:
    removed, recomputed = scope.remove_closure(_local_date(closed_on, "closed_on"))
    if removed is None:
        raise ApiError(404, errors.NOT_FOUND, "this date is not closed in this workspace")
    return ClosureChange(closure=closure_out(removed), changed=True, schedules_recomputed=recomputed)


def create_schedule(
    scope: Writer, body: Annotated[ScheduleCreateBase, Body()],
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key answers what the first request answered")] = None,
) -> Response[ScheduleOut]:
    """Create a schedule of the caller's workspace (``body``'s type is the app's: see
    :func:`create_router`); 201 with ``Location``, or what the first request with the same
    Idempotency-Key answered."""
    check_rule_shape(body.recurrence)

    def create() -> Response:
        row = scope.create(owner=body.owner, work_kind=body.work_kind, recurrence=body.recurrence,
                           subject_id=body.subject_id, name=body.name, active=body.active,
                           notify_on=body.notify_on)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=schedule_out(row), headers={"Location": f"/schedules/{row.id}"})

    return scope.create_once(idempotency_key, body, create)


def create_router(body: Any) -> ApiRouter:
    """The router of ``POST /schedules`` whose body type is ``body`` (the owners' work
    kinds of the app's registry: :func:`timekeeper.api.models.schedule_create_model`)."""
    created = ApiRouter()
    created.post("/schedules", tags=["schedules"], operation_id="createSchedule", security=SECURITY,
                   summary="Create a schedule (the recurrence is validated; the owner's work kind must exist; a kind "
                           "with a route of its own, queries.deliver, is refused: use /query-schedules)",
                   responses=_responses(201, "Created", 409, 415, texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT},
                                        headers=errors.CREATED_ONCE))(
          with_annotations(create_schedule, body=Annotated[body, Body()]))
    return created


def _years_from(day: date, years: int) -> date:
    """``day`` moved by ``years`` (29 February to the 28th in a common year)."""
    try:
        return day.replace(year=day.year + years)
    except ValueError:
        return day.replace(year=day.year + years, day=28)


def _local_date(text: str, field: str) -> date:
    """A ``YYYY-MM-DD`` text as a date; a 422 naming ``field`` for one the calendar lacks (2027-02-30)."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ApiError(422, errors.VALIDATION_ERROR, "must be a real calendar date YYYY-MM-DD", field) from None
