"""Snapshot staff's range requests and workspace choices: one request over a month range of
one or several workspaces (or every workspace), previewed first, and its progress.

=======  ====================================  ======================  =================================
method   path                                  role                    what
=======  ====================================  ======================  =================================
GET      ``/snapshots/staff/workspaces``       a snapshot staff role   workspaces by name (``search``)
POST     ``/snapshots/ranges/preview``         the type's staff role   what a range would plan and
                                                                       refuse, and why; nothing recorded
POST     ``/snapshots/ranges``                 the type's staff role   plan it -> 201, with its group id
                                                                       (nothing planned: 200, group null)
GET      ``/snapshots/ranges/{group_id}``      a snapshot staff role   the range's runs and counts
GET      ``/snapshots/staff/periods``          a snapshot staff role   every workspace's periods, what
                                                                       matters first, filtered, paged
=======  ====================================  ======================  =================================

A preview and the request it previews run the same planning
(:func:`timekeeper.snapshots.staff.plan_range`: each month through the ledger's request,
the preview rolled back), so they agree unless the ledger changed in between. A request
that plans nothing (every period refused) is a 200 with ``group_id`` null: nothing was
created. With an ``Idempotency-Key`` a repeat answers the first answer again (its status
and body, ``Idempotent-Replayed: true``) and the same key with another body is a 409
``idempotency_key_reused`` (:meth:`~timekeeper.api.scope.StaffScope.create_once`). A period is
refused with the ledger's reason (``active_work``, ``protected_history`` for captured or
finalized history, ``already_planned``, ``not_planned``, ``period_not_complete``,
``period_before_workspace``, the workspace's state) or ``range_cap`` (one range plans at
most :data:`~timekeeper.snapshots.staff.MAX_RANGE_PLANNED` periods). Admission then runs
the planned runs as any request's (cap 4, one backfill lane).

A malformed body is a 422 naming the field: ``workspaces`` (neither ids nor ``"all"``, or
an id the directory does not know: ``unknown_workspace``),
``through`` (before ``first``, or more than 36 months after it), ``reason`` (missing, blank
or only invisible characters, over 500), ``first`` / ``through`` (not ``YYYY-MM``), ``mode``.

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

import base64
import binascii
import uuid
from datetime import date, datetime
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from timekeeper.api import errors
from timekeeper.api.errors import ApiError
from timekeeper.api.models import PLAIN_PATTERN, CanonicalUuid, UtcDatetime
from timekeeper.api.routing import SECURITY, ApiRouter
from timekeeper.api.scope import StaffScope, staff_scope
from timekeeper.api.snapshot_routes import (
    NAME_PATTERN,
    PERIOD_PATTERN,
    Mode,
    OwnerName,
    StaffKey,
    StaffReason,
    period_text,
    refusal,
)
from timekeeper.platform.directory import display_names
from timekeeper.snapshots import staff
from timekeeper.snapshots.ledger import RequestRefused
from timekeeper.snapshots.registry import UnknownSnapshotType
from timekeeper.topology import SNAPSHOTS

_TAGS = ["snapshots"]
_ERRORS = {
    401: "No or invalid authorizer claims",
    403: "The caller holds no snapshot staff role (or not the type's)",
    404: "No such range request",
    409: errors.KEY_REUSED_TEXT,
    415: "The body is not application/json",
    422: "Invalid input naming the field, or a type or workspace the ledger does not know",
}
_responses = partial(errors.responses, texts=_ERRORS)

Staff = Annotated[StaffScope, Depends(staff_scope)]
router = ApiRouter()


class StaffWorkspace(BaseModel):
    """A workspace as staff choose it: its name first, its id to name it in requests."""

    id: UUID
    name: str
    timezone: str = Field(description="its IANA zone: where its months end")
    status: str = Field(description="active, loading (not snapshotted yet) or disabled")


class StaffWorkspaces(BaseModel):
    """Workspaces whose name contains the search, by name (at most ``limit``)."""

    items: list[StaffWorkspace]


class RangeRequest(BaseModel):
    """A range request: ``mode`` requests of one snapshot type for every month ``first`` ..
    ``through`` of the named workspaces (``workspaces``: their ids, or ``"all"``), one
    reason for all."""

    model_config = ConfigDict(extra="forbid")

    owner: OwnerName = Field(examples=["platform"])
    snapshot_type: OwnerName = Field(examples=["ar_aging"])
    workspaces: Annotated[list[CanonicalUuid], Field(min_length=1, max_length=staff.MAX_RANGE_WORKSPACES)] | \
        Literal["all"] = Field(description='the workspaces\' ids, or "all": every workspace in the directory')
    first: str = Field(pattern=PERIOD_PATTERN, description="the first month, YYYY-MM", examples=["2026-01"])
    through: str = Field(pattern=PERIOD_PATTERN, description="the last month, YYYY-MM", examples=["2026-06"])
    mode: Mode
    reason: StaffReason

    @field_validator("first", "through")
    @classmethod
    def _before_last_month(cls, value: str) -> str:
        # A month's period ends with the next month's start: December 9999 has none.
        if value >= "9999-12":
            raise ValueError("must be a month before 9999-12")
        return value

    @field_validator("workspaces", mode="before")
    @classmethod
    def _targets(cls, value: object) -> object:
        # Judged here, so a refusal names ``workspaces`` rather than a member of the union.
        if value == "all":
            return value
        if not isinstance(value, list) or not 1 <= len(value) <= staff.MAX_RANGE_WORKSPACES:
            raise ValueError(f'must be "all" or a list of 1 to {staff.MAX_RANGE_WORKSPACES} workspace ids')
        try:
            return _IDS.validate_python(value)
        except ValidationError:
            raise ValueError("each workspace must be a workspace id (a UUID)") from None


_IDS = TypeAdapter(list[CanonicalUuid])


class RangeItemOut(BaseModel):
    """One period of a range: planned (its version, and run once recorded) or refused (why)."""

    workspace_id: UUID
    workspace_name: str
    owner: str
    snapshot_type: str
    period: str = Field(description="the workspace-local month, YYYY-MM")
    planned: bool
    version: int | None = None
    run_id: UUID | None = None
    refusal: str | None = Field(None, description="the ledger's reason, or range_cap", examples=["active_work"])
    message: str | None = None


class RangePlan(BaseModel):
    """What a range plans (``group_id`` null in a preview) and refuses, period by period."""

    group_id: UUID | None
    planned: int = Field(ge=0)
    refused: int = Field(ge=0)
    items: list[RangeItemOut]
    admission_cap: int = Field(description="runs of an owner queued or running at once")
    backfill_lane: int = Field(description="of which backfills")


class RangeRunOut(BaseModel):
    """One run of a range request, its workspace by name."""

    run_id: UUID
    workspace_id: UUID
    workspace_name: str
    timezone: str
    owner: str
    snapshot_type: str
    period: str
    version: int
    mode: str
    state: str
    current: bool
    attempts: int
    failure_code: str | None
    reason: str | None
    requested_by: str | None
    created_at: UtcDatetime
    published_at: UtcDatetime | None


class RangeProgress(BaseModel):
    """A range request's progress: its runs' count per state (``planned`` waiting for
    admission, ``queued`` admitted, ``running``, ``published``, ``failed``, ...) and each run."""

    group_id: UUID
    counts: dict[str, int]
    items: list[RangeRunOut]
    names: dict[str, str] = Field(default_factory=dict, description="the requesters' display names by user id")


class RangeRequestOut(BaseModel):
    """A range request as staff find it again (its progress: ``GET /snapshots/ranges/{group_id}``)."""

    group_id: UUID
    requested_at: UtcDatetime = Field(description="when it was requested (its first run's creation)")
    requested_by: str | None
    requested_by_name: str | None = Field(description="the requester's display name, None when unknown")
    owner: str
    snapshot_type: str
    mode: str = Field(description="manual (re-runs) or backfill")
    reason: str | None
    first: str = Field(description="its first month, YYYY-MM")
    through: str = Field(description="its last month, YYYY-MM")
    workspaces: int = Field(description="how many workspaces it planned runs in")
    runs: int = Field(description="how many runs it planned")
    done: int = Field(description="of which published, failed, skipped or cancelled")


class RangeRequests(BaseModel):
    """The latest range requests of every workspace, newest first; ``timezone`` the caller's
    own workspace's zone (the one its pages show instants in)."""

    timezone: str
    items: list[RangeRequestOut]


