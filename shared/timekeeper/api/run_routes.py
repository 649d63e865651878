"""A run's own page and the operators' actions on it.

=======  ==============================  ================================  ==========================================
method   path                            role                              what
=======  ==============================  ================================  ==========================================
GET      ``/runs?state=failed``          schedules:read, or staff          the failed runs of the caller's own
                                                                           workspace, newest first (``since``,
                                                                           ``limit``, ``cursor``), each with the run
                                                                           its Retry now made
GET      ``/runs/{run_id}``              schedules:read, or staff          the run: its schedule, trigger, occurrence
                                                                           (local with its DST mark, and UTC), state,
                                                                           outcome, attempts, skipped backlog, message
                                                                           id, history events and operators' actions
POST     ``/runs/{run_id}/retry``        schedules:run, or staff           a manual run of the same schedule now
                                                                           (Run now's path), with a reason -> 202
POST     ``/runs/{run_id}/cancel``       schedules:admin, or staff         cancel a queued run, with a reason
POST     ``/runs/{run_id}/fail``         schedules:admin, or staff         settle a stuck run as failed, with a reason
=======  ==============================  ================================  ==========================================

A caller with a workspace role sees and acts on their own workspace's runs: another
workspace's run id is 404 ``not_found``. Staff (a snapshot type's staff role, the
operations routes' rule, :meth:`~timekeeper.api.scope.StaffScope.of`) open and act on a
run of any workspace: its workspace is found through the narrow function of migration
``0064`` and entered; reading another workspace's run is recorded in that workspace's
staff reads (:func:`timekeeper.platform.audit.record_staff_read`, ``what`` = ``run``).
Every action is recorded with its actor, reason (trimmed) and instant beside the run
(:func:`timekeeper.schedules.run_ops.record_operator_action`), and logged as
``operations action``.

Refusals: a retry of a work kind with a route of its own (``queries.deliver``: its route
checks more before it runs one) is 409 ``retry_not_allowed``; a cancel of a run that is
not queued 409 ``not_queued``; a settle of a run that is not stuck (the operations
overview's definition) 409 ``not_stuck``. A missing, blank or invisible ``reason`` is 422
``validation_error`` naming ``reason``.

Idempotency-Key: a retry with a key repeated returns the first retry's run (``created``
false, header ``Idempotent-Replayed: true``); a cancel or settle repeated with the key of
the one that was recorded answers it again instead of 409.

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from dataclasses import dataclass
from datetime import datetime
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.request import Request
from pydantic import AwareDatetime, BaseModel, Field

from timekeeper import observability as obs
from timekeeper.api import errors
from timekeeper.api.auth import ADMIN, READ, RUN, Identity
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import ApiError
from timekeeper.api.models import CURSOR_PATTERN, CanonicalUuid, RunState, UtcDatetime, decode_cursor, encode_cursor
from timekeeper.api.operations_routes import ActionReason
from timekeeper.api.routing import SECURITY, ApiRouter, api_context, idempotency_header
from timekeeper.api.scope import caller_identity, claim_key, staff_roles
from timekeeper.db.keyset import split_page
from timekeeper.observability import logger, metrics
from timekeeper.platform import audit
from timekeeper.platform.directory import display_names, get_workspace, workspace_timezone
from timekeeper.schedules import run_ops, service
from timekeeper.schedules.work import OwnRouteOnly
from timekeeper.topology import pipeline_for_owner

_TAGS = ["runs"]
_ERRORS = {
    401: "No or invalid authorizer claims",
    403: "The caller's roles do not allow this (forbidden), or the caller is not an active member of the token's "
         "workspace (not_a_member, left_workspace, user_deactivated)",
    404: "No such run in the caller's workspace (staff: in any workspace)",
    409: "The action does not apply to the run now (retry_not_allowed, not_queued, not_stuck), or the "
         "Idempotency-Key names another request (idempotency_key_reused)",
    415: "The body is not application/json",
    422: "Invalid input (the field is named)",
}
_responses = partial(errors.responses, texts=_ERRORS)
RunId = Annotated[CanonicalUuid, Path(description="the run's id")]
IdempotencyKey = Annotated[str | None, idempotency_header("repeat a request safely: the same key answers the same")]


class AttemptOut(BaseModel):
    """One attempt of the run (a receive of its message that started it)."""

    number: int = Field(ge=1, description="the attempt's number (1 = the first receive that started it)")
    consumer: str = Field(description="the consumer function that ran it", examples=["timekeeper-accounting-runs"])
    receive_count: int | None = Field(None, description="the receive of the run's message that started it (null: "
                                                        "not kept: a first attempt started with its batch that did "
                                                        "not fail, or an attempt started before it was kept)")
    started_at: UtcDatetime | None = Field(description="when the attempt started")
    finished_at: UtcDatetime | None = Field(description="when the attempt ended: it gave its lease back, its lease "
                                                        "ran out, or the run settled (null: still running)")
    duration_s: float | None = Field(ge=0, description="seconds from started_at to finished_at (null: still "
                                                       "running, or started and ended within one consumer batch, "
                                                       "whose one clock reading stamps both: not measured)")
    lease_until: UtcDatetime | None = Field(description="a running attempt's lease end")
    ended: Literal["retried", "taken_over", "settled"] | None = Field(
        None, description="retried: it failed and the run was retried; taken_over: its lease ran out without an "
                          "outcome and a later receive took the run over; settled: the run settled in it; "
                          "null: still running")
    error: str | None = Field(description="the attempt's error (the run's own for its current attempt)")


class RunEventOut(BaseModel):
    """An entry of the schedule history naming the run (offered, released, reoffered, settled, ...)."""

    id: int
    kind: str
    actor: str
    reason: str | None
    detail: dict[str, Any] | None
    at: UtcDatetime


class RunActionOut(BaseModel):
    """An operator's action on the run, with its reason."""

    id: int
    action: Literal["retry", "cancel", "fail", "redriven", "dead_letter_deleted"] = Field(
        description="redriven / dead_letter_deleted: staff moved the run's dead-letter message back to its queue, "
                    "or deleted it")
    actor: str
    reason: str
    detail: dict[str, Any] = Field(description="retry: run_id (the new run), created; cancel/fail: state_before, "
                                               "why (fail), key (the Idempotency-Key, when sent); redriven / "
                                               "dead_letter_deleted: queue, message_id, state_before (the run's "
                                               "state then)")
    at: UtcDatetime


