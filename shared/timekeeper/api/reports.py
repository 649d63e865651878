"""The report routes: create, edit (a new version), list and read reports; request a
render and read it (with a presigned download link once it succeeded).

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

from collections.abc import Callable
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.event_handler.request import Request
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import REPORTS_READ, REPORTS_WRITE, Identity, identity_from_event
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import ApiError
from timekeeper.api.models import CURSOR_PATTERN, CanonicalUuid, decode_cursor, encode_cursor
from timekeeper.api.scope import claim_key
from timekeeper.db.keyset import split_page
from timekeeper.observability import set_log_keys
from timekeeper.platform import access
from timekeeper.queries import rendering
from timekeeper.queries import reports as store
from timekeeper.queries.definition import InvalidDefinition
from timekeeper.queries.reports import ReportDefinition

#: How long a download link of a rendered report is valid (seconds).
DOWNLOAD_URL_TTL_S = 60

ReportId = Annotated[CanonicalUuid, Path(description="the report's id")]
RenderId = Annotated[CanonicalUuid, Path(description="the render's id")]


class ReportCreate(BaseModel):
    """``POST /reports``: a report named ``name`` with version 1 of ``definition``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    definition: ReportDefinition


class ReportEdit(BaseModel):
    """``PUT /reports/{report_id}``: the next version's ``definition`` (and a new ``name``)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    definition: ReportDefinition


class ReportOut(BaseModel):
    """A report: its current version's number; instants in UTC."""

    id: UUID
    name: str
    current_version: int
    created_by: str
    created_at: datetime
    updated_at: datetime


class ReportDetail(ReportOut):
    """A report with its current version's definition."""

    definition: ReportDefinition
    version_created_by: str
    version_created_at: datetime


class ReportPage(BaseModel):
    """A page of reports, oldest first; ``next_cursor`` None on the last page."""

    items: list[ReportOut]
    next_cursor: str | None = None


class RenderOut(BaseModel):
    """A render of a report version to PDF. ``state``: requested -> rendering ->
    succeeded | failed. When it succeeded, ``download_url`` is a presigned link valid
    until ``download_expires_at`` (60 s); when it failed, ``error_code`` says why (an
    access reason, ``definition_invalid``, ``attempts_exhausted``, ``unexpected_error``)."""

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
    download_url: str | None = None
    download_expires_at: datetime | None = None


_ERROR_TEXTS = {401: "No or invalid authorizer claims",
                403: "The caller's roles, or the access rule (code: its reason), do not allow this",
                404: "No such report or render in the caller's workspace",
                409: "The Idempotency-Key names another request of the caller's, e.g. a render of another report",
                415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}


def responses(status: int, description: str, *error_codes: int) -> dict[int, dict[str, Any]]:
    """The OpenAPI responses of a report route: ``status`` and the error statuses with
    :class:`~timekeeper.api.errors.ErrorBody`."""
    out: dict[int, dict[str, Any]] = {status: {"description": description}}
    for code in (401, 403, 422, *error_codes):
        out[code] = {"description": _ERROR_TEXTS[code],
                     "content": {content_types.APPLICATION_JSON: {"model": errors.ErrorBody}}}
    return out


def _report_out(report: store.Report) -> ReportOut:
    return ReportOut(id=report.id, name=report.name, current_version=report.current_version,
                     created_by=report.created_by, created_at=report.created_at, updated_at=report.updated_at)


def _detail(report: store.Report, version: store.ReportVersion) -> ReportDetail:
    return ReportDetail(**_report_out(report).model_dump(), definition=version.parsed(),
                        version_created_by=version.created_by, version_created_at=version.created_at)


