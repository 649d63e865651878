"""The monthly-snapshot routes of the HTTP API: staff requests and the period listings.

=======  ============================================  ======================  ===============================
method   path                                          role                    what
=======  ============================================  ======================  ===============================
POST     ``/snapshots/runs``                           the type's staff role   a re-run or backfill -> 201
GET      ``/snapshots/periods?owner=&snapshot_type=``  ``snapshots:read``      the caller's workspace's periods
GET      ``/snapshots/workspaces/{workspace_id}/       a staff role (any       any workspace's periods (staff);
         periods?owner=&snapshot_type=``               workspace), or          the caller's own (readers)
                                                       ``snapshots:read``
GET      ``/snapshots/workspaces/{workspace_id}/       as the listing above    every version of one period,
         periods/{owner}/{snapshot_type}/{period}``                            with attempts and failure codes
POST     ``/snapshots/workspaces/{workspace_id}/       the run's type's staff  cancel a planned or queued run
         runs/{run_id}/cancel``                        role                    (``{"reason"}``) -> 200
POST     ``/snapshots/workspaces/{workspace_id}/       the run's type's staff  finalize a published version
         runs/{run_id}/finalize``                      role                    (``{"reason"}``) -> 200
=======  ============================================  ======================  ===============================

Staff roles come from the snapshot registry: each type names the claims roles that may
request its runs (``SnapshotType.staff_roles``; the Platform's types ``platform:staff``).
A caller holding a staff role of any registered type is staff: they read any workspace's
periods, and request runs of the types whose staff role they hold (another type is 403).
Staff routes act on the TARGET workspace through :class:`~timekeeper.api.scope.StaffScope`
(the walled connection with that workspace entered); every other snapshot route is bound
to the caller's workspace as the schedule routes are. For a caller who is not staff,
``/snapshots/workspaces/{id}/periods`` is their own workspace's listing with
``snapshots:read`` and 404 ``not_found`` for any other workspace (existence does not leak,
as for another workspace's schedule); without either role it is 403 ``forbidden``.

Refusals of ``POST /snapshots/runs`` carry the ledger's reason as the ``code``
(:class:`~timekeeper.snapshots.ledger.RequestRefused`): 422 ``unsupported_type`` (field
``snapshot_type``, or ``owner`` when the owner registered no types), 422 ``type_disabled``
(``snapshot_type``: not enabled in this deployment's environment), 422
``unknown_workspace`` (``workspace_id``: not in the directory), 422 ``workspace_loading`` /
``workspace_disabled`` / ``policy_disabled`` (``workspace_id``: a workspace the planner
skips is not snapshotted on request either), and 409
``period_not_complete`` (``period``: the month has not ended in the workspace's timezone),
``active_work``, ``protected_history``, ``not_planned`` (a re-run of a period without runs:
request a backfill) and ``already_planned`` (a backfill of a period with runs: request a
re-run). A malformed body is a 422 ``validation_error`` naming the field (``period`` not
``YYYY-MM``, ``reason`` missing, blank or over 500 characters, ``mode`` not ``manual`` /
``backfill``). With an ``Idempotency-Key`` a repeat answers the first answer again (201,
the same run, ``Idempotent-Replayed: true``; a refusal is not recorded, so a repeat asks
again) and the same key with another body is 409 ``idempotency_key_reused``
(:meth:`~timekeeper.api.scope.StaffScope.create_once`).

Cancel and finalize (:mod:`timekeeper.snapshots.staff`) 404 ``not_found`` for a run that
is not the named workspace's (or no such workspace), and refuse with 409 and the reason as
the ``code``: ``run_in_progress`` (cancel of a running or retry_wait run),
``not_cancellable`` (a finished run), ``not_published`` and ``already_finalized``
(finalize). Their ``reason`` is checked as a request's is (:data:`StaffReason`).

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from datetime import date
from functools import partial
from http import HTTPStatus
from typing import Annotated, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from timekeeper.api import errors
from timekeeper.api.auth import SNAPSHOTS_READ, Identity
from timekeeper.api.errors import ApiError
from timekeeper.api.models import NOT_BLANK_PATTERN, CanonicalUuid, UtcDatetime
from timekeeper.api.routing import SECURITY, Api, ApiRouter, idempotency_header
from timekeeper.api.scope import PeriodVersions as PeriodVersions_
from timekeeper.api.scope import (
    StaffScope,
    WorkspacePeriods,
    WorkspaceScope,
    WorkspaceSnapshots,
    caller_identity,
    scope_for,
    staff_roles,
    staff_scope,
)
from timekeeper.snapshots.ledger import PeriodKey, PeriodStatus, RequestRefused, SnapshotRun
from timekeeper.snapshots.registry import SnapshotRegistry, UnknownSnapshotType
from timekeeper.snapshots.staff import StaffActionRefused
from timekeeper.topology import SNAPSHOTS

_TAGS = ["snapshots"]

#: A period as the API writes it: the workspace-local month, ``YYYY-MM``.
PERIOD_PATTERN = errors.pattern_words(r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])$", "must be a month YYYY-MM")
#: An owner module's or snapshot type's name.
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
#: Reason text: at least one character that is not whitespace, no NUL (PostgreSQL text).
REASON_PATTERN = NOT_BLANK_PATTERN
MAX_REASON = 500

#: The status of each ledger refusal reason (422: the input names nothing usable; 409: the
#: period's state does not allow the request) and the body field it is about.
REFUSALS: dict[str, tuple[int, str | None]] = {
    "unsupported_type": (422, "snapshot_type"),
    "type_disabled": (422, "snapshot_type"),
    "unknown_workspace": (422, "workspace_id"),
    "period_not_complete": (409, "period"),
    "period_before_workspace": (422, "period"),
    "workspace_loading": (422, "workspace_id"),
    "workspace_disabled": (422, "workspace_id"),
    "policy_disabled": (422, "workspace_id"),
    "active_work": (409, None),
    "protected_history": (409, None),
    "not_planned": (409, "mode"),
    "already_planned": (409, "mode"),
}

OwnerName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
#: A staff action's reason, the one check of every snapshot staff route: required, at most
#: 500 characters, not blank nor only invisible characters (stripped when recorded).
StaffReason = Annotated[str, Field(min_length=1, max_length=MAX_REASON, pattern=REASON_PATTERN,
                                   description="why (recorded with the action; not blank)")]
Mode = Literal["manual", "backfill"]


def period_text(period: date) -> str:
    """``date(2027, 2, 1)`` -> ``"2027-02"``."""
    return f"{period.year:04d}-{period.month:02d}"


# --------------------------------------------------------------------------------- models


class SnapshotRunRequest(BaseModel):
    """``POST /snapshots/runs``: a staff request. ``mode`` ``manual`` re-runs a period that
    has runs (a new version); ``backfill`` generates version 1 of a completed period that
    has none. The reason is recorded with the run."""

    model_config = ConfigDict(extra="forbid")

    owner: OwnerName = Field(description="the owner module that registered the type", examples=["platform"])
    snapshot_type: OwnerName = Field(description="the snapshot type", examples=["ar_aging"])
    workspace_id: CanonicalUuid = Field(description="the target workspace")
    period: str = Field(pattern=PERIOD_PATTERN, description="the workspace-local month", examples=["2027-01"])
    mode: Mode
    reason: StaffReason

    @property
    def period_start(self) -> date:
        """The period as the ledger stores it: the month's first day."""
        return date(int(self.period[:4]), int(self.period[5:7]), 1)


