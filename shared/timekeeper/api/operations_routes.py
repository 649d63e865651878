"""The operations routes of the HTTP API: what staff watch and do across every workspace.

=======  ===================================================  ===========  ==========================================
method   path                                                 role         what
=======  ===================================================  ===========  ==========================================
GET      ``/operations/overview``                             staff        paused and failing schedules, runs that
                                                                           wait too long, overdue snapshot periods,
                                                                           the dead-letter queues
POST     ``/operations/dead-letter-queues/{queue}/redrive``   staff        move a dead-letter queue's messages back
                                                                           to its queue, with a reason -> 202
POST     ``/operations/workspaces/{workspace_id}/schedules/   staff        resume a paused schedule of any
         {schedule_id}/resume``                                            workspace, with a reason
POST     ``/operations/erasures``                             staff        erase a person (their address, recipient
                                                                           lists, opt-outs, suppressions) in every
                                                                           workspace, with a reason
POST     ``/operations/member-erasures``                      staff        erase a workspace's member from every
                                                                           snapshot version's rows, with a reason
=======  ===================================================  ===========  ==========================================

Staff are the callers holding a snapshot type's staff role (the Platform's
``platform:staff``), the same rule as the snapshot staff routes
(:meth:`~timekeeper.api.scope.StaffScope.of`); anyone else is 403 ``forbidden``.

The overview reads every workspace through the narrow cross-workspace functions of
:mod:`timekeeper.schedules.operations` (bounded lists; ``limit`` rows of each kind) and each
dead-letter queue's depth and oldest message (:mod:`timekeeper.aws.dead_letters`; the list
is empty when the deployment gives the API no dead-letter queues). The overdue snapshot
periods of every workspace are the planner's rule, read through the narrow function of
migration ``0047`` (:func:`timekeeper.snapshots.ledger.overdue_periods_for_staff`; most
overdue first, ``limit`` of them, with their total count).

Every action is recorded with its actor, reason and instant in the operations actions
(migration ``0038_operations_actions.sql``; the overview lists the latest 20), with a log
line ``operations action`` and the metric ``OperationsActions``; a staff resume is also the
schedule's ``resumed`` history event with the staff member as its actor and the reason.

A redrive of an empty queue is 409 ``empty``; one while a move task of that queue still
runs is 409 ``redrive_running``; an unknown queue is 404 ``not_found``. A resume of a
schedule that no longer validates is 409 ``definition_invalid``; of an ownerless one 409
``ownerless`` (an admin reassigns it first); of an unknown one (or another workspace's id)
404 ``not_found``.
An erasure (:mod:`timekeeper.platform.erasure`) takes the user id in the body, never the
path (paths reach access logs), answers what it removed, and is recorded by the id's
digest; repeating it answers zeros. An id the directory no longer knows is erased all the
same (the platform may have deleted the user first).
A member's erasure (one of a workspace's customers in its business data, whom snapshot
rows name; :func:`timekeeper.platform.erasure.erase_member`) takes the workspace and member
ids in the body, answers the snapshot rows it pseudonymised (0 when repeated) and is
recorded by the member id's digest (``member:sha256:<hex>``).
A malformed body is 422 ``validation_error`` naming the field (``reason`` missing, blank or
over 500 characters; ``user_id`` missing, blank, over 200 characters or with whitespace).

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from datetime import date, datetime
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from timekeeper import observability as obs
from timekeeper.api import errors
from timekeeper.api.errors import ApiError
from timekeeper.api.models import (
    NOT_BLANK_PATTERN,
    PLAIN_PATTERN,
    TOKEN_PATTERN,
    CanonicalUuid,
    ScheduleOut,
    UtcDatetime,
    schedule_out,
)
from timekeeper.api.routing import SECURITY, Api, ApiContext, ApiRouter
from timekeeper.api.scope import StaffScope, staff_scope
from timekeeper.aws.dead_letters import RedriveRefused
from timekeeper.observability import logger, metrics
from timekeeper.platform.erasure import user_digest
from timekeeper.schedules import operations, run_ops
from timekeeper.schedules.recurrence import InvalidRecurrence
from timekeeper.schedules.service import ScheduleNotFound

_TAGS = ["operations"]

#: Reason text: at least one character that is not whitespace, no NUL (PostgreSQL text).
REASON_PATTERN = NOT_BLANK_PATTERN
MAX_REASON = 500
#: A platform user id: no whitespace, no NUL (the directory's ids are opaque strings).
USER_ID_PATTERN = TOKEN_PATTERN
#: A dead-letter queue's name in the path (the topology's names: accounting, exports, ...).
QUEUE_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"


class AttentionScheduleOut(BaseModel):
    """A paused or failing schedule of any workspace."""

    id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    name: str
    status: Literal["active", "paused", "disabled"]
    pause_reason: str | None = Field(examples=["consecutive_failures"])
    consecutive_failures: int = Field(ge=0, description="failed scheduled runs in a row")
    last_outcome: str | None
    last_run_at: UtcDatetime | None
    updated_at: UtcDatetime
    workspace_name: str | None = Field(default=None, description="its workspace's name")
    last_failed_run_id: UUID | None = Field(default=None, description="its latest failed run (null: none)")


class StrandedRunOut(BaseModel):
    """A run that waits too long: ``not_started`` (its message was accepted over a re-offer
    period ago and no consumer started it), ``not_published`` (queued without an accepted
    message for over a re-offer period) or ``lease_expired`` (started; its execution died)."""

    id: UUID
    schedule_id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    state: Literal["queued", "running"]
    why: Literal["not_started", "not_published", "lease_expired"]
    occurrence_at: UtcDatetime
    queued_at: UtcDatetime
    published_at: UtcDatetime | None
    lease_until: UtcDatetime | None
    attempts: int = Field(ge=0)
    offer_count: int = Field(ge=0)
    workspace_name: str | None = Field(default=None, description="its workspace's name")
    schedule_name: str | None = Field(default=None, description="its schedule's name")
    retry_of: UUID | None = Field(default=None, description="the run an operator's Retry now retried to make this "
                                                            "one (null: no retry)")


class DeadLetterQueueOut(BaseModel):
    """A dead-letter queue as read now."""

    name: str = Field(description="its queue's name in the topology", examples=["accounting"])
    messages: int = Field(ge=0, description="messages in it (visible and in flight)")
    oldest_sent_at: UtcDatetime | None = Field(description="the oldest of a sample of up to ten messages "
                                                           "(first sent; null when empty)")
    oldest_age_s: int | None = Field(ge=0, description="seconds since oldest_sent_at")
    redrive_running: bool | None = Field(description="a redrive (move task) still runs; null: cannot tell")


class OverduePeriodOut(BaseModel):
    """A snapshot period of any workspace not published (nor skipped) 24 hours after its
    local month end: the planner's rule, the periods its overdue alarm counts."""

    workspace_id: UUID
    workspace_name: str
    timezone: str = Field(description="the workspace's IANA zone (where its month is)", examples=["Europe/Berlin"])
    owner: str
    snapshot_type: str
    period: date = Field(description="the first day of the workspace-local month")
    status: Literal["missing", "planned", "queued", "running", "retry_wait", "failed"] = Field(
        description="the latest run's state; missing: never planned")
    run_id: UUID | None = Field(description="the latest run (null when missing)")
    version: int | None = Field(ge=1, description="the latest run's version (null when missing)")
    failure_code: str | None = Field(description="the latest run's failure code, if any")
    due_at: UtcDatetime = Field(description="when it became overdue: local month end + 24 hours")
    overdue_hours: float = Field(ge=0, description="hours since due_at at as_of")


