"""The routes that close the loops to people: the signed-in person's notices, the owner
hand-off, the audit trail and failed posting jobs.

Routes (:data:`router`):

* ``GET /notices`` (any role): the caller's notices in their workspace, newest first
  (``unread``, ``before`` the previous page's last id, ``limit`` <= 100), with the unread
  count. ``POST /notices/read`` (any role): mark the caller's notices read (``ids``, or all).
* ``GET /notices/mail`` (any role): whether the caller gets the workspace's notice e-mails
  (off after the one-click link of a notice e-mail, ``POST /opt-outs/{token}``).
  ``POST /notices/mail`` (any role): turn them back on (repeating it changes nothing); the
  in-product notices are recorded and listed either way.
* ``GET /ownerless-schedules`` (``workspace:admin``, by the token and by the membership):
  the schedules paused because their owner was deactivated or left.
* ``POST /ownerless-schedules/{id}/reassign`` (``workspace:admin``): give one a new owner;
  the access rule is asked for the NEW owner (a query schedule: read access to its
  source; any schedule: an active, current member), 422 ``owner_user_id`` with the rule's
  reason otherwise; the schedule stays paused (now by its owner) and may be resumed.
  Resuming an ownerless schedule before that is 409 ``ownerless``.
* ``GET /query-schedules/{id}/history`` (``queries:read``): the schedule's history, newest
  first: every change with its actor, instant and changed fields.
* ``GET /staff-reads`` (``workspace:admin``): staff reads of this workspace's data.
* ``GET /posting-jobs/failed`` and ``POST /posting-jobs/{id}/retry`` (``workspace:admin``):
  failed posting jobs (each batch closed and unposted) and a retry (the job goes back to
  ``pending``; the accounting pipeline's sweep starts it within five minutes).
"""

from datetime import datetime
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any
from uuid import UUID

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.accounting import posting
from timekeeper.accounting.models import NotFound
from timekeeper.api import errors
from timekeeper.api.auth import OWN_NOTICES, QUERIES_READ, WORKSPACE_ADMIN
from timekeeper.api.errors import ApiError, error_response
from timekeeper.api.models import CanonicalUuid
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform import access, audit, notices
from timekeeper.platform.directory import workspace_timezone
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import opt_outs
from timekeeper.reporting.query_schedules import OwnerRefused, reassign_owner
from timekeeper.schedules import service
from timekeeper.strict_input import JSON_INTEGER

OWNERLESS = "ownerless"
NOT_OWNERLESS = "not_ownerless"
MAX_PAGE = 100

_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           404: "No such object in the caller's workspace",
           409: "The schedule is not in a state this action applies to",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
_responses = partial(errors.responses, texts=_ERRORS)
#: A notice id (a bigint identity), at most the largest integer every JSON client holds
#: exactly (2**53 - 1; the document's bounds are written through floats).
MAX_ID = 2**53 - 1
_Id = Annotated[int, Field(ge=1, le=MAX_ID), JSON_INTEGER]


#: What a page's ``timezone`` is (its instants stay UTC; the zone is for showing them).
ZONE_TEXT = "the workspace's IANA zone, to show the UTC instants in (UTC when the directory has no such workspace)"


class NoticeOut(BaseModel):
    """One notice to the caller: ``kind`` (schedule_paused, delivery_skipped_stale,
    posting_failed, schedule_ownerless, schedule_failed, resubscribe_invited), ``audience``
    (owner, admin, recipient), the schedule, the machine-readable ``reason``, the event's
    ``detail``, and when it was made, read and mailed."""

    id: int
    kind: str
    audience: str
    schedule_id: UUID | None
    reason: str | None
    detail: dict[str, Any]
    created_at: datetime
    read_at: datetime | None
    mailed_at: datetime | None


class NoticePage(BaseModel):
    """A page of the caller's notices, newest first; pass ``next_before`` as ``before``."""

    items: list[NoticeOut]
    unread: int = Field(description="the caller's unread notices in this workspace")
    next_before: int | None = Field(description="null on the last page")
    timezone: str = Field("UTC", description=ZONE_TEXT)


