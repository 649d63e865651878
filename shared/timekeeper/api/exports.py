"""The export routes: ``POST /queries/{query_id}/exports`` and ``GET /exports/{export_id}``.

Who may do what:

* both routes need the claims role ``queries:read`` (:data:`timekeeper.api.auth.QUERIES_READ`),
  and then the access rule of :mod:`timekeeper.platform.access` for the caller, as the
  directory says now: a refusal is a 403 whose ``code`` is the rule's reason
  (``not_a_member``, ``left_workspace``, ``user_deactivated``, ``missing_role``), and a
  query that is not in the caller's workspace (or deleted) is a 404;
* an export is visible to the person who requested it only: another user's export of the
  same workspace is a 404, exactly like another workspace's (so ids do not leak), and the
  download link is only ever handed to the requester while the rule still lets them read
  queries.

``GET`` on a succeeded export adds a presigned S3 GET URL valid for
:data:`DOWNLOAD_URL_TTL_S` seconds (ask again for a fresh one). ``GET`` on a queued export
that was never published (the queue refused it) offers it to the queue again.

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
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from pydantic import BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import QUERIES_READ
from timekeeper.api.downloads import attachment
from timekeeper.api.errors import error_response
from timekeeper.api.models import CanonicalUuid
from timekeeper.api.routing import SECURITY, Api, ApiRouter, idempotency_header
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.platform import access
from timekeeper.reporting import exports as ex
from timekeeper.reporting.definition import InvalidDefinition
from timekeeper.strict_input import JSON_INTEGER
from timekeeper.topology import EXPORTS

#: How long a download link lives (seconds): long enough to start the download, short
#: enough that a leaked link is soon useless.
DOWNLOAD_URL_TTL_S = 120


class ExportCreate(BaseModel):
    """``POST /queries/{query_id}/exports``: the file format and, optionally, the version to
    export (default: the query's current version, pinned at request time)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["csv", "xlsx"] = Field(description="csv (UTF-8, RFC 4180) or xlsx")
    version: Annotated[int, Field(ge=1, le=2_147_483_647), JSON_INTEGER] | None = Field(None,
                                description="the saved query version; default its current version")


class ExportOut(BaseModel):
    """An export: its state, and once succeeded its counts, checksum and a download link."""

    id: UUID
    query_id: UUID
    query_version: int
    format: str
    state: Literal["queued", "running", "succeeded", "failed"]
    attempts: int
    row_count: int | None = Field(None, description="data rows (the header row is not counted)")
    byte_size: int | None = None
    sha256: str | None = Field(None, description="hex SHA-256 of the file")
    error_code: str | None = Field(None, description="why it failed: an access reason, definition_invalid, "
                                                     "attempts_exhausted")
    error_message: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    download_url: str | None = Field(None, description="presigned GET URL of the file (succeeded only)")
    download_expires_at: datetime | None = None
    created: bool | None = Field(None, description="POST only: false when an earlier request with the same "
                                                   "Idempotency-Key made this export")


def export_out(export: ex.Export, *, created: bool | None = None, url: str | None = None,
               expires_at: datetime | None = None) -> ExportOut:
    """The response model of ``export``."""
    return ExportOut(id=export.id, query_id=export.query_id, query_version=export.query_version,
                     format=export.format, state=export.state, attempts=export.attempts,
                     row_count=export.row_count, byte_size=export.byte_size, sha256=export.sha256,
                     error_code=export.error_code, error_message=export.error_message,
                     created_at=export.created_at, started_at=export.started_at, finished_at=export.finished_at,
                     download_url=url, download_expires_at=expires_at, created=created)


_ERRORS = {401: "No or invalid authorizer claims",
           403: "The caller's roles, or the access rule (code = its reason), do not allow this",
           404: "No such query or export of the caller's",
           409: "The query version no longer checks (definition_invalid), or the Idempotency-Key names another "
                "request of the caller's (idempotency_key_reused)",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}


def _required(adapter: Callable[[], Any] | None) -> Callable[[], Any]:
    if adapter is None:
        raise RuntimeError("the export routes' adapters are not configured")
    return adapter


Reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]

#: The export routes. The app's adapters (:data:`~timekeeper.api.routing.Api`) give
#: ``export_publisher()`` and ``files()`` (an S3 client and the files bucket). The access
#: rule's refusals (403 with the reason, 404 ``not_found``) and unknown queries (404) are
#: answered by the app's own handlers (:mod:`timekeeper.api.errors`). An export request
#: opens its own transactions (it publishes after commit: the scope's ``call``).
router = ApiRouter()


@router.exception_handler(ex.ExportNotFound)
def _export_not_found(_: ex.ExportNotFound) -> Response:
    return error_response(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such export of yours")


@router.exception_handler(InvalidDefinition)
def _invalid(error: InvalidDefinition) -> Response:
    return error_response(HTTPStatus.CONFLICT, errors.DEFINITION_INVALID,
                          f"the query version no longer checks: {error.reason}", error.field)


@router.post("/queries/<query_id>/exports", tags=["exports"], operation_id="requestExport",
             security=SECURITY,
             summary="Export a saved query version to CSV or XLSX (runs in the background)",
             responses={**errors.responses(202, "Accepted: the export is queued", 404, 409, 415, texts=_ERRORS,
                                                headers=errors.LOCATION),
                        200: {"description": "An earlier request with the same Idempotency-Key made this "
                                             "export", "headers": dict(errors.LOCATION)}})
def request_export(
    scope: Reader, api: Api, query_id: Annotated[CanonicalUuid, Path(description="the saved query's id")],
    body: Annotated[ExportCreate, Body()],
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key returns the same export")] = None,
) -> Response[ExportOut]:
    key = scope.claim_key(idempotency_key, body)
    export, created = scope.call(
        ex.request_export, query_id=query_id, version=body.version, format=body.format,
        requested_by=scope.user_id, idempotency_key=key, now=scope.now,
        publisher=_required(api.adapters.export_publisher)())
    return Response(status_code=HTTPStatus.ACCEPTED if created else HTTPStatus.OK,
                    content_type=content_types.APPLICATION_JSON,
                    body=export_out(export, created=created), headers={"Location": f"/exports/{export.id}"})


@router.get("/exports/<export_id>", tags=["exports"], operation_id="getExport", security=SECURITY,
            summary="An export of yours: its state, and when succeeded a download link",
            responses=errors.responses(200, "The export", 404, texts=_ERRORS))
def get_export(scope: Reader, api: Api,
               export_id: Annotated[CanonicalUuid, Path(description="the export's id")]) -> ExportOut:
    with scope.unit(access.QUERIES_READ) as conn:
        export = ex.get_export(conn, workspace_id=scope.workspace_id, export_id=export_id,
                               requested_by=scope.user_id)
    if export.state == "queued" and export.published_at is None:
        scope.call(ex.reoffer_exports, publisher=_required(api.adapters.export_publisher)(), now=scope.now,
                   older_than=EXPORTS.reoffer_after, export_id=export.id, limit=1)
    if export.state != "succeeded" or export.object_key is None:
        return export_out(export)
    s3, bucket = _required(api.adapters.files)()
    url = s3.generate_presigned_url(
        "get_object", ExpiresIn=DOWNLOAD_URL_TTL_S,
        Params={"Bucket": bucket, "Key": export.object_key,
                "ResponseContentDisposition": attachment(ex.file_name(export))})
    return export_out(export, url=url, expires_at=scope.now + timedelta(seconds=DOWNLOAD_URL_TTL_S))