class OperationsActionOut(BaseModel):
    """What a staff member did through these routes, with their reason."""

    id: int
    action: Literal["redrive", "resume", "erase", "redrive_message", "delete_message"]
    actor: str
    actor_name: str | None = Field(None, description="the actor's display name (null: the directory names nobody)")
    target: str = Field(description="the dead-letter queue's name (redrive_message, delete_message: "
                                    "<queue>/<message id>), the schedule's id, the erased user id's "
                                    "digest (sha256:<hex>) or the erased member id's (member:sha256:<hex>)")
    reason: str
    detail: dict[str, Any] = Field(description="redrive: task, messages, moved; resume: workspace_id, name; "
                                               "erase: the counts of ErasureOut (a member's: workspace_id, "
                                               "snapshot_rows); redrive_message, delete_message: names (what "
                                               "the message is for), why, receive_count")
    at: UtcDatetime


class OperationsOverview(BaseModel):
    """``GET /operations/overview``: what needs attention in every workspace at ``as_of``,
    and what staff did lately."""

    as_of: UtcDatetime
    schedules: list[AttentionScheduleOut] = Field(description="paused or failing, most recently changed first")
    stranded_runs: list[StrandedRunOut] = Field(description="per pipeline and kind, the longest waiting first")
    dead_letter_queues: list[DeadLetterQueueOut]
    overdue_periods: list[OverduePeriodOut] = Field(description="every workspace's overdue snapshot periods, "
                                                                "most overdue first, at most limit")
    overdue_periods_total: int = Field(ge=0, description="all overdue periods (overdue_periods may show fewer)")
    recent_actions: list[OperationsActionOut] = Field(description="the latest 20 actions, newest first")
    timezone: str = Field("UTC", description="the staff member's own workspace's IANA zone, to show the UTC "
                                             "instants in (each overdue period carries its workspace's)")