class MarkRead(BaseModel):
    """Which of the caller's notices to mark read (omitted or null: all of them)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[_Id] | None = Field(None, max_length=500)


class NoticeMailOut(BaseModel):
    """Whether the signed-in person gets the workspace's notice e-mails; ``opted_out_at``
    (UTC) when they turned them off with a notice e-mail's link (null: they get them)."""

    mail: bool
    opted_out_at: datetime | None


class Marked(BaseModel):
    """How many notices changed from unread to read."""

    marked: int


class OwnerlessOut(BaseModel):
    """A schedule paused because its owner left: its departed owner and when it paused."""

    id: UUID
    owner: str
    work_kind: str
    name: str
    previous_owner_user_id: str | None
    paused_at: datetime


class OwnerlessPage(BaseModel):
    """The workspace's ownerless schedules, oldest pause first."""

    items: list[OwnerlessOut]
    timezone: str = Field("UTC", description=ZONE_TEXT)


class Reassign(BaseModel):
    """The schedule's new owner (a user id of the workspace)."""

    model_config = ConfigDict(extra="forbid")

    owner_user_id: Annotated[str, Field(min_length=1, max_length=200)]


class ReassignedOut(BaseModel):
    """The reassigned schedule: its new owner and state (paused by its owner: resume it)."""

    id: UUID
    owner_user_id: str
    status: str
    pause_reason: str | None


class HistoryEventOut(BaseModel):
    """One history event: ``kind``, ``actor``, ``reason``, ``detail`` (for a settings change
    ``{"changes": {field: {"from": old, "to": new}}}``) and ``at``."""

    id: int
    run_id: UUID | None
    kind: str
    actor: str
    reason: str | None
    detail: dict[str, Any] | None
    at: datetime


class HistoryPage(BaseModel):
    """A page of a schedule's history, newest first; pass ``next_before`` as ``before``."""

    items: list[HistoryEventOut]
    next_before: int | None = Field(description="null on the last page")


class StaffReadOut(BaseModel):
    """A staff member's read of this workspace's data."""

    id: int
    actor: str
    what: str
    detail: dict[str, Any]
    at: datetime


class StaffReadPage(BaseModel):
    """A page of staff reads, newest first; pass ``next_before`` as ``before``."""

    items: list[StaffReadOut]
    next_before: int | None = Field(description="null on the last page")


class PostingJobOut(BaseModel):
    """A posting job: ``status`` pending | running | succeeded | failed, its error, attempts."""

    id: UUID
    batch_id: UUID
    status: str
    error: str | None
    attempts: int
    requested_by_run_id: UUID | None
    created_at: datetime
    finished_at: datetime | None


class PostingJobPage(BaseModel):
    """The workspace's failed posting jobs, oldest failure first (at most 100)."""

    items: list[PostingJobOut]
    timezone: str = Field("UTC", description=ZONE_TEXT)


def _job_out(job: Any) -> PostingJobOut:
    return PostingJobOut(id=job.id, batch_id=job.batch_id, status=job.status, error=job.error,
                         attempts=job.attempts, requested_by_run_id=job.requested_by_run_id,
                         created_at=job.created_at, finished_at=job.finished_at)


Person = Annotated[WorkspaceScope, Depends(scope_for(OWN_NOTICES))]
Admin = Annotated[WorkspaceScope, Depends(scope_for(WORKSPACE_ADMIN))]
Reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]
BeforeQuery = Annotated[int | None, Query(ge=1, le=MAX_ID, description="next_before of the previous page")]
LimitQuery = Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")]

#: The notices, owner hand-off, history, staff-read and posting-job routes.
router = ApiRouter()


@router.exception_handler(service.Ownerless)
def _ownerless(_: service.Ownerless) -> Response:
    return error_response(HTTPStatus.CONFLICT, OWNERLESS,
                          "the schedule has no owner: a workspace admin reassigns it before it is resumed")


@router.exception_handler(OwnerRefused)
def _owner_refused(error: OwnerRefused) -> Response:
    return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, error.reason,
                          str(error), "owner_user_id")