class SnapshotRunOut(BaseModel):
    """A snapshot run (one version of a period) as recorded by the ledger."""

    id: UUID
    owner: str
    snapshot_type: str
    workspace_id: UUID
    period: str = Field(description="the workspace-local month, YYYY-MM", examples=["2027-01"])
    version: int = Field(ge=1)
    mode: Literal["planned", "manual", "backfill"]
    state: Literal["planned", "queued", "running", "retry_wait", "published", "failed", "skipped", "cancelled"]
    reason: str | None
    requested_by: str | None
    created_at: UtcDatetime
    protection: Literal["captured", "finalized"] | None = Field(
        None, description="protected history: captured (read into a delivered report) or finalized by staff")
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    cancelled_at: UtcDatetime | None = None
    finalized_by: str | None = None
    finalize_reason: str | None = None
    finalized_at: UtcDatetime | None = None


class StaffActionRequest(BaseModel):
    """A staff action on one run (cancel, finalize): the reason, recorded with it."""

    model_config = ConfigDict(extra="forbid")

    reason: StaffReason


@with_config(ConfigDict(extra="allow"))
class AgingBucket(TypedDict):
    """One aging bucket of a receivable-aging basis: its invoices and their outstanding
    amount in minor units of the basis' currency."""

    invoices: Annotated[int, Field(ge=0)]
    outstanding_minor: int