class RetryOfOut(BaseModel):
    """The operator's retry that made this run: the retried run, who asked, why and when."""

    run_id: UUID = Field(description="the retried run")
    actor: str
    reason: str
    at: UtcDatetime


class RunPage(BaseModel):
    """``GET /runs/{run_id}``: one run as its page shows it."""

    id: UUID
    workspace_id: UUID
    schedule_id: UUID
    schedule_name: str
    schedule_status: Literal["active", "paused", "disabled"]
    schedule_deleted: bool
    owner: str
    work_kind: str
    trigger: Literal["scheduled", "manual", "test"]
    requested_by: str | None
    state: RunState
    stuck: Literal["not_started", "not_published", "lease_expired"] | None = Field(
        description="why the run waits too long (the operations overview's definition); null: it does not")
    occurrence_at: UtcDatetime = Field(description="the occurrence's instant; a manual run's request time")
    occurrence_local: str = Field(description="the intended wall time in the schedule's zone",
                                  examples=["2027-03-14T02:30:00"])
    dst_shifted: bool = Field(description="a spring-forward gap moved it later by the gap")
    due_at: UtcDatetime | None = Field(None, description="the instant a flexible window (window_minutes) gave the "
                                                         "run; null: due at its occurrence")
    timezone: str = Field(description="the schedule's IANA zone (occurrence_local's)")
    workspace_timezone: str = Field(description="the workspace's IANA zone (what instants are shown in)")
    queued_at: UtcDatetime
    published_at: UtcDatetime | None = Field(description="when the queue accepted its message")
    offer_count: int = Field(ge=0)
    attempts: int = Field(ge=0, description="attempts started (receives that started it)")
    latest_attempt: AttemptOut | None = Field(description="null: never started")
    attempt_history: list[AttemptOut] = Field(
        default_factory=list, description="every attempt in number order, the last the run's current one (the same "
                                          "as latest_attempt); empty: never started")
    outcome_code: str | None
    error: str | None
    skipped_backlog: int = Field(ge=0, description="older due occurrences collapsed into this run")
    first_skipped_at: UtcDatetime | None
    message_id: str = Field(description="the id its queue message carries (the run's id: a dead-letter "
                                        "message names it)")
    events: list[RunEventOut]
    actions: list[RunActionOut]
    retry_allowed: bool = Field(description="the work kind allows a retry from here (no route of its own)")
    retry_of: RetryOfOut | None = Field(default=None, description="the operator's retry that made this run "
                                                                  "(Retry now on another run); null: none")
    names: dict[str, str] = Field(default_factory=dict, description="display names of the people the page names "
                                  "(requested_by, the actors of events, actions and retry_of): user id -> name; "
                                  "a user id the directory names nobody by is left out")


