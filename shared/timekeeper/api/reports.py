"""The report routes: create, edit (a new version), list and read reports and their
versions; request a render and read it (with a presigned download link once it succeeded).

Each route needs a role in the caller's claims (``reports:read`` or ``reports:write``,
:mod:`timekeeper.api.auth`), then THE access rule
(:func:`timekeeper.platform.access.check_person` / ``check_report``) for the caller's
membership as the database knows it, in the caller's workspace: a refusal is a 403 whose
``code`` is the rule's reason (``left_workspace``, ``missing_role``, ...), an object the
workspace does not have a 404. An invalid definition is a 422 naming the field
(``definition.sections[0].query_id``).

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import REPORTS_READ, REPORTS_WRITE
from timekeeper.api.errors import ApiError
from timekeeper.api.models import CURSOR_PATTERN, PLAIN_PATTERN, CanonicalUuid, PlainText, decode_cursor, encode_cursor
from timekeeper.api.people_routes import ZONE_TEXT
from timekeeper.api.routing import SECURITY, Api, ApiRouter, idempotency_header
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.db import idempotency
from timekeeper.db.keyset import split_page
from timekeeper.platform import access
from timekeeper.platform.directory import workspace_timezone
from timekeeper.reporting import rendering
from timekeeper.reporting import reports as store
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.reporting.reports import ReportDefinition
from timekeeper.settings import report_retention_days

#: How long a download link of a rendered report is valid (seconds).
DOWNLOAD_URL_TTL_S = 60

ReportId = Annotated[CanonicalUuid, Path(description="the report's id")]
RenderId = Annotated[CanonicalUuid, Path(description="the render's id")]


class ReportCreate(BaseModel):
    """``POST /reports``: a report named ``name`` with version 1 of ``definition``."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=200, pattern=PLAIN_PATTERN), PlainText]
    definition: ReportDefinition


class ReportEdit(BaseModel):
    """``PUT /reports/{report_id}``: the next version's ``definition`` (and a new ``name``)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=200, pattern=PLAIN_PATTERN), PlainText] | None = None
    definition: ReportDefinition


class ReportOut(BaseModel):
    """A report: its current version's number; instants in UTC."""

    id: UUID
    name: str
    current_version: int
    created_by: str
    created_at: datetime
    updated_at: datetime


class SnapshotSourceOut(BaseModel):
    """The snapshot a section's query reads: its ``owner`` module and ``snapshot_type``."""

    owner: str
    snapshot_type: str


class ReportUseOut(BaseModel):
    """A delivery schedule of the workspace whose source is the report."""

    schedule_id: UUID
    name: str


class ReportDetail(ReportOut):
    """A report with its current version's definition; ``snapshot_sources`` names per
    section (in order) the snapshot its query reads (null for other data), what a render
    over a picked month changes; ``used_by`` lists the workspace's delivery schedules whose
    source is the report (each delivery renders the current version when it runs), by
    name; ``timezone`` is the workspace's zone the console shows the instants in."""

    definition: ReportDefinition
    version_created_by: str
    version_created_at: datetime
    snapshot_sources: list[SnapshotSourceOut | None] = Field(
        default_factory=list, description="per section, the snapshot its query reads (null: other data)")
    used_by: list[ReportUseOut] = Field(
        default_factory=list, description="the workspace's delivery schedules whose source is this report, by name")
    timezone: str = Field("UTC", description=ZONE_TEXT)


class ReportListItem(ReportOut):
    """A report as the list shows it: its current version's ``sections`` count and who
    saved that version (``updated_by``, at ``updated_at``)."""

    sections: int = Field(description="the current version's number of sections")
    updated_by: str = Field(description="who saved the current version")


class ReportPage(BaseModel):
    """A page of reports, oldest first; ``next_cursor`` None on the last page."""

    items: list[ReportListItem]
    next_cursor: str | None = None
    timezone: str = Field("UTC", description=ZONE_TEXT)


class ReportVersionOut(BaseModel):
    """One saved version of a report: its number, the definition's ``title`` and
    ``sections`` count, who saved it and when (UTC)."""

    version: int
    title: str
    sections: int
    created_by: str
    created_at: datetime


class ReportVersions(BaseModel):
    """Every version of a report, newest first; ``current_version`` marks the current one."""

    current_version: int
    items: list[ReportVersionOut]
    timezone: str = Field("UTC", description=ZONE_TEXT)


class SnapshotBasisOut(BaseModel):
    """The published snapshot version a section showed: the type, the ``period`` (the
    month's first day), the ``version``, when it was published (UTC), its ledger ``run_id``
    and the section's ``choice`` (latest, month or version)."""

    owner: str
    snapshot_type: str
    period: date
    version: int
    published_at: datetime
    run_id: UUID
    choice: Literal["latest", "month", "version"]