@with_config(ConfigDict(extra="allow"))
class SnapshotBasis(TypedDict, total=False):
    """What a published version was computed from and checked against, as stored. Each
    snapshot type fills the fields it checks (the others are absent): ``as_of`` the local
    month-end date, ``rows`` the rows written; membership counts: ``memberships``;
    receivable aging: ``currency`` (ISO 4217), ``invoices``, ``outstanding_minor`` (their
    outstanding total in minor units) and ``buckets`` by name. A type may add fields."""

    as_of: date
    rows: Annotated[int, Field(ge=0)]
    memberships: Annotated[int, Field(ge=0)]
    currency: str
    invoices: Annotated[int, Field(ge=0)]
    outstanding_minor: int
    buckets: dict[str, AgingBucket]


class PeriodOut(BaseModel):
    """One period of a workspace's snapshot type: its status and the chosen version (the
    current published one, else the latest run)."""

    owner: str
    snapshot_type: str
    period: str = Field(description="the workspace-local month, YYYY-MM", examples=["2027-01"])
    status: str = Field(description="published, skipped, failed, the active state (planned, queued, running, "
                                    "retry_wait), or missing (an expected month never planned)")
    chosen_version: int | None = Field(ge=1, description="null when missing")
    run_id: UUID | None = Field(description="the chosen version's run; null when missing")
    basis: SnapshotBasis | None = Field(description="what the published rows were computed from and checked "
                                                       "against")
    published_at: UtcDatetime | None
    skip_reason: str | None = Field(description="why the period is not generated (skipped)",
                                    examples=["workspace_loading"])
    overdue: bool = Field(description="not published (nor skipped) 24 hours after its local month end")
    attempts: int | None = Field(None, ge=0, description="the chosen version's attempts; null when missing")
    failure_code: str | None = Field(None, description="why the chosen version failed (failed), or why its last "
                                                       "attempt did (retry_wait)", examples=["retries_exhausted"])
    latest_version: int | None = Field(None, ge=1, description="the newest version, whatever its state (a re-run "
                                                                "queued, running or failed beside the published one)")
    latest_state: str | None = Field(None, description="the newest version's state")
    latest_failure_code: str | None = Field(None, description="the newest version's failure code")
    protection: str | None = Field(None, description="the chosen version's protection: captured or finalized "
                                                     "(a re-run is refused)")
    versions: int = Field(0, ge=0, description="how many versions (runs) the period has: GET "
                                               "/snapshots/workspaces/{id}/periods/{owner}/{type}/{period} lists them")