class RetryOut(BaseModel):
    """A retry: the new manual run of the same schedule."""

    run_id: UUID = Field(description="the new run")
    retried_run_id: UUID
    created: bool = Field(description="false: a repeated Idempotency-Key; the first retry's run")


@dataclass(frozen=True)
class RunCaller:
    """The caller of a run route with the run's workspace found: ``workspace_id`` (the
    caller's, or for staff any workspace's), ``staff`` (the caller acts as staff)."""

    identity: Identity
    conn: TenantConnection
    now: datetime
    api: Any
    staff: bool
    method: str
    path: str

    def workspace_of(self, run_id: UUID) -> UUID:
        """The workspace whose run ``run_id`` the caller may reach: their own, or for staff
        the run's; a 404 when there is none."""
        if not self.staff:
            return self.identity.workspace_id
        with self.conn.transaction():
            found = run_ops.run_workspace(self.conn, run_id)
        if found is None:
            raise ApiError(404, errors.NOT_FOUND, "no such run")
        return found


def _caller_of(permission: str):
    def dependency(request: Request) -> RunCaller:
        identity = caller_identity(request)
        api = api_context(request)
        staff = bool(identity.roles & staff_roles(api.adapters.snapshot_registry()))
        if not staff:
            identity.require(permission)
        return RunCaller(identity=identity, conn=api.adapters.connection(), now=api.adapters.now(), api=api,
                         staff=staff, method=request.method.upper(), path=request.resolved_event.path)

    dependency.__name__ = f"run_caller_{permission.replace(':', '_')}"
    return dependency


Reader = Annotated[RunCaller, Depends(_caller_of(READ))]
Runner = Annotated[RunCaller, Depends(_caller_of(RUN))]
Admin = Annotated[RunCaller, Depends(_caller_of(ADMIN))]

#: The run routes (included by :data:`timekeeper.api.app.ROUTERS`).
router = ApiRouter()


def _retry_allowed(caller: RunCaller, owner: str, work_kind: str) -> bool:
    kind = caller.api.registry.find(owner, work_kind) if caller.api.registry is not None else None
    try:
        if kind is not None:
            kind.check_generic()
    except OwnRouteOnly:
        return False
    return True


def _pipeline(owner: str) -> Any:
    """The pipeline of ``owner`` (None: none)."""
    try:
        return pipeline_for_owner(owner)
    except KeyError:
        return None


def _duration(started: datetime | None, finished: datetime | None) -> float | None:
    """Seconds from ``started`` to ``finished``, or None when either is missing or they are
    the same instant: the consumer stamps an attempt's start and its end within one batch
    with the batch's one clock reading, so such a duration was not measured (not 0)."""
    if not finished or not started or finished == started:
        return None
    return max((finished - started).total_seconds(), 0.0)