#: A month as a render request picks it.
MONTH_PATTERN = errors.pattern_words(r"^[0-9]{4}-(0[1-9]|1[0-2])$", "must be a month YYYY-MM")


class RenderRequest(BaseModel):
    """``POST /reports/{id}/renders`` (optional body): ``month`` (``YYYY-MM``, a workspace
    month) picks the month every snapshot section shows unless it pins a version (the
    period picker); without it each section shows its own choice."""

    model_config = ConfigDict(extra="forbid")

    month: str | None = Field(None, pattern=MONTH_PATTERN, examples=["2027-02"],
                              description="YYYY-MM: the month the snapshot sections show")

    @property
    def period(self) -> date | None:
        """The month's first day, or None."""
        return None if self.month is None else date(int(self.month[:4]), int(self.month[5:]), 1)


class RenderOut(BaseModel):
    """A render of a report version to PDF. ``state``: requested -> rendering ->
    succeeded | failed. When it succeeded, ``download_url`` is a presigned link valid
    until ``download_expires_at`` (60 s) unless the file is past the retention (``expired``
    since ``expired_at``: no link, S3 would refuse it), and ``snapshot_basis`` lists per section (in
    order) the snapshot version it showed (null for a section over other data; the list
    null when no section reads a snapshot); when it failed, ``error_code`` says why (an
    access reason, ``definition_invalid``, ``snapshot_unpublished``, ``attempts_exhausted``,
    ``unexpected_error``)."""

    id: UUID
    report_id: UUID
    report_version: int
    state: Literal["requested", "rendering", "succeeded", "failed"]
    attempts: int
    requested_at: datetime
    finished_at: datetime | None = None
    byte_size: int | None = None
    page_count: int | None = None
    sha256: str | None = None
    error_code: str | None = None
    download_url: str | None = Field(None, description="a presigned link to the PDF (null: not succeeded, or "
                                                       "expired)")
    download_expires_at: datetime | None = None
    expired_at: datetime | None = Field(None, description="when a succeeded render's file is removed (UTC): the "
                                                          "files' retention after it was written, from midnight UTC")
    expired: bool = Field(False, description="the file was removed (past expired_at): render again")
    retention_days: int | None = Field(None, description="how many days a rendered file is kept")
    snapshot_basis: list[SnapshotBasisOut | None] | None = None
    month: str | None = Field(None, description="the month the request picked for the snapshot sections (YYYY-MM), "
                                                "null: each section's own choice")
    timezone: str = Field("UTC", description=ZONE_TEXT)


_ERRORS = {401: "No or invalid authorizer claims",
           403: "The caller's roles, or the access rule (code: its reason), do not allow this",
           404: "No such report or render in the caller's workspace",
           409: "The Idempotency-Key names another request of the caller's, e.g. a render of another report",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
responses = partial(errors.responses, texts=_ERRORS)


def _report_out(report: store.Report) -> ReportOut:
    return ReportOut(id=report.id, name=report.name, current_version=report.current_version,
                     created_by=report.created_by, created_at=report.created_at, updated_at=report.updated_at)


def _detail(conn: Any, workspace_id: UUID, report: store.Report, version: store.ReportVersion) -> ReportDetail:
    definition = version.parsed()
    sources = store.section_snapshots(conn, workspace_id=workspace_id, definition=definition)
    used = store.report_deliveries(conn, workspace_id=workspace_id, report_id=report.id)
    return ReportDetail(**_report_out(report).model_dump(), definition=definition,
                        version_created_by=version.created_by, version_created_at=version.created_at,
                        snapshot_sources=[None if s is None else SnapshotSourceOut(owner=s[0], snapshot_type=s[1])
                                          for s in sources],
                        used_by=[ReportUseOut(schedule_id=u.schedule_id, name=u.name) for u in used],
                        timezone=workspace_timezone(conn, workspace_id))


@contextmanager
def _definition_checked() -> Iterator[None]:
    """An invalid report definition is a 422 naming the field under ``definition``."""
    try:
        yield
    except InvalidDefinition as error:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, error.reason,
                       f"definition.{error.field}") from None


Reader = Annotated[WorkspaceScope, Depends(scope_for(REPORTS_READ))]
Writer = Annotated[WorkspaceScope, Depends(scope_for(REPORTS_WRITE))]

#: The report routes. The app's adapters (:data:`~timekeeper.api.routing.Api`) give
#: ``renderer()`` (a :class:`~timekeeper.aws.renderer.RendererClient`) and ``files()``
#: (``(s3 client, files bucket)``) for download links; without them the render routes
#: answer 500 (the document is the same either way). Each route asks the access rule
#: and reads or writes in ONE transaction of the scope; a render request then asks the
#: renderer after commit.
router = ApiRouter()