class PeriodVersionOut(BaseModel):
    """One version (run) of a snapshot period, with its attempts and failure."""

    run_id: UUID
    version: int = Field(ge=1)
    mode: str = Field(description="planned, manual (a staff re-run) or backfill")
    state: str = Field(description="planned, queued, running, retry_wait, published, failed, skipped or "
                                   "cancelled")
    current: bool = Field(description="the period's published version readers see")
    protection: str | None = Field(None, description="captured (read into a delivered report) or finalized (by "
                                                     "staff): a current protected version refuses re-runs")
    chunks_committed: int = Field(0, ge=0, description="chunks the attempts committed")
    started_at: UtcDatetime | None = Field(None, description="the latest attempt's start")
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    cancelled_at: UtcDatetime | None = None
    finalized_by: str | None = None
    finalize_reason: str | None = None
    finalized_at: UtcDatetime | None = None
    reason: str | None = Field(description="the staff request's reason")
    requested_by: str | None
    requested_by_name: str | None = Field(None, description="the requester's display name (null: none known)")
    cancelled_by_name: str | None = Field(None, description="who cancelled it, by display name")
    finalized_by_name: str | None = Field(None, description="who finalized it, by display name")
    attempts: int = Field(ge=0, description="attempts started")
    retryable_failures: int = Field(ge=0, description="attempts that failed and were retried (the fourth is final)")
    failure_code: str | None = Field(description="why it failed (failed), or why its last attempt did (retry_wait)",
                                     examples=["retries_exhausted"])
    failure_message: str | None
    skip_reason: str | None
    retry_due_at: UtcDatetime | None
    created_at: UtcDatetime
    published_at: UtcDatetime | None
    failed_at: UtcDatetime | None = Field(None, description="when it failed (failed; null otherwise)")
    request_group: UUID | None = Field(None, description="the range request that planned it (staff: "
                                                         "GET /snapshots/ranges/{group_id}); null otherwise")


class AdmissionOut(BaseModel):
    """What the period's newest version, planned, waits for (staff's reads): admission runs
    every ``pass_every_minutes`` and admits the owner's oldest waiting runs while fewer than
    ``cap`` are queued or running (every workspace), ``backfill_lane`` of them kept for
    backfills while one waits (regular runs then use the rest)."""

    in_flight: int = Field(ge=0, description="the owner's runs queued or running now, every workspace")
    backfills_in_flight: int = Field(ge=0, description="the backfills among them")
    ahead: int = Field(ge=0, description="waiting runs of its lane admission takes before it (oldest first)")
    backfill: bool = Field(description="the version is a backfill (its lane: the backfill lane)")
    backfill_active: bool = Field(description="a backfill waits or runs: regular runs use cap - backfill_lane slots")
    cap: int = Field(ge=1)
    backfill_lane: int = Field(ge=0)
    pass_every_minutes: int = Field(ge=1)


class PeriodVersions(BaseModel):
    """Every version of one period of a workspace's snapshot type, newest first."""

    workspace_id: UUID
    workspace_name: str = Field("", description="the workspace's name")
    timezone: str = Field(description="the workspace's IANA zone: where its months end")
    owner: str
    snapshot_type: str
    period: str = Field(description="the workspace-local month, YYYY-MM", examples=["2027-01"])
    label: str = Field("", description="the snapshot type's name in words")
    versions: list[PeriodVersionOut]
    admission: AdmissionOut | None = Field(None, description="what the newest version waits for while it is "
                                                             "planned (staff only; null otherwise)")


class SnapshotTypeOut(BaseModel):
    """A snapshot type enabled in this deployment: its owner module, name and label."""

    owner: str = Field(examples=["platform"])
    snapshot_type: str = Field(examples=["ar_aging"])
    label: str = Field(examples=["Receivables aging"])


class PeriodList(BaseModel):
    """A page of a workspace's snapshot periods: every expected month of each enabled type
    (since the workspace's first month) and every period with runs, by owner and type,
    newest first per type; pass ``next_cursor`` as ``cursor`` for the next page."""

    workspace_id: UUID
    workspace_name: str = Field("", description="the workspace's name")
    timezone: str = Field(description="the workspace's IANA zone: where its months end")
    locale: str = Field("en_US", description="the workspace's CLDR locale: how its people read numbers and amounts",
                        examples=["de_DE"])
    items: list[PeriodOut]
    next_cursor: str | None = Field(None, description="opaque; null on the last page")
    types: list[SnapshotTypeOut] = Field(default_factory=list, description="the snapshot types enabled in this "
                                         "deployment, by owner and name (what a staff request may name)")