def _month(text: str) -> date:
    return date(int(text[:4]), int(text[5:7]), 1)


def _targets(scope: StaffScope, body: RangeRequest) -> list[staff.DirectoryEntry]:
    first, through = _month(body.first), _month(body.through)
    if through < first:
        raise ApiError(422, errors.VALIDATION_ERROR, "the last month is before the first", "through")
    if len(staff.months(first, through)) > staff.MAX_RANGE_MONTHS:
        raise ApiError(422, errors.VALIDATION_ERROR, f"a range spans at most {staff.MAX_RANGE_MONTHS} months",
                       "through")
    ids = None if body.workspaces == "all" else list(dict.fromkeys(body.workspaces))
    found = scope.staff_workspaces(ids=ids, limit=staff.MAX_RANGE_WORKSPACES)
    if ids and len(found) != len(ids):
        missing = sorted(str(i) for i in set(ids) - {w.id for w in found})
        raise ApiError(422, "unknown_workspace", f"no workspace {', '.join(missing)}", "workspaces")
    return found


def _plan(scope: StaffScope, body: RangeRequest, *, preview: bool) -> RangePlan:
    targets = _targets(scope, body)
    group = None if preview else uuid.uuid4()
    try:
        items = scope.plan_range(owner=body.owner, snapshot_type=body.snapshot_type, workspaces=targets,
                                 first=_month(body.first), last=_month(body.through), mode=body.mode,
                                 reason=body.reason, group=group, preview=preview)
    except (RequestRefused, UnknownSnapshotType) as refused:
        raise refusal(refused, scope.registry, body.owner) from None
    except ValueError as invalid:  # the body's checks make this unreachable; never a 500
        raise ApiError(422, errors.VALIDATION_ERROR, str(invalid), "reason") from None
    planned = sum(1 for i in items if i.planned)
    return RangePlan(group_id=group if planned else None, planned=planned, refused=len(items) - planned,
                     admission_cap=SNAPSHOTS.admission_cap, backfill_lane=SNAPSHOTS.backfill_lane,
                     items=[RangeItemOut(workspace_id=i.workspace_id, workspace_name=i.workspace_name, owner=i.owner,
                                         snapshot_type=i.snapshot_type, period=period_text(i.period),
                                         planned=i.planned, version=i.version, run_id=i.run_id, refusal=i.refusal,
                                         message=i.message) for i in items])