class ReportScope:
    """The caller (``identity``) in their workspace on the API's walled connection at ``now``."""

    def __init__(self, identity: Identity, conn: TenantConnection, now: datetime, method: str = "",
                 path: str = "") -> None:
        self.identity = identity
        self.conn = conn
        self.now = now
        self.method = method
        self.path = path

    @property
    def workspace_id(self) -> UUID:
        return self.identity.workspace_id

    def require(self, permission: str, report_id: UUID | None = None) -> None:
        """Ask the access rule for the caller (and ``report_id``); raise 403 with the rule's
        reason, or 404 when the report is not in the workspace."""
        with self.conn.entered(self.workspace_id), self.conn.transaction():
            if report_id is None:
                decision = access.check_person(self.conn, workspace_id=self.workspace_id,
                                               user_id=self.identity.user_id, permission=permission)
            else:
                decision = access.check_report(self.conn, workspace_id=self.workspace_id,
                                               user_id=self.identity.user_id, report_id=report_id,
                                               permission=permission)
        if decision:
            return
        if decision.reason == access.NOT_FOUND:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such report in this workspace")
        raise ApiError(HTTPStatus.FORBIDDEN, decision.reason or errors.FORBIDDEN,
                       f"the access rule refuses {permission}: {decision.reason}")

    def call(self, action: Callable[..., Any], /, **kwargs: Any) -> Any:
        """``action(conn, workspace_id=..., **kwargs)`` in the caller's workspace; maps the
        store's refusals to 404 and 422 (the field under ``definition``)."""
        try:
            with self.conn.entered(self.workspace_id):
                return action(self.conn, workspace_id=self.workspace_id, **kwargs)
        except (store.ReportNotFound, rendering.RenderNotFound):
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such report or render in this workspace") \
                from None
        except InvalidDefinition as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, error.reason,
                           f"definition.{error.field}") from None