def run_out(run: SnapshotRun) -> SnapshotRunOut:
    """A ledger :class:`~timekeeper.snapshots.ledger.SnapshotRun` as :class:`SnapshotRunOut`."""
    return SnapshotRunOut(id=run.id, owner=run.owner, snapshot_type=run.snapshot_type, workspace_id=run.workspace_id,
                          period=period_text(run.period), version=run.version, mode=run.mode, state=run.state,
                          reason=run.reason, requested_by=run.requested_by, created_at=run.created_at,
                          protection=run.protection, cancelled_by=run.cancelled_by, cancel_reason=run.cancel_reason,
                          cancelled_at=run.cancelled_at, finalized_by=run.finalized_by,
                          finalize_reason=run.finalize_reason, finalized_at=run.finalized_at)


def period_out(status: PeriodStatus) -> PeriodOut:
    """A ledger :class:`~timekeeper.snapshots.ledger.PeriodStatus` as :class:`PeriodOut`."""
    return PeriodOut(owner=status.owner, snapshot_type=status.snapshot_type, period=period_text(status.period),
                     status=status.status, chosen_version=status.chosen_version, run_id=status.run_id,
                     basis=status.basis, published_at=status.published_at, skip_reason=status.skip_reason,
                     overdue=status.overdue, attempts=status.attempts, failure_code=status.failure_code,
                     latest_version=status.latest_version, latest_state=status.latest_state,
                     latest_failure_code=status.latest_failure_code, versions=status.versions,
                     protection=status.protection)


def _admission(found: PeriodVersions_) -> AdmissionOut | None:
    queue = found.admission
    if queue is None:
        return None
    return AdmissionOut(in_flight=queue.in_flight, backfills_in_flight=queue.backfills_in_flight, ahead=queue.ahead,
                        backfill=found.versions[0].mode == "backfill", backfill_active=queue.backfill_active,
                        cap=SNAPSHOTS.admission_cap, backfill_lane=SNAPSHOTS.backfill_lane,
                        pass_every_minutes=SNAPSHOTS.dispatcher_rate_minutes)


def period_versions_out(found: PeriodVersions_ | None, *, owner: str, snapshot_type: str,
                        period: str, label: str = "") -> PeriodVersions:
    """Every version of a period as :class:`PeriodVersions`, people by name beside their
    ids; a 404 :class:`ApiError` when ``found`` is None (no such workspace)."""
    if found is None:
        raise ApiError(404, errors.NOT_FOUND, "no such workspace")
    names = found.names
    return PeriodVersions(
        workspace_id=found.workspace.id, workspace_name=found.workspace.name, timezone=found.workspace.timezone,
        owner=owner, snapshot_type=snapshot_type, label=label, admission=_admission(found),
        period=period, versions=[PeriodVersionOut(
            run_id=r.id, version=r.version, mode=r.mode, state=r.state, current=r.is_current, reason=r.reason,
            requested_by=r.requested_by, requested_by_name=names.get(r.requested_by or ""),
            cancelled_by_name=names.get(r.cancelled_by or ""), finalized_by_name=names.get(r.finalized_by or ""),
            attempts=r.attempts, retryable_failures=r.retryable_failures,
            failure_code=r.failure_code, failure_message=r.failure_message, skip_reason=r.skip_reason,
            retry_due_at=r.retry_due_at, created_at=r.created_at, published_at=r.published_at,
            protection=r.protection, chunks_committed=r.chunks_committed, started_at=r.started_at,
            cancelled_by=r.cancelled_by, cancel_reason=r.cancel_reason, cancelled_at=r.cancelled_at,
            finalized_by=r.finalized_by, finalize_reason=r.finalize_reason, finalized_at=r.finalized_at,
            failed_at=r.updated_at if r.state == "failed" else None, request_group=r.request_group)
            for r in found.versions])