@router.get("/snapshots/staff/workspaces", tags=_TAGS, operation_id="listStaffWorkspaces", security=SECURITY,
            summary="Staff: workspaces by name, to choose the targets of a request",
            responses=_responses(200, "Workspaces by name"))
def list_staff_workspaces(scope: Staff,
                          search: Annotated[str | None, Query(max_length=200, pattern=PLAIN_PATTERN,
                                                              description="a part of the name")]
                          = None,
                          limit: Annotated[int, Query(ge=1, le=1000, description="at most")] = 100,
                          ) -> StaffWorkspaces:
    found = scope.staff_workspaces(search=(search or "").strip() or None, limit=limit)
    return StaffWorkspaces(items=[StaffWorkspace(id=w.id, name=w.name, timezone=w.timezone, status=w.status)
                                  for w in found])


@router.post("/snapshots/ranges/preview", tags=_TAGS, operation_id="previewSnapshotRange", security=SECURITY,
             summary="Staff: what a range request would plan and refuse, and why (nothing is recorded)",
             responses=_responses(200, "The periods it would plan and refuse", 415))
def preview_snapshot_range(scope: Staff, body: Annotated[RangeRequest, Body()]) -> RangePlan:
    return _plan(scope, body, preview=True)


@router.post("/snapshots/ranges", tags=_TAGS, operation_id="requestSnapshotRange", security=SECURITY,
             summary="Staff: request re-runs or backfills of a month range of workspaces, one reason for all",
             responses={**_responses(201, "Planned: the runs wait for admission (group_id: their progress; a "
                                          "replay: the first answer)", 409, 415, headers=errors.REPLAYED),
                        200: {"description": "Nothing planned: every period refused (group_id null), nothing "
                                             "recorded", "headers": errors.REPLAYED}})
def request_snapshot_range(scope: Staff, body: Annotated[RangeRequest, Body()],
                           idempotency_key: StaffKey = None) -> Response[RangePlan]:
    def create() -> Response[RangePlan]:
        plan = _plan(scope, body, preview=False)
        return Response(status_code=HTTPStatus.CREATED if plan.planned else HTTPStatus.OK,
                        content_type=content_types.APPLICATION_JSON, body=plan)

    return scope.create_once(idempotency_key, body, create)


def _names(scope: StaffScope, user_ids: set[str | None]) -> dict[str, str]:
    """The staff members' display names as their own workspace's directory knows them."""
    with scope.conn.entered(scope.identity.workspace_id), scope.conn.transaction():
        return display_names(scope.conn, sorted(u for u in user_ids if u))


@router.get("/snapshots/ranges", tags=_TAGS, operation_id="listSnapshotRanges", security=SECURITY,
            summary="Staff: the latest range requests of every workspace, newest first, with their progress",
            responses=_responses(200, "The latest range requests"))