class ActionReason(BaseModel):
    """An operations action's reason (recorded with it)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=MAX_REASON, pattern=REASON_PATTERN,
                        description="why (recorded with the action; not blank)")


class ErasureIn(BaseModel):
    """The person to erase and why."""

    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(min_length=1, max_length=200, pattern=USER_ID_PATTERN,
                         description="the platform's user id of the person")
    reason: str = Field(min_length=1, max_length=MAX_REASON, pattern=REASON_PATTERN,
                        description="why (e.g. the request's reference; recorded with the action; not blank)")


class ErasureOut(BaseModel):
    """What an erasure removed, in every workspace (all zeros when repeated)."""

    user_digest: str = Field(description="hex SHA-256 of the user id: how the erasure is recorded")
    recipient_lists: int = Field(ge=0, description="query schedules the person was taken off")
    opt_outs: int = Field(ge=0, description="opt-outs deleted (of schedules' messages and of notice e-mails)")
    delivery_addresses: int = Field(ge=0, description="delivery rows whose address was erased (the rows stay)")
    suppressions: int = Field(ge=0, description="suppression-list entries of the person's addresses and their "
                                                "removal records deleted")
    erased_at: UtcDatetime


class MemberErasureIn(BaseModel):
    """The workspace's member to erase from the snapshot rows, and why."""

    model_config = ConfigDict(extra="forbid")

    workspace_id: CanonicalUuid = Field(description="the member's workspace")
    member_id: CanonicalUuid = Field(description="the member (the business data's member id)")
    reason: str = Field(min_length=1, max_length=MAX_REASON, pattern=REASON_PATTERN,
                        description="why (e.g. the request's reference; recorded with the action; not blank)")


class MemberErasureOut(BaseModel):
    """What a member's erasure changed (0 rows when repeated)."""

    member_digest: str = Field(description="hex SHA-256 of the member id: how the erasure is recorded")
    workspace_id: UUID
    snapshot_rows: int = Field(ge=0, description="snapshot rows whose member and invoice ids were pseudonymised "
                                                 "(every figure kept)")
    erased_at: UtcDatetime


class RedriveOut(BaseModel):
    """A started redrive."""

    queue: str
    task: str = Field(description="SQS's move task handle (or the local stack's id)")
    messages: int = Field(ge=0, description="messages in the dead-letter queue when it started")
    moved: int | None = Field(description="messages moved already (null: SQS moves them in the background)")


_ERRORS = {
    401: "No or invalid authorizer claims",
    403: "The caller holds no staff role (forbidden), or is not an active member of the token's workspace "
         "(not_a_member, left_workspace, user_deactivated)",
    404: "No such queue, schedule or workspace",
    409: "The action does not apply now; the code says why",
    415: "The body is not application/json",
    422: "Invalid input (the field is named)",
}
_responses = partial(errors.responses, texts=_ERRORS)


def depth_out(depth, now: datetime) -> DeadLetterQueueOut:
    """A :class:`~timekeeper.aws.dead_letters.QueueDepth` as the API answers it, its age at ``now`` (aware UTC)."""
    age = None if depth.oldest_sent_at is None else max(0, int((now - depth.oldest_sent_at).total_seconds()))
    return DeadLetterQueueOut(name=depth.name, messages=depth.messages, oldest_sent_at=depth.oldest_sent_at,
                              oldest_age_s=age, redrive_running=depth.redrive_running)