def _attempts(run: dict[str, Any], consumer: str) -> list[AttemptOut]:
    """The run's attempts in number order: the superseded ones kept, then its current one
    (unless a failure that gave its lease back already kept it)."""
    out = [AttemptOut(number=a.attempt, consumer=consumer, receive_count=a.receive_count, started_at=a.started_at,
                      finished_at=a.ended_at, duration_s=_duration(a.started_at, a.ended_at), lease_until=None,
                      ended=a.ended, error=a.error)
           for a in run["superseded"]]
    if run["attempts"] and not any(a.number == run["attempts"] for a in out):
        finished = run["finished_at"]
        started = run["attempt_started_at"] or (run["started_at"] if run["attempts"] == 1 else None)
        out.append(AttemptOut(number=run["attempts"], consumer=consumer, receive_count=run["attempt_receive_count"],
                              started_at=started, finished_at=finished, duration_s=_duration(started, finished),
                              lease_until=run["lease_until"], ended="settled" if finished else None,
                              error=run["error"] if finished else None))
    return out


def _page(caller: RunCaller, run: dict[str, Any], zone: str, names: dict[str, str]) -> RunPage:
    pipeline = _pipeline(run["owner"])
    stuck = run_ops.stuck_why(run, reoffer_after=pipeline.reoffer_after, now=caller.now) if pipeline else None
    history = _attempts(run, pipeline.run_queue_name if pipeline else run["owner"])
    return RunPage(
        **{k: run[k] for k in ("id", "workspace_id", "schedule_id", "schedule_name", "schedule_status",
                               "schedule_deleted", "owner", "work_kind", "trigger", "requested_by", "state",
                               "occurrence_at", "dst_shifted", "queued_at", "published_at", "offer_count",
                               "attempts", "outcome_code", "error", "skipped_backlog", "first_skipped_at", "due_at")},
        occurrence_local=run["occurrence_local"].isoformat(), timezone=run["schedule_timezone"] or "UTC",
        workspace_timezone=zone, stuck=stuck, latest_attempt=history[-1] if history else None,
        attempt_history=history, message_id=str(run["id"]),
        events=[RunEventOut(**vars(e)) for e in run["events"]],
        actions=[RunActionOut(**vars(a)) for a in run["actions"]],
        retry_allowed=_retry_allowed(caller, run["owner"], run["work_kind"]),
        retry_of=RetryOfOut(**run["retry_of"]) if run["retry_of"] else None, names=names)


def _people(run: dict[str, Any]) -> list[str]:
    """The user ids a run's page names: who requested it, the actors of its history, its
    operators' actions and the retry that made it."""
    ids = {run["requested_by"], *(e.actor for e in run["events"]), *(a.actor for a in run["actions"]),
           (run["retry_of"] or {}).get("actor")}
    return sorted(i for i in ids if i)


#: The most runs one page of ``GET /runs`` holds.
MAX_RUNS_PAGE = 200


class ListedRunOut(BaseModel):
    """A run of the workspace's listing by state (``GET /runs``)."""

    id: UUID = Field(description="the run's id (``GET /runs/{run_id}``)")
    schedule_id: UUID
    schedule_name: str
    timezone: str = Field(description="the schedule's IANA zone (occurrence_local's)")
    state: RunState
    trigger: str = Field(examples=["scheduled", "manual"])
    requested_by: str | None = Field(description="who asked for a requested run (null: the schedule's rule)")
    occurrence_at: UtcDatetime
    occurrence_local: str = Field(examples=["2027-03-14T02:30:00"])
    attempts: int = Field(ge=0)
    outcome_code: str | None
    error: str | None
    queued_at: UtcDatetime = Field(description="when it was requested or came due")
    finished_at: UtcDatetime | None
    retried_as: UUID | None = Field(description="the run an operator's Retry now made of it (the latest; null: "
                                                "not retried)")