@router.get("/notices", tags=["notices"], operation_id="listNotices", security=SECURITY,
            summary="The signed-in person's notices about their schedules, newest first",
            responses=_responses(200, "A page of notices"))
def list_notices(scope: Person, unread: Annotated[bool, Query(description="unread ones only")] = False,
                 before: BeforeQuery = None, limit: LimitQuery = 50) -> NoticePage:
    with scope.unit() as conn:
        rows = notices.list_notices(conn, workspace_id=scope.workspace_id, user_id=scope.user_id,
                                    unread_only=unread, before_id=before, limit=limit + 1)
        count = notices.count_unread(conn, workspace_id=scope.workspace_id, user_id=scope.user_id)
        zone = workspace_timezone(conn, scope.workspace_id)
    page = rows[:limit]
    return NoticePage(items=[NoticeOut(**{k: getattr(n, k) for k in NoticeOut.model_fields}) for n in page],
                      unread=count, next_before=page[-1].id if len(rows) > limit else None, timezone=zone)


@router.post("/notices/read", tags=["notices"], operation_id="markNoticesRead", security=SECURITY,
             summary="Mark the signed-in person's notices read (the ids given, or all)",
             responses=_responses(200, "How many changed", 415))
def mark_read(scope: Person, body: Annotated[MarkRead, Body()]) -> Marked:
    with scope.unit() as conn:
        return Marked(marked=notices.mark_read(conn, workspace_id=scope.workspace_id, user_id=scope.user_id,
                                               now=scope.now, ids=body.ids))


@router.get("/notices/mail", tags=["notices"], operation_id="noticeMail", security=SECURITY,
            summary="Whether the signed-in person gets the workspace's notice e-mails",
            responses=_responses(200, "The person's notice e-mail setting"))
def notice_mail(scope: Person) -> NoticeMailOut:
    with scope.unit() as conn:
        since = opt_outs.notice_opted_out_at(conn, workspace_id=scope.workspace_id, user_id=scope.user_id)
    return NoticeMailOut(mail=since is None, opted_out_at=since)


@router.post("/notices/mail", tags=["notices"], operation_id="resumeNoticeMail", security=SECURITY,
             summary="Turn the signed-in person's notice e-mails back on (repeating it changes nothing)",
             responses=_responses(200, "Notice e-mails are on"))
def resume_notice_mail(scope: Person) -> NoticeMailOut:
    with scope.unit() as conn:
        opt_outs.resume_notice_mail(conn, workspace_id=scope.workspace_id, user_id=scope.user_id, now=scope.now)
    return NoticeMailOut(mail=True, opted_out_at=None)


@router.get("/ownerless-schedules", tags=["owner hand-off"], operation_id="listOwnerlessSchedules",
            security=SECURITY, summary="Schedules paused because their owner was deactivated or left (admins)",
            responses=_responses(200, "The ownerless schedules"))
def list_ownerless(scope: Admin) -> OwnerlessPage:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        rows = service.list_ownerless(conn, workspace_id=scope.workspace_id)
        zone = workspace_timezone(conn, scope.workspace_id)
    return OwnerlessPage(items=[OwnerlessOut(id=r.id, owner=r.owner, work_kind=r.work_kind, name=r.name,
                                             previous_owner_user_id=r.owner_user_id, paused_at=r.updated_at)
                                for r in rows], timezone=zone)


@router.post("/ownerless-schedules/<schedule_id>/reassign", tags=["owner hand-off"],
             operation_id="reassignOwnerlessSchedule", security=SECURITY,
             summary="Give an ownerless schedule a new owner (the access rule asked for them); then resume it",
             responses=_responses(200, "The reassigned schedule, paused by its new owner", 404, 409, 415))