Staff = Annotated[StaffScope, Depends(staff_scope)]
LimitQuery = Annotated[int, Query(ge=1, le=operations.MAX_ROWS, description="rows of each kind")]


def dead_letters_of(api: ApiContext) -> Any:
    """The app's dead-letter queues (:class:`timekeeper.aws.dead_letters.DeadLetterQueues`),
    or None when the app was built without them."""
    return api.adapters.dead_letters() if api.adapters.dead_letters is not None else None


#: The operations routes. The app's adapters (:data:`~timekeeper.api.routing.Api`) give
#: ``connection()``, ``now()``, ``snapshot_registry()`` (whose staff roles make staff)
#: and ``dead_letters()`` (:class:`timekeeper.aws.dead_letters.DeadLetterQueues`; None:
#: no dead-letter queue is listed and a redrive is 404).
router = ApiRouter()


def _names(scope: StaffScope, schedules: list[Any], stranded: list[Any]
           ) -> tuple[dict[UUID, str], dict[UUID, dict[str, Any]]]:
    """The overview's names: workspace id -> name (the staff directory), and schedule id ->
    ``{"name", "last_failed_run_id"}`` and a stranded run's id -> ``{"retry_of"}`` (a run
    Retry now made), read in each workspace in turn."""
    by_workspace: dict[UUID, set[UUID]] = {}
    for row in (*schedules, *stranded):
        by_workspace.setdefault(row.workspace_id, set()).add(getattr(row, "schedule_id", None) or row.id)
    if not by_workspace:
        return {}, {}
    workspaces = {w.id: w.name for w in scope.staff_workspaces(ids=list(by_workspace), limit=len(by_workspace))}
    named: dict[UUID, dict[str, Any]] = {}
    for workspace_id, ids in by_workspace.items():
        runs = [r.id for r in stranded if r.workspace_id == workspace_id]
        with scope.conn.entered(workspace_id), scope.conn.transaction():
            named.update(operations.schedule_names(scope.conn, list(ids)))
            named.update({run_id: {"retry_of": retried}
                          for run_id, retried in run_ops.retries_of(scope.conn, runs).items()})
    return workspaces, named


@router.get("/operations/overview", tags=_TAGS, operation_id="operationsOverview", security=SECURITY,
            summary="Staff: paused and failing schedules, runs that wait too long, dead-letter queues",
            responses=_responses(200, "What needs attention now"))
def overview(
    scope: Staff, api: Api, limit: LimitQuery = 100,
    kind: Annotated[str | None, Query(min_length=1, max_length=100, pattern=TOKEN_PATTERN,
                                      description="only schedules and runs of this work kind")] = None,
    status: Annotated[Literal["active", "paused"] | None, Query(description="only schedules in this status")] = None,
    schedule: Annotated[str | None, Query(min_length=1, max_length=200, pattern=PLAIN_PATTERN,
                                          description="only schedules whose name contains this (any case)")] = None,
    state: Annotated[Literal["queued", "running"] | None, Query(description="only runs in this state")] = None,
) -> OperationsOverview:
    schedules, stranded = scope.operations_overview(limit=limit, kind=kind, status=status, name=schedule, state=state)
    overdue, overdue_total = scope.overdue_periods(limit=limit)
    queues = dead_letters_of(api)
    depths = [depth_out(d, scope.now) for d in queues.depths()] if queues is not None else []
    workspaces, named = _names(scope, schedules, stranded)
    return OperationsOverview(
        as_of=scope.now, dead_letter_queues=depths,
        schedules=[AttentionScheduleOut(**vars(s), workspace_name=workspaces.get(s.workspace_id),
                                        last_failed_run_id=named.get(s.id, {}).get("last_failed_run_id"))
                   for s in schedules],
        stranded_runs=[StrandedRunOut(**vars(r), workspace_name=workspaces.get(r.workspace_id),
                                      schedule_name=named.get(r.schedule_id, {}).get("name"),
                                      retry_of=named.get(r.id, {}).get("retry_of")) for r in stranded],
        overdue_periods=[OverduePeriodOut(**vars(p), overdue_hours=p.overdue_hours(scope.now)) for p in overdue],
        overdue_periods_total=overdue_total,
        recent_actions=[OperationsActionOut(**vars(a)) for a in scope.recent_actions(limit=20)],
        timezone=scope.own_zone())