def register_report_routes(route: Callable[..., Any], *, connection: Callable[[], TenantConnection],
                           now: Callable[[], datetime], renderer: Callable[[], Any] | None,
                           files: Callable[[], tuple[Any, str]] | None,
                           security: list[dict[str, list[str]]]) -> None:
    """Add the report routes through ``route`` (``create_app``'s recording ``app.route``).

    ``connection()``: the API's walled connection; ``now()``: the clock; ``renderer()``: a
    :class:`~timekeeper.aws.renderer.RendererClient`; ``files()``: ``(s3 client, files
    bucket)`` for download links; ``security``: the routes' OpenAPI security requirement.
    Without ``renderer`` or ``files`` the render routes answer 500 (the document is the same
    either way).
    """

    def scope_for(permission: str) -> Callable[[Request], ReportScope]:
        def scope(request: Request) -> ReportScope:
            identity = identity_from_event(request.resolved_event.raw_event)
            set_log_keys(workspace_id=identity.workspace_id)
            if permission not in identity.permissions:
                raise ApiError(HTTPStatus.FORBIDDEN, errors.FORBIDDEN, f"this action needs the role {permission}")
            return ReportScope(identity, connection(), now(), request.method.upper(), request.resolved_event.path)

        scope.__name__ = f"report_scope_{permission.replace(':', '_')}"
        return scope

    Reader = Annotated[ReportScope, Depends(scope_for(REPORTS_READ))]  # noqa: N806 - type aliases
    Writer = Annotated[ReportScope, Depends(scope_for(REPORTS_WRITE))]  # noqa: N806

    @route("POST", "/reports", tags=["reports"], operation_id="createReport", security=security,
           summary="Create a report (version 1); its sections' queries must be in the workspace",
           responses=responses(201, "Created", 415))
    def create_report(scope: Writer, body: Annotated[ReportCreate, Body()]) -> Response[ReportDetail]:
        scope.require(access.REPORTS_WRITE)
        report, version = scope.call(store.create_report, name=body.name, definition=body.definition,
                                     actor=scope.identity.user_id, now=scope.now)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=_detail(report, version), headers={"Location": f"/reports/{report.id}"})

    @route("PUT", "/reports/<report_id>", tags=["reports"], operation_id="editReport", security=security,
           summary="Save a new version of the report and make it current (earlier versions stay)",
           responses=responses(200, "The report at its new version", 404, 415))
    def edit_report(scope: Writer, report_id: ReportId, body: Annotated[ReportEdit, Body()]) -> ReportDetail:
        scope.require(access.REPORTS_WRITE, report_id)
        report, version = scope.call(store.update_report, report_id=report_id, definition=body.definition,
                                     name=body.name, actor=scope.identity.user_id, now=scope.now)
        return _detail(report, version)

    @route("GET", "/reports", tags=["reports"], operation_id="listReports", security=security,
           summary="List the workspace's reports (cursor pagination)",
           responses=responses(200, "A page of reports, oldest first"))
    def list_reports(
        scope: Reader,
        limit: Annotated[int, Query(ge=1, le=200, description="page size")] = 50,
        cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                            description="next_cursor of the previous page")] = None,
    ) -> ReportPage:
        scope.require(access.REPORTS_READ)
        rows, after = split_page(scope.call(store.list_reports, after=decode_cursor(cursor), limit=limit + 1),
                                 limit, lambda r: (r.created_at, r.id))
        return ReportPage(items=[_report_out(r) for r in rows], next_cursor=encode_cursor(after))

    @route("GET", "/reports/<report_id>", tags=["reports"], operation_id="getReport", security=security,
           summary="A report with its current version's definition", responses=responses(200, "The report", 404))
    def get_report(scope: Reader, report_id: ReportId) -> ReportDetail:
        scope.require(access.REPORTS_READ, report_id)
        return _detail(*scope.call(store.get_report, report_id=report_id))

    def configured(adapter: Callable[[], Any] | None, name: str) -> Any:
        if adapter is None:
            raise RuntimeError(f"the API was built without its {name} adapter")
        return adapter()

    def render_out(row: rendering.ReportRender, scope: ReportScope) -> RenderOut:
        out = RenderOut(id=row.id, report_id=row.report_id, report_version=row.report_version, state=row.state,
                        attempts=row.attempts, requested_at=row.requested_at, finished_at=row.finished_at,
                        byte_size=row.byte_size, page_count=row.page_count, sha256=row.sha256,
                        error_code=row.error_code)
        if row.state == "succeeded" and row.object_key:
            s3, bucket = configured(files, "files")
            out.download_url = s3.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": row.object_key,
                                      "ResponseContentType": rendering.PDF_CONTENT_TYPE},
                ExpiresIn=DOWNLOAD_URL_TTL_S)
            out.download_expires_at = scope.now + timedelta(seconds=DOWNLOAD_URL_TTL_S)
        return out

    @route("POST", "/reports/<report_id>/renders", tags=["reports"], operation_id="renderReport",
           security=security, summary="Render the report's current version to PDF (the same Idempotency-Key "
                                      "returns the same render)",
           responses=responses(202, "Accepted: the render is requested", 404, 409))
    def request_render(
        scope: Reader, report_id: ReportId,
        idempotency_key: Annotated[str, Header(
            alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
            description="required: the same key returns the same render")],
    ) -> Response[RenderOut]:
        scope.require(access.REPORTS_READ, report_id)
        key = claim_key(scope.conn, scope.identity, method=scope.method, path=scope.path, key=idempotency_key,
                        body=None, now=scope.now)
        try:
            row = scope.call(rendering.request_render, report_id=report_id, idempotency_key=key,
                             requested_by=scope.identity.user_id, now=scope.now)
        except rendering.IdempotencyKeyReused:
            raise ApiError(HTTPStatus.CONFLICT, "idempotency_key_reused",
                           "this Idempotency-Key already names a render of another report", "Idempotency-Key") \
                from None
        if not row.terminal:
            try:  # committed: a refused request leaves it requested; repeating the key asks again
                configured(renderer, "renderer").request(workspace_id=scope.workspace_id, render_id=row.id)
            except Exception as error:  # noqa: BLE001 - the render stays requested, visible to the caller
                errors.log_unexpected(error, "render request")
        return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                        body=render_out(row, scope), headers={"Location": f"/reports/{report_id}/renders/{row.id}"})

    @route("GET", "/reports/<report_id>/renders/<render_id>", tags=["reports"], operation_id="getRender",
           security=security, summary="A render's state, with a download link valid 60 s once it succeeded",
           responses=responses(200, "The render", 404))
    def get_render(scope: Reader, report_id: ReportId, render_id: RenderId) -> RenderOut:
        scope.require(access.REPORTS_READ, report_id)
        row = scope.call(rendering.get_render, render_id=render_id)
        if row.report_id != report_id:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such render of this report")
        return render_out(row, scope)