def reassign(scope: Admin, schedule_id: Annotated[CanonicalUuid, Path(description="the schedule's id")],
             body: Annotated[Reassign, Body()]) -> ReassignedOut:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        state = service.get_state(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id)
        if state is None or state.deleted_at is not None:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such schedule in this workspace")
        if state.pause_reason != service.OWNERLESS:
            raise ApiError(HTTPStatus.CONFLICT, NOT_OWNERLESS, "only an ownerless schedule is reassigned here")
        is_query_schedule = dl.get_query_schedule(conn, workspace_id=scope.workspace_id,
                                                  schedule_id=schedule_id) is not None
        if not is_query_schedule:
            decision = access.check_member(conn, workspace_id=scope.workspace_id, user_id=body.owner_user_id)
            if not decision:
                raise OwnerRefused(decision.reason or access.NOT_A_MEMBER)
            service.set_owner(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                              owner_user_id=body.owner_user_id, actor=scope.user_id, now=scope.now)
    if is_query_schedule:
        scope.call(reassign_owner, schedule_id=schedule_id, owner_user_id=body.owner_user_id,
                   actor=scope.user_id, now=scope.now)
    with scope.unit() as conn:
        state = service.get_state(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id)
    assert state is not None
    return ReassignedOut(id=schedule_id, owner_user_id=body.owner_user_id, status=state.status,
                         pause_reason=state.pause_reason)


@router.get("/query-schedules/<schedule_id>/history", tags=["query schedules"],
            operation_id="queryScheduleHistory", security=SECURITY,
            summary="The audit trail of a query schedule: every change with its actor and instant, newest first",
            responses=_responses(200, "A page of history events", 404))
def history(scope: Reader, schedule_id: Annotated[CanonicalUuid, Path(description="the query schedule's id")],
            before: BeforeQuery = None, limit: LimitQuery = 50) -> HistoryPage:
    with scope.unit(access.QUERIES_READ) as conn:
        if dl.get_query_schedule(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id) is None:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such query schedule")
        rows = service.list_events(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                   before_id=before, limit=limit + 1)
    page = rows[:limit]
    return HistoryPage(items=[HistoryEventOut(id=e.id, run_id=e.run_id, kind=e.kind, actor=e.actor,
                                              reason=e.reason, detail=e.detail, at=e.at) for e in page],
                       next_before=page[-1].id if len(rows) > limit else None)


@router.get("/staff-reads", tags=["audit"], operation_id="listStaffReads", security=SECURITY,
            summary="Staff reads of this workspace's data, newest first (admins)",
            responses=_responses(200, "A page of staff reads"))
def staff_reads(scope: Admin, before: BeforeQuery = None, limit: LimitQuery = 50) -> StaffReadPage:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        rows = audit.list_staff_reads(conn, workspace_id=scope.workspace_id, before_id=before, limit=limit + 1)
    page = rows[:limit]
    return StaffReadPage(items=[StaffReadOut(id=r.id, actor=r.actor, what=r.what, detail=r.detail, at=r.at)
                                for r in page], next_before=page[-1].id if len(rows) > limit else None)


@router.get("/posting-jobs/failed", tags=["posting jobs"], operation_id="listFailedPostingJobs",
            security=SECURITY, summary="Failed posting jobs: each batch is closed and unposted (admins)",
            responses=_responses(200, "The failed posting jobs"))
def failed_jobs(scope: Admin) -> PostingJobPage:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        jobs = posting.list_failed_jobs(conn, workspace_id=scope.workspace_id, limit=MAX_PAGE)
        zone = workspace_timezone(conn, scope.workspace_id)
    return PostingJobPage(items=[_job_out(j) for j in jobs], timezone=zone)


@router.post("/posting-jobs/<job_id>/retry", tags=["posting jobs"], operation_id="retryPostingJob",
             security=SECURITY, summary="Retry a failed posting job (the sweep starts it within five minutes)",
             responses=_responses(202, "Accepted: the job is pending again", 404))
def retry_job(scope: Admin, job_id: Annotated[CanonicalUuid, Path(description="the posting job's id")],
              ) -> Response[PostingJobOut]:
    with scope.unit(access.WORKSPACE_ADMIN) as conn:
        try:
            job = posting.request_retry(conn, workspace_id=scope.workspace_id, job_id=job_id)
        except NotFound:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such posting job") from None
    return Response(status_code=HTTPStatus.ACCEPTED, content_type="application/json", body=_job_out(job))


__all__ = ["NOT_OWNERLESS", "OWNERLESS", "router"]