def list_snapshot_ranges(scope: Staff,
                         limit: Annotated[int, Query(ge=1, le=200, description="at most")] = 20) -> RangeRequests:
    with scope.conn.transaction():
        found = staff.range_requests(scope.conn, limit=limit)
    names = _names(scope, {r.requested_by for r in found})
    return RangeRequests(timezone=scope.own_zone(), items=[RangeRequestOut(
        group_id=r.group_id, requested_at=r.requested_at, requested_by=r.requested_by,
        requested_by_name=names.get(r.requested_by or ""), owner=r.owner, snapshot_type=r.snapshot_type,
        mode=r.mode, reason=r.reason, first=period_text(r.first_period), through=period_text(r.last_period),
        workspaces=r.workspaces, runs=r.runs, done=r.done) for r in found])


@router.get("/snapshots/ranges/<group_id>", tags=_TAGS, operation_id="getSnapshotRange", security=SECURITY,
            summary="Staff: a range request's progress (runs per state) and its runs",
            responses=_responses(200, "The range's runs and counts", 404))
def get_snapshot_range(scope: Staff,
                       group_id: Annotated[CanonicalUuid, Path(description="the range request's group_id")],
                       ) -> RangeProgress:
    runs = scope.request_group(group_id)
    if not runs:
        raise ApiError(404, errors.NOT_FOUND, "no such range request")
    counts: dict[str, int] = {}
    for run in runs:
        state = "published" if run.is_current or run.state == "published" else run.state
        counts[state] = counts.get(state, 0) + 1
    return RangeProgress(group_id=group_id, counts=counts, names=_names(scope, {r.requested_by for r in runs}),
                         items=[RangeRunOut(
        run_id=r.id, workspace_id=r.workspace_id, workspace_name=r.workspace_name, timezone=r.timezone,
        owner=r.owner, snapshot_type=r.snapshot_type, period=period_text(r.period), version=r.version, mode=r.mode,
        state=r.state, current=r.is_current, attempts=r.attempts, failure_code=r.failure_code, reason=r.reason,
        requested_by=r.requested_by, created_at=r.created_at, published_at=r.published_at) for r in runs])


#: What the staff period listing's ``status`` filter names, and the run states it means.
STAFF_STATUSES = {"failed": ["failed"], "in_progress": ["queued", "running", "retry_wait"], "planned": ["planned"],
                  "published": ["published"], "skipped": ["skipped"], "cancelled": ["cancelled"]}


class StaffPeriodOut(BaseModel):
    """A period across workspaces: its newest version, the workspace by name; a month never
    planned (listed only by ``status=overdue``) has no run: ``run_id``, ``version`` and
    ``updated_at`` null, ``state`` ``missing``."""

    run_id: UUID | None
    workspace_id: UUID
    workspace_name: str
    timezone: str = Field(description="the workspace's IANA zone")
    owner: str
    snapshot_type: str
    period: str = Field(description="the workspace-local month, YYYY-MM")
    version: int | None
    state: str
    current: bool
    protection: str | None
    failure_code: str | None
    skip_reason: str | None = Field(None, description="why a skipped period was skipped")
    updated_at: UtcDatetime | None
    published_at: UtcDatetime | None
    overdue: bool = Field(False, description="not published (nor skipped) 24 hours after its local month end: the "
                                             "planner's rule, the periods its overdue alarm counts")


class StaffPeriods(BaseModel):
    """A page of every workspace's periods, failed first, then in progress, planned,
    published and the rest; pass ``next_cursor`` as ``cursor`` for the next page."""

    items: list[StaffPeriodOut]
    next_cursor: str | None = Field(None, description="opaque; null on the last page")
    never_planned_overdue: int = Field(0, ge=0, description="overdue months the filters keep that were never "
                                                            "planned (no run: listed by status=overdue)")


def _cursor(key: staff.StaffPeriodKey | None) -> str | None:
    if key is None:
        return None
    return base64.urlsafe_b64encode(f"{key[0]}|{key[1].isoformat()}|{key[2]}".encode()).decode()


#: The ranks a staff period listing's cursor carries (:class:`timekeeper.snapshots.staff.StaffPeriod`).
_RANKS = frozenset("01234")


def _decode_cursor(cursor: str | None) -> staff.StaffPeriodKey | None:
    if not cursor:
        return None
    try:
        rank, at, run = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        instant = datetime.fromisoformat(at)
        if rank not in _RANKS or instant.tzinfo is None:  # a rank the listing gives, an aware instant
            raise ValueError(rank)
        return int(rank), instant, UUID(run)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(422, errors.VALIDATION_ERROR, "not a cursor this listing gave", "cursor") from None