class RunList(BaseModel):
    """One page of the workspace's runs in a state, newest first; pass ``next_cursor`` as
    ``cursor`` for the next."""

    items: list[ListedRunOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")
    timezone: str = Field(description="the workspace's IANA zone, in which people's times are shown")


@router.get("/runs", tags=_TAGS, operation_id="listRuns", security=SECURITY,
            summary="The failed runs of the caller's workspace, newest first, each with the run its retry made",
            responses=_responses(200, "A page of runs"))
def list_runs(
    caller: Reader,
    state: Annotated[Literal["failed"], Query(description="the runs' state (failed: settled as failed; a run "
                                                          "retried since is listed all the same)")],
    since: Annotated[AwareDatetime | None, Query(description="only runs requested or due at or after this "
                                                             "instant (with its offset, e.g. Z)")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RUNS_PAGE, description="page size")] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="next_cursor of the previous page")
                      ] = None,
) -> RunList:
    """The caller's own workspace only (staff too: the workspace their token names); another
    workspace's runs are never listed."""
    after = decode_cursor(cursor)
    workspace_id = caller.identity.workspace_id
    with caller.conn.entered(workspace_id), caller.conn.transaction():
        rows, after = split_page(run_ops.runs_by_state(caller.conn, workspace_id=workspace_id, state=state,
                                                       since=since, after=after, limit=limit + 1),
                                 limit, lambda r: (r.queued_at, r.id))
        zone = workspace_timezone(caller.conn, workspace_id)
    items = [ListedRunOut(**{**vars(r), "timezone": r.timezone or "UTC",
                             "occurrence_local": r.occurrence_local.isoformat()}) for r in rows]
    return RunList(items=items, next_cursor=encode_cursor(after), timezone=zone)


@router.get("/runs/<run_id>", tags=_TAGS, operation_id="getRun", security=SECURITY,
            summary="A run: its schedule, occurrence, state, attempts, history and operators' actions",
            responses=_responses(200, "The run", 404))
def get_run(caller: Reader, run_id: RunId) -> RunPage:
    workspace_id = caller.workspace_of(run_id)
    with caller.conn.entered(workspace_id), caller.conn.transaction():
        run = run_ops.get_run(caller.conn, workspace_id=workspace_id, run_id=run_id)
        known = get_workspace(caller.conn, workspace_id)
        names = display_names(caller.conn, _people(run)) if run is not None else {}
        zone = known.timezone if known is not None else "UTC"
        if run is not None and known is not None and workspace_id != caller.identity.workspace_id:
            # staff reading another workspace: recorded in that workspace's trail, as the periods' reads are
            audit.record_staff_read(caller.conn, workspace_id=workspace_id, actor=caller.identity.user_id,
                                    what="run", detail={"run_id": str(run_id)}, now=caller.now)
    if run is None:
        raise ApiError(404, errors.NOT_FOUND, "no such run")
    return _page(caller, run, zone, names)


def _log(caller: RunCaller, action: str, run_id: UUID, workspace_id: UUID, reason: str, **extra: Any) -> None:
    logger.info("operations action", extra={"action": f"run_{action}", "actor": caller.identity.user_id,
                                            "run_id": str(run_id), "workspace_id": str(workspace_id),
                                            "reason": reason, "staff": caller.staff, **extra})
    metrics.add_metric(name=obs.OPERATIONS_ACTIONS, unit="Count", value=1)


@router.post("/runs/<run_id>/retry", tags=_TAGS, operation_id="retryRun", security=SECURITY,
             summary="Retry now: a manual run of the same occurrence, with a reason",
             responses=_responses(202, "Accepted: the new run is queued (a replay: the first retry's run)", 404,
                                  409, 415, headers=errors.REPLAYED))