@router.post("/operations/dead-letter-queues/<queue>/redrive", tags=_TAGS, operation_id="redriveDeadLetters",
             security=SECURITY, summary="Staff: move a dead-letter queue's messages back to its queue, with a reason",
             responses=_responses(202, "Started (locally: done)", 404, 409, 415))
def redrive(scope: Staff, api: Api, queue: Annotated[str, Path(pattern=QUEUE_PATTERN, max_length=64)],
            body: Annotated[ActionReason, Body()]) -> Response[RedriveOut]:
    queues = dead_letters_of(api)
    if queues is None or queue not in queues.names():
        raise ApiError(404, errors.NOT_FOUND, f"no dead-letter queue named {queue}")
    try:
        started = queues.redrive(queue)
    except RedriveRefused as refused:
        raise ApiError(409, refused.reason, str(refused)) from None
    scope.record_action(action="redrive", target=queue, reason=body.reason,
                        detail={"task": started.task, "messages": started.messages, "moved": started.moved})
    logger.info("operations action", extra={"action": "redrive", "actor": scope.identity.user_id,
                                            "queue": queue, "reason": body.reason, "task": started.task,
                                            "messages": started.messages, "moved": started.moved})
    metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=RedriveOut(queue=queue, task=started.task, messages=started.messages,
                                    moved=started.moved))


@router.post("/operations/workspaces/<workspace_id>/schedules/<schedule_id>/resume", tags=_TAGS,
             operation_id="staffResumeSchedule", security=SECURITY,
             summary="Staff: resume a paused schedule of any workspace, with a reason",
             responses=_responses(200, "The active schedule", 404, 409, 415))
def staff_resume(scope: Staff, workspace_id: Annotated[CanonicalUuid, Path(description="the workspace")],
                 schedule_id: Annotated[CanonicalUuid, Path(description="the schedule")],
                 body: Annotated[ActionReason, Body()]) -> ScheduleOut:
    try:
        resumed = scope.resume_schedule(workspace_id, schedule_id, reason=body.reason)
    except ScheduleNotFound:
        raise ApiError(404, errors.NOT_FOUND, "no such schedule") from None
    except InvalidRecurrence as error:
        raise ApiError(409, errors.DEFINITION_INVALID, f"the saved rule no longer validates: {error.reason}; "
                       "its owner must update the recurrence first", "recurrence") from None
    logger.info("operations action", extra={"action": "resume", "actor": scope.identity.user_id,
                                            "workspace_id": str(workspace_id), "schedule_id": str(schedule_id),
                                            "reason": body.reason})
    metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)
    return schedule_out(resumed)


@router.post("/operations/erasures", tags=_TAGS, operation_id="erasePerson", security=SECURITY,
             summary="Staff: erase a person's address, recipient lists, opt-outs and suppressions everywhere",
             responses=_responses(200, "What the erasure removed", 415))
def erase(scope: Staff, body: Annotated[ErasureIn, Body()]) -> ErasureOut:
    erased = scope.erase_person(body.user_id, reason=body.reason)
    logger.info("operations action", extra={"action": "erase", "actor": scope.identity.user_id,
                                            "user_digest": erased.user_digest, "reason": body.reason,
                                            "recipient_lists": erased.recipient_lists,
                                            "delivery_addresses": erased.delivery_addresses})
    metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)
    return ErasureOut(**vars(erased), erased_at=scope.now)


@router.post("/operations/member-erasures", tags=_TAGS, operation_id="eraseMember", security=SECURITY,
             summary="Staff: erase a workspace's member from every snapshot version's rows",
             responses=_responses(200, "What the erasure changed", 404, 415))
def erase_member(scope: Staff, body: Annotated[MemberErasureIn, Body()]) -> MemberErasureOut:
    changed = scope.erase_member(body.workspace_id, body.member_id, reason=body.reason)
    digest = user_digest(str(body.member_id))
    logger.info("operations action", extra={"action": "erase", "actor": scope.identity.user_id,
                                            "member_digest": digest, "workspace_id": str(body.workspace_id),
                                            "reason": body.reason, "snapshot_rows": changed})
    metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)
    return MemberErasureOut(member_digest=digest, workspace_id=body.workspace_id, snapshot_rows=changed,
                            erased_at=scope.now)