@router.exception_handler(store.ReportNotFound)
@router.exception_handler(rendering.RenderNotFound)
def _not_found(_: Exception) -> Response:
    return errors.error_response(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such report or render in this "
                                 "workspace")


@router.post("/reports", tags=["reports"], operation_id="createReport", security=SECURITY,
             summary="Create a report (version 1); its sections' queries must be in the workspace",
             responses=responses(201, "Created", 409, 415, texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT},
                                 headers=errors.CREATED_ONCE))
def create_report(
    scope: Writer, body: Annotated[ReportCreate, Body()],
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key answers what the first request answered")] = None,
) -> Response[ReportDetail]:
    def create() -> Response:
        with _definition_checked(), scope.unit(access.REPORTS_WRITE, noun="report") as conn:
            report, version = store.create_report(conn, workspace_id=scope.workspace_id, name=body.name,
                                                  definition=body.definition, actor=scope.user_id,
                                                  now=scope.now)
            detail = _detail(conn, scope.workspace_id, report, version)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=detail, headers={"Location": f"/reports/{report.id}"})

    return scope.create_once(idempotency_key, body, create)


@router.put("/reports/<report_id>", tags=["reports"], operation_id="editReport", security=SECURITY,
            summary="Save a new version of the report and make it current (earlier versions stay)",
            responses=responses(200, "The report at its new version", 404, 415))
def edit_report(scope: Writer, report_id: ReportId, body: Annotated[ReportEdit, Body()]) -> ReportDetail:
    with _definition_checked(), scope.unit(access.REPORTS_WRITE, report_id=report_id, noun="report") as conn:
        report, version = store.update_report(conn, workspace_id=scope.workspace_id, report_id=report_id,
                                              definition=body.definition, name=body.name, actor=scope.user_id,
                                              now=scope.now)
        return _detail(conn, scope.workspace_id, report, version)


@router.get("/reports", tags=["reports"], operation_id="listReports", security=SECURITY,
            summary="List the workspace's reports (cursor pagination)",
            responses=responses(200, "A page of reports, oldest first"))
def list_reports(
    scope: Reader,
    limit: Annotated[int, Query(ge=1, le=200, description="page size")] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                        description="next_cursor of the previous page")] = None,
) -> ReportPage:
    with scope.unit(access.REPORTS_READ, noun="report") as conn:
        found = store.list_reports(conn, workspace_id=scope.workspace_id, after=decode_cursor(cursor),
                                   limit=limit + 1)
        rows, after = split_page(found, limit, lambda r: (r.created_at, r.id))
        summaries = store.report_summaries(conn, workspace_id=scope.workspace_id, report_ids=[r.id for r in rows])
        zone = workspace_timezone(conn, scope.workspace_id)
    items = [ReportListItem(**_report_out(r).model_dump(), sections=summaries[r.id].sections,
                            updated_by=summaries[r.id].updated_by) for r in rows if r.id in summaries]
    return ReportPage(items=items, next_cursor=encode_cursor(after), timezone=zone)


@router.get("/reports/<report_id>/versions", tags=["reports"], operation_id="listReportVersions",
            security=SECURITY, summary="Every saved version of a report, newest first",
            responses=responses(200, "The report's versions", 404))
def list_report_versions(scope: Reader, report_id: ReportId) -> ReportVersions:
    with scope.unit(access.REPORTS_READ, report_id=report_id, noun="report") as conn:
        report, _ = store.get_report(conn, workspace_id=scope.workspace_id, report_id=report_id)
        versions = store.list_report_versions(conn, workspace_id=scope.workspace_id, report_id=report_id)
        zone = workspace_timezone(conn, scope.workspace_id)
    items = []
    for v in reversed(versions):
        definition = v.definition if isinstance(v.definition, dict) else {}
        items.append(ReportVersionOut(version=v.version, title=str(definition.get("title") or ""),
                                      sections=len(definition.get("sections") or []),
                                      created_by=v.created_by, created_at=v.created_at))
    return ReportVersions(current_version=report.current_version, items=items, timezone=zone)


@router.get("/reports/<report_id>", tags=["reports"], operation_id="getReport", security=SECURITY,
            summary="A report with its current version's definition", responses=responses(200, "The report", 404))
def get_report(scope: Reader, report_id: ReportId) -> ReportDetail:
    with scope.unit(access.REPORTS_READ, report_id=report_id, noun="report") as conn:
        return _detail(conn, scope.workspace_id,
                       *store.get_report(conn, workspace_id=scope.workspace_id, report_id=report_id))


def configured(adapter: Callable[[], Any] | None, name: str) -> Any:
    """``adapter()``: the client the app's adapter ``name`` gives; raises ``RuntimeError``
    (a 500) when the app was built without it."""
    if adapter is None:
        raise RuntimeError(f"the API was built without its {name} adapter")
    return adapter()