def retry_run(caller: Runner, run_id: RunId, body: Annotated[ActionReason, Body()],
              idempotency_key: IdempotencyKey = None) -> Response[RetryOut]:
    reason = body.reason.strip()
    key = claim_key(caller.conn, caller.identity, method=caller.method, path=caller.path, key=idempotency_key,
                    body=body, now=caller.now)
    workspace_id = caller.workspace_of(run_id)
    with caller.conn.entered(workspace_id):
        with caller.conn.transaction():
            run = run_ops.locked_run(caller.conn, workspace_id=workspace_id, run_id=run_id)
        if run is None:
            raise ApiError(404, errors.NOT_FOUND, "no such run")
        try:
            new_id, created = service.run_now(caller.conn, workspace_id=workspace_id, schedule_id=run["schedule_id"],
                                              actor=caller.identity.user_id, now=caller.now,
                                              publisher=caller.api.publisher, idempotency_key=key,
                                              kinds=caller.api.registry,
                                              occurrence=(run["occurrence_at"], run["occurrence_local"]),
                                              retry_of=run_id)
        except OwnRouteOnly:
            raise ApiError(409, "retry_not_allowed", "this work kind is run from its own route, which checks more "
                           "before it runs; use that route's Run now") from None
        except service.ScheduleNotFound:
            raise ApiError(409, "retry_not_allowed", "the run's schedule was deleted: nothing to retry") from None
        if created:
            with caller.conn.transaction():
                run_ops.record_operator_action(caller.conn, run=run, action="retry", actor=caller.identity.user_id,
                                               reason=reason, detail={"run_id": str(new_id)}, now=caller.now)
    _log(caller, "retry", run_id, workspace_id, reason, new_run_id=str(new_id), new_run_created=created)
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=RetryOut(run_id=new_id, retried_run_id=run_id, created=created),
                    headers=None if created else {"Idempotent-Replayed": "true"})


def _settle(caller: RunCaller, run_id: UUID, action: str, reason: str, key: str | None) -> RunActionOut:
    workspace_id = caller.workspace_of(run_id)
    with caller.conn.entered(workspace_id), caller.conn.transaction():
        who = {"workspace_id": workspace_id, "run_id": run_id, "actor": caller.identity.user_id, "reason": reason,
               "now": caller.now, "key": key}
        try:
            if action == "cancel":
                done = run_ops.cancel_run(caller.conn, **who)
            else:
                run = run_ops.locked_run(caller.conn, workspace_id=workspace_id, run_id=run_id)
                pipeline = _pipeline(run["owner"]) if run else None
                if run is not None and pipeline is None:
                    raise run_ops.RunActionRefused("not_stuck", "this run's owner has no pipeline that settles it")
                done = run and run_ops.fail_stuck_run(caller.conn, **who, reoffer_after=pipeline.reoffer_after,
                                                      failure_threshold=pipeline.failure_pause_threshold)
        except run_ops.RunActionRefused as refused:
            raise ApiError(409, refused.code, str(refused)) from None
    if not done:
        raise ApiError(404, errors.NOT_FOUND, "no such run")
    _log(caller, action, run_id, workspace_id, reason)
    return RunActionOut(**vars(done))


@router.post("/runs/<run_id>/cancel", tags=_TAGS, operation_id="cancelRun", security=SECURITY,
             summary="Cancel a queued run (settled as skipped, outcome cancelled), with a reason",
             responses=_responses(200, "The recorded action", 404, 409, 415))
def cancel_run(caller: Admin, run_id: RunId, body: Annotated[ActionReason, Body()],
               idempotency_key: IdempotencyKey = None) -> RunActionOut:
    key = claim_key(caller.conn, caller.identity, method=caller.method, path=caller.path, key=idempotency_key,
                    body=body, now=caller.now)
    return _settle(caller, run_id, "cancel", body.reason.strip(), key)


@router.post("/runs/<run_id>/fail", tags=_TAGS, operation_id="failStuckRun", security=SECURITY,
             summary="Settle a stuck run as failed (outcome settled_by_operator), with a reason",
             responses=_responses(200, "The recorded action", 404, 409, 415))
def fail_run(caller: Admin, run_id: RunId, body: Annotated[ActionReason, Body()],
             idempotency_key: IdempotencyKey = None) -> RunActionOut:
    key = claim_key(caller.conn, caller.identity, method=caller.method, path=caller.path, key=idempotency_key,
                    body=body, now=caller.now)
    return _settle(caller, run_id, "fail", body.reason.strip(), key)