#: A period listing's cursor: ``<owner>:<type>:<YYYY-MM>`` of the previous page's last period.
PERIOD_CURSOR_PATTERN = r"^[a-z][a-z0-9_]{0,63}:[a-z][a-z0-9_]{0,63}:[1-9][0-9]{3}-(0[1-9]|1[0-2])$"
#: Periods per page: at most, and by default.
MAX_PERIODS_PAGE, DEFAULT_PERIODS_PAGE = 500, 100


def period_cursor(key: PeriodKey | None) -> str | None:
    """The cursor of a period listing's next page, or None."""
    return None if key is None else f"{key[0]}:{key[1]}:{period_text(key[2])}"


def decode_period_cursor(cursor: str | None) -> PeriodKey | None:
    """Inverse of :func:`period_cursor` (the route's pattern has checked its shape)."""
    if not cursor:
        return None
    owner, snapshot_type, month = cursor.split(":")
    year, number = month.split("-")
    return owner, snapshot_type, date(int(year), int(number), 1)


def period_list(found: WorkspacePeriods | None, types: SnapshotRegistry) -> PeriodList:
    """The listing of ``found`` with the enabled ``types``; a 404 :class:`ApiError` when
    ``found`` is None (no such workspace)."""
    if found is None:
        raise ApiError(404, errors.NOT_FOUND, "no such workspace")
    return PeriodList(workspace_id=found.workspace.id, workspace_name=found.workspace.name,
                      timezone=found.workspace.timezone, locale=found.workspace.locale,
                      items=[period_out(p) for p in found.periods], next_cursor=period_cursor(found.next),
                      types=[SnapshotTypeOut(owner=t.owner, snapshot_type=t.name, label=t.label)
                             for t in sorted(types.enabled(), key=lambda t: (t.owner, t.name))])


# ------------------------------------------------------------------------------ refusals


def refusal(error: RequestRefused | UnknownSnapshotType, registry: SnapshotRegistry, owner: str) -> ApiError:
    """The :class:`ApiError` of a ledger refusal: its reason is the ``code``; the status and
    field are :data:`REFUSALS`' (``unsupported_type`` names ``owner`` when the owner
    registered no snapshot type at all)."""
    status, field = REFUSALS.get(error.reason, (409, None))
    if error.reason == "unsupported_type" and not any(t.owner == owner for t in registry.all()):
        field = "owner"
    return ApiError(status, error.reason, str(error), field)


_ERRORS = {
    401: "No or invalid authorizer claims",
    403: "The caller's roles do not allow this (forbidden), or the caller is not an active member of the "
         "token's workspace (not_a_member, left_workspace, user_deactivated)",
    404: "No such workspace (or not the caller's)",
    409: "The ledger refuses the request in the period's state; the code is the reason",
    415: "The body is not application/json",
    422: "Invalid input, or a type, workspace or period the ledger does not know; the code is the reason",
}
_responses = partial(errors.responses, texts=_ERRORS)


# -------------------------------------------------------------------------------- routes


Staff = Annotated[StaffScope, Depends(staff_scope)]
Caller = Annotated[Identity, Depends(caller_identity)]
Reader = Annotated[WorkspaceScope, Depends(scope_for(SNAPSHOTS_READ))]

OwnerFilter = Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=64,
                                          description="only this owner module's types")]
TypeFilter = Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=64, description="only this snapshot type")]
PageLimit = Annotated[int, Query(ge=1, le=MAX_PERIODS_PAGE, description="periods per page")]
PageCursor = Annotated[str | None, Query(pattern=PERIOD_CURSOR_PATTERN, max_length=140,
                                         description="next_cursor of the previous page")]

#: The snapshot routes. The app's adapters (:data:`~timekeeper.api.routing.Api`) give
#: ``connection()`` (the API's walled connection), ``now()`` (the clock, read once per
#: request) and ``snapshot_registry()`` (the deployment's snapshot types).
router = ApiRouter()