Month = Annotated[str | None, Query(pattern=PERIOD_PATTERN, max_length=7, description="a month, YYYY-MM")]


@router.get("/snapshots/staff/periods", tags=_TAGS, operation_id="listStaffSnapshotPeriods", security=SECURITY,
            summary="Staff: every workspace's snapshot periods, failed and running first, filtered and paged",
            responses=_responses(200, "A page of periods, what matters first"))
def list_staff_periods(scope: Staff,
                       search: Annotated[str | None, Query(max_length=200, pattern=PLAIN_PATTERN,
                                                           description="a part of the workspace's name")] = None,
                       owner: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=64)] = None,
                       snapshot_type: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=64)] = None,
                       status: Annotated[Literal["failed", "in_progress", "planned", "published", "skipped",
                                                 "cancelled", "overdue"] | None,
                                         Query(description="the newest version's; overdue: the overdue periods, "
                                                           "most overdue first, months never planned among them "
                                                           "(at most 500, one page)")] = None,
                       first: Month = None, through: Month = None,
                       limit: Annotated[int, Query(ge=1, le=500, description="periods per page")] = 100,
                       cursor: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_-]+=*$", max_length=200,
                                                           description="next_cursor of the previous page")] = None,
                       ) -> StaffPeriods:
    start, end = (_month(first) if first else None), (_month(through) if through else None)
    if start and end and end < start:
        raise ApiError(422, errors.VALIDATION_ERROR, "the last month is before the first", "through")
    overdue, _ = scope.overdue_periods(limit=staff.MAX_OVERDUE_LISTED)
    if status == "overdue":
        items = _overdue_items(overdue, search=(search or "").strip().lower(), owner=owner,
                               snapshot_type=snapshot_type, first=start, through=end)[:limit]
        states = sorted({i.state for i in items if i.run_id is not None})
        changed = {p.id: p.updated_at for p in scope.staff_periods(
            search=(search or "").strip() or None, owner=owner, snapshot_type=snapshot_type, states=states,
            first=start, through=end, limit=staff.MAX_OVERDUE_LISTED)[0]} if states else {}
        return StaffPeriods(items=[i.model_copy(update={"updated_at": changed.get(i.run_id)}) for i in items])
    late = {(o.workspace_id, o.owner, o.snapshot_type, o.period) for o in overdue}
    missing = sum(1 for o in _overdue_items(overdue, search=(search or "").strip().lower(), owner=owner,
                                            snapshot_type=snapshot_type, first=start, through=end)
                  if o.run_id is None) if status is None else 0
    found, after = scope.staff_periods(search=(search or "").strip() or None, owner=owner,
                                      snapshot_type=snapshot_type, states=STAFF_STATUSES[status] if status else None,
                                      first=start, through=end, after=_decode_cursor(cursor), limit=limit)
    return StaffPeriods(next_cursor=_cursor(after), never_planned_overdue=missing, items=[StaffPeriodOut(
        run_id=p.id, workspace_id=p.workspace_id, workspace_name=p.workspace_name, timezone=p.timezone,
        owner=p.owner, snapshot_type=p.snapshot_type, period=period_text(p.period), version=p.version,
        state=p.state, current=p.is_current, protection=p.protection, failure_code=p.failure_code,
        skip_reason=p.skip_reason, updated_at=p.updated_at, published_at=p.published_at,
        overdue=(p.workspace_id, p.owner, p.snapshot_type, p.period) in late) for p in found])


def _overdue_items(overdue: list[Any], *, search: str, owner: str | None, snapshot_type: str | None,
                   first: date | None, through: date | None) -> list[StaffPeriodOut]:
    """The overdue periods (:class:`~timekeeper.snapshots.ledger.OverduePeriod`, most overdue
    first) the filters keep, as the listing's rows."""
    return [StaffPeriodOut(
        run_id=o.run_id, workspace_id=o.workspace_id, workspace_name=o.workspace_name, timezone=o.timezone,
        owner=o.owner, snapshot_type=o.snapshot_type, period=period_text(o.period), version=o.version,
        state=o.status, current=False, protection=None, failure_code=o.failure_code, updated_at=None,
        published_at=None, overdue=True) for o in overdue
        if (not search or search in o.workspace_name.lower()) and owner in (None, o.owner)
        and snapshot_type in (None, o.snapshot_type) and (first is None or o.period >= first)
        and (through is None or o.period <= through)]