def expires_at(written_at: datetime, retention_days: int) -> datetime:
    """When the files bucket's lifecycle rule expires an object written at ``written_at``
    (aware UTC) with a retention of ``retention_days``: that many days later, rounded up to
    the next midnight UTC (as S3 counts). Aware UTC."""
    later = (written_at + timedelta(days=retention_days)).astimezone(UTC)
    midnight = later.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight if midnight == later else midnight + timedelta(days=1)


def render_out(row: rendering.ReportRender, scope: WorkspaceScope, zone: str,
               files: Callable[[], tuple[Any, str]] | None) -> RenderOut:
    """``row`` as the API shows it, instants beside the workspace's ``zone``; a succeeded
    render carries its ``expired_at`` (:func:`expires_at`, the retention of
    :func:`~timekeeper.settings.report_retention_days`) and, until then, a presigned
    download link (valid :data:`DOWNLOAD_URL_TTL_S` seconds from the scope's ``now``) from
    ``files()`` (``(s3 client, bucket)``; None: a 500)."""
    out = RenderOut(timezone=zone, id=row.id, report_id=row.report_id, report_version=row.report_version,
                    state=row.state,
                    attempts=row.attempts, requested_at=row.requested_at, finished_at=row.finished_at,
                    byte_size=row.byte_size, page_count=row.page_count, sha256=row.sha256,
                    error_code=row.error_code, month=None if row.period is None else f"{row.period:%Y-%m}",
                    snapshot_basis=None if row.snapshot_basis is None else [
                        None if b is None else SnapshotBasisOut.model_validate(b) for b in row.snapshot_basis])
    if row.state == "succeeded" and row.object_key and row.finished_at is not None:
        out.retention_days = report_retention_days()
        out.expired_at = expires_at(row.finished_at, out.retention_days)
        out.expired = scope.now >= out.expired_at
    if row.state == "succeeded" and row.object_key and not out.expired:
        s3, bucket = configured(files, "files")
        out.download_url = s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": row.object_key,
                                  "ResponseContentType": rendering.PDF_CONTENT_TYPE},
            ExpiresIn=DOWNLOAD_URL_TTL_S)
        out.download_expires_at = scope.now + timedelta(seconds=DOWNLOAD_URL_TTL_S)
    return out


@router.post("/reports/<report_id>/renders", tags=["reports"], operation_id="renderReport",
             security=SECURITY, summary="Render the report's current version to PDF, optionally over a picked "
                                        "month (the same Idempotency-Key returns the same render)",
             responses=responses(202, "Accepted: the render is requested", 404, 409, headers=errors.LOCATION))
def request_render(
    scope: Reader, api: Api, report_id: ReportId,
    idempotency_key: Annotated[str, idempotency_header("required: the same key returns the same render")],
    body: Annotated[RenderRequest | None, Body()] = None,
) -> Response[RenderOut]:
    scope.check_access(access.REPORTS_READ, report_id=report_id, noun="report")
    key = scope.claim_key(idempotency_key)
    try:
        with scope.unit() as conn:
            row = rendering.request_render(conn, workspace_id=scope.workspace_id, report_id=report_id,
                                           idempotency_key=key, requested_by=scope.user_id, now=scope.now,
                                           period=None if body is None else body.period)
            zone = workspace_timezone(conn, scope.workspace_id)
    except idempotency.KeyReused:
        raise ApiError(HTTPStatus.CONFLICT, errors.IDEMPOTENCY_KEY_REUSED,
                       "this Idempotency-Key already names a render of another report or month",
                       "Idempotency-Key") from None
    if not row.terminal:
        try:  # committed: a refused request leaves it requested; repeating the key asks again
            configured(api.adapters.renderer, "renderer").request(workspace_id=scope.workspace_id, render_id=row.id)
        except Exception as error:  # noqa: BLE001 - the render stays requested, visible to the caller
            errors.log_unexpected(error, "render request")
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=render_out(row, scope, zone, api.adapters.files),
                    headers={"Location": f"/reports/{report_id}/renders/{row.id}"})


@router.get("/reports/<report_id>/renders/<render_id>", tags=["reports"], operation_id="getRender",
            security=SECURITY, summary="A render's state, with a download link valid 60 s once it succeeded",
            responses=responses(200, "The render", 404))
def get_render(scope: Reader, api: Api, report_id: ReportId, render_id: RenderId) -> RenderOut:
    with scope.unit(access.REPORTS_READ, report_id=report_id, noun="report") as conn:
        row = rendering.get_render(conn, workspace_id=scope.workspace_id, render_id=render_id)
        zone = workspace_timezone(conn, scope.workspace_id)
    if row.report_id != report_id:
        raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such render of this report")
    return render_out(row, scope, zone, api.adapters.files)