#: The ``Idempotency-Key`` header of a staff request.
StaffKey = Annotated[str | None, idempotency_header(
    "repeat a request safely: the same key answers the first answer again (Idempotent-Replayed: true)")]


@router.post("/snapshots/runs", tags=_TAGS, operation_id="requestSnapshotRun", security=SECURITY,
             summary="Staff: request a re-run (manual) or a backfill of a workspace's period, with a reason",
             responses=_responses(201, "Recorded: the run waits for admission (a replay: the first answer)", 409,
                                  415, texts={**_ERRORS, 409: _ERRORS[409] + "; or " + errors.KEY_REUSED_TEXT},
                                  headers=errors.REPLAYED))
def request_snapshot_run(scope: Staff, body: Annotated[SnapshotRunRequest, Body()],
                         idempotency_key: StaffKey = None) -> Response[SnapshotRunOut]:
    def create() -> Response[SnapshotRunOut]:
        try:
            run = scope.request_run(owner=body.owner, snapshot_type=body.snapshot_type,
                                    workspace_id=body.workspace_id, period=body.period_start, mode=body.mode,
                                    reason=body.reason)
        except (RequestRefused, UnknownSnapshotType) as refused:
            raise refusal(refused, scope.registry, body.owner) from None
        except ValueError as invalid:  # the body's checks make this unreachable; never a 500
            raise ApiError(422, errors.VALIDATION_ERROR, str(invalid)) from None
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=run_out(run))

    return scope.create_once(idempotency_key, body, create)


@router.get("/snapshots/periods", tags=_TAGS, operation_id="listSnapshotPeriods", security=SECURITY,
            summary="The caller's workspace's snapshot periods: status, chosen version, basis, overdue",
            responses=_responses(200, "The periods, newest first per type", 404))
def list_own_periods(scope: Reader, api: Api, owner: OwnerFilter = None, snapshot_type: TypeFilter = None,
                     limit: PageLimit = DEFAULT_PERIODS_PAGE, cursor: PageCursor = None) -> PeriodList:
    own = WorkspaceSnapshots(identity=scope.identity, conn=scope.conn, now=scope.now)
    adapters = api.adapters
    types = adapters.snapshot_registry()
    return period_list(own.periods(owner=owner, snapshot_type=snapshot_type, types=types.enabled(),
                                   after=decode_period_cursor(cursor), limit=limit), types)


@router.get("/snapshots/workspaces/<workspace_id>/periods", tags=_TAGS,
            operation_id="listWorkspaceSnapshotPeriods", security=SECURITY,
            summary="Staff: any workspace's snapshot periods (a reader: only their own workspace)",
            responses=_responses(200, "The periods, newest first per type", 404))
def list_workspace_periods(identity: Caller, api: Api,
                           workspace_id: Annotated[CanonicalUuid, Path(description="the workspace")],
                           owner: OwnerFilter = None, snapshot_type: TypeFilter = None,
                           limit: PageLimit = DEFAULT_PERIODS_PAGE, cursor: PageCursor = None) -> PeriodList:
    adapters = api.adapters
    types = adapters.snapshot_registry()
    after = decode_period_cursor(cursor)
    if identity.roles & staff_roles(types):
        scope = StaffScope.of(identity, conn=adapters.connection(), now=adapters.now(), registry=types)
        return period_list(scope.periods(workspace_id, owner=owner, snapshot_type=snapshot_type, after=after,
                                         limit=limit), types)
    if SNAPSHOTS_READ not in identity.permissions:
        raise ApiError(403, errors.FORBIDDEN, f"this action needs a snapshot staff role or {SNAPSHOTS_READ}")
    if workspace_id != identity.workspace_id:
        raise ApiError(404, errors.NOT_FOUND, "no such workspace")
    own = WorkspaceSnapshots(identity=identity, conn=adapters.connection(), now=adapters.now())
    return period_list(own.periods(owner=owner, snapshot_type=snapshot_type, types=types.enabled(),
                                   after=after, limit=limit), types)


@router.get("/snapshots/workspaces/<workspace_id>/periods/<owner>/<snapshot_type>/<period>", tags=_TAGS,
            operation_id="listSnapshotPeriodVersions", security=SECURITY,
            summary="Every version of one snapshot period with its state, attempts and failure code (staff: any "
                    "workspace; a reader: their own)",
            responses=_responses(200, "The period's versions, newest first", 404))
def list_period_versions(identity: Caller, api: Api,
                         workspace_id: Annotated[CanonicalUuid, Path(description="the workspace")],
                         owner: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64,
                                                    description="the owner module")],
                         snapshot_type: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64,
                                                            description="the snapshot type")],
                         period: Annotated[str, Path(pattern=PERIOD_PATTERN, max_length=7,
                                                     description="the workspace-local month, YYYY-MM")],
                         ) -> PeriodVersions:
    month = date(int(period[:4]), int(period[5:7]), 1)
    adapters = api.adapters
    types = adapters.snapshot_registry()
    if identity.roles & staff_roles(types):
        scope = StaffScope.of(identity, conn=adapters.connection(), now=adapters.now(), registry=types)
        found = scope.versions(workspace_id, owner=owner, snapshot_type=snapshot_type, period=month)
    elif SNAPSHOTS_READ not in identity.permissions:
        raise ApiError(403, errors.FORBIDDEN, f"this action needs a snapshot staff role or {SNAPSHOTS_READ}")
    elif workspace_id != identity.workspace_id:
        raise ApiError(404, errors.NOT_FOUND, "no such workspace")
    else:
        own = WorkspaceSnapshots(identity=identity, conn=adapters.connection(), now=adapters.now())
        found = own.versions(owner=owner, snapshot_type=snapshot_type, period=month)
    known = next((t for t in types.all() if (t.owner, t.name) == (owner, snapshot_type)), None)
    return period_versions_out(found, owner=owner, snapshot_type=snapshot_type, period=period,
                               label=known.label if known else "")


RunId = Annotated[CanonicalUuid, Path(description="the run (one version of a period)")]
WorkspaceId = Annotated[CanonicalUuid, Path(description="the workspace")]


def _staff_action(scope: StaffScope, action: str, workspace_id: UUID, run_id: UUID,
                  body: StaffActionRequest) -> SnapshotRunOut:
    try:
        return run_out(scope.act_on_run(action, workspace_id, run_id, reason=body.reason))
    except StaffActionRefused as refused:
        raise ApiError(409, refused.reason, str(refused)) from None
    except ValueError as invalid:  # the body's check makes this unreachable; never a 500
        raise ApiError(422, errors.VALIDATION_ERROR, str(invalid), "reason") from None


@router.post("/snapshots/workspaces/<workspace_id>/runs/<run_id>/cancel", tags=_TAGS,
             operation_id="cancelSnapshotRun", security=SECURITY,
             summary="Staff: cancel a planned or queued snapshot run, with a reason",
             responses=_responses(200, "Cancelled: who, why and when are recorded on the run", 404, 409, 415))
def cancel_snapshot_run(scope: Staff, workspace_id: WorkspaceId, run_id: RunId,
                        body: Annotated[StaffActionRequest, Body()]) -> SnapshotRunOut:
    return _staff_action(scope, "cancel", workspace_id, run_id, body)


@router.post("/snapshots/workspaces/<workspace_id>/runs/<run_id>/finalize", tags=_TAGS,
             operation_id="finalizeSnapshotVersion", security=SECURITY,
             summary="Staff: finalize a published snapshot version (protected history), with a reason",
             responses=_responses(200, "Finalized: a re-run of the period is refused while it is current", 404,
                                  409, 415))
def finalize_snapshot_version(scope: Staff, workspace_id: WorkspaceId, run_id: RunId,
                              body: Annotated[StaffActionRequest, Body()]) -> SnapshotRunOut:
    return _staff_action(scope, "finalize", workspace_id, run_id, body)
