"""Query schedules (scheduled delivery of a saved query or a report) and the public
download route of their links.

Routes (registered by :func:`timekeeper.api.app.create_app`):

* ``POST /query-schedules`` (claims role ``queries:write``): create; the caller becomes the
  schedule's owner, whose access automatic runs use.
* ``GET /query-schedules`` / ``GET /query-schedules/{id}`` (``queries:read``): list (oldest
  first, ``limit`` <= 200, keyset ``cursor``); one with its settings and recipients.
* ``PATCH /query-schedules/{id}`` (``queries:write``): change name, recurrence, recipients,
  templates, ``skip_when_empty``, link lifetime (the source and format stay).
* ``POST /query-schedules/{id}/run`` (``queries:write``): Run now, acting as the caller (the
  run reads the source with the caller's access); ``Idempotency-Key`` returns the same run.
* ``POST /query-schedules/{id}/pause`` / ``.../resume`` and ``DELETE /query-schedules/{id}``
  (``queries:write``): pause (idempotent), resume from now (409 ``definition_invalid``
  when the saved rule no longer validates), delete (runs and deliveries kept for audit).
  The generic ``/schedules`` routes do not see query schedules (404): their access rule
  and settings are here.
* ``GET /query-schedules/{id}/runs`` (``queries:read``): the delivery history, newest first
  (``limit`` <= 100, 20 by default, keyset ``cursor``): each run with its file and every
  recipient's outcome.
* ``GET /downloads/{token}`` (public: no authorizer; the signed token is the credential):
  403 ``link_invalid`` (tampered, another key, no such delivery, or the query schedule was
  deleted: deleting a schedule revokes the links it sent), 410 ``link_expired``,
  403 with the access rule's reason when the recipient may no longer read the source, else
  302 to a presigned S3 GET valid :data:`DOWNLOAD_URL_TTL_S` seconds.

After the token's roles, every schedule route asks the access rule for the person
(``check_person`` with ``queries:read`` or ``queries:write``); saving a schedule (create and
PATCH) and Run now also need read access to its source. Validation errors are 422 naming the field
(``recipients[1]``, ``subject_template``, ``format``, ``source.query_id`` ...).
"""

from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from timekeeper.api import errors
from timekeeper.api.errors import ApiError, ErrorBody, error_response
from timekeeper.api.models import (
    CURSOR_PATTERN,
    CanonicalUuid,
    Recurrence,
    check_rule_shape,
    decode_cursor,
    encode_cursor,
)
from timekeeper.db.keyset import split_page
from timekeeper.platform import access
from timekeeper.queries import delivery as dl
from timekeeper.queries.links import LinkExpired, LinkInvalid
from timekeeper.queries.query_schedules import (
    SettingsInvalid,
    Source,
    create_query_schedule,
    list_delivery_runs,
    list_query_schedules,
    update_query_schedule,
)
from timekeeper.schedules import service
from timekeeper.schedules.messages import RunPublisher
from timekeeper.schedules.recurrence import InvalidRecurrence

#: The largest page of ``GET /query-schedules`` and of a schedule's delivery history (each
#: run carries every recipient's outcome, up to 1,000).
MAX_SCHEDULES_PAGE = 200
MAX_RUNS_PAGE = 100
#: Lifetime of the presigned S3 URL a download link redirects to (seconds).
DOWNLOAD_URL_TTL_S = 60
LINK_INVALID = "link_invalid"
LINK_EXPIRED = "link_expired"
_SECURITY = [{"authorizer": []}]
_Text = Annotated[str, Field(min_length=1, max_length=500)]
#: A name: 1-500 characters, not only white space.
_Name = Annotated[str, Field(min_length=1, max_length=500, pattern=r"\S")]
#: Numbers and booleans are taken as JSON numbers and booleans only (strict: ``"5"`` or
#: ``"yes"`` is a 422 naming the field, never coerced).
_Hours = Annotated[StrictInt, Field(ge=1, le=720)]


class SourceIn(BaseModel):
    """What to deliver: a saved query (its version pinned now; omitted: the current one)
    or a report (rendered at its current version on each run)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["query", "report"]
    query_id: CanonicalUuid | None = None
    query_version: Annotated[StrictInt, Field(ge=1)] | None = None
    report_id: CanonicalUuid | None = None


class QueryScheduleCreate(BaseModel):
    """A new query schedule."""

    model_config = ConfigDict(extra="forbid")

    name: _Name
    recurrence: Recurrence
    source: SourceIn
    format: Literal["csv", "xlsx", "pdf"]
    recipients: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=1, max_length=1000)
    subject_template: _Text
    body_template: Annotated[str, Field(min_length=1, max_length=20000)]
    skip_when_empty: StrictBool = False
    link_ttl_hours: _Hours = 168
    active: StrictBool = True


class QueryScheduleUpdate(BaseModel):
    """Changes to a query schedule (omitted: kept)."""

    model_config = ConfigDict(extra="forbid")

    name: _Name | None = None
    recurrence: Recurrence | None = None
    recipients: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(None, min_length=1,
                                                                                          max_length=1000)
    subject_template: _Text | None = None
    body_template: Annotated[str, Field(min_length=1, max_length=20000)] | None = None
    skip_when_empty: StrictBool | None = None
    link_ttl_hours: _Hours | None = None


class QueryScheduleOut(BaseModel):
    """A query schedule: its schedule's state and its delivery settings."""

    id: UUID
    name: str
    status: str
    pause_reason: str | None
    next_due_at: datetime | None
    owner_user_id: str
    source: SourceIn
    format: str
    skip_when_empty: bool
    subject_template: str
    body_template: str
    link_ttl_hours: int
    recipients: list[str] | None = None


class QuerySchedulePage(BaseModel):
    """A page of the workspace's query schedules, oldest first; pass ``next_cursor`` as
    ``cursor`` for the next."""

    items: list[QueryScheduleOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")


class DeliveryOut(BaseModel):
    """One recipient's outcome of a run."""

    user_id: str
    status: str
    skip_reason: str | None
    provider_message_id: str | None
    link_expires_at: datetime | None
    error: str | None = Field(description="a failed recipient's fixed, sanitized message (never the provider's text)")
    error_code: str | None = Field(None, description="a failed recipient's reason: rejected, invalid_address "
                                   "(permanent, not retried), throttled, provider_error, submission_error")


class DeliveryRunOut(BaseModel):
    """One run of a query schedule with its file and its recipients' outcomes."""

    run_id: UUID
    trigger: str
    requested_by: str | None
    state: str
    outcome_code: str | None
    occurrence_at: datetime
    finished_at: datetime | None
    acted_for: str | None
    row_count: int | None
    sha256: str | None
    report_version: int | None
    version_changed: bool | None
    deliveries: list[DeliveryOut]


class DeliveryHistory(BaseModel):
    """A page of a query schedule's runs, newest first; pass ``next_cursor`` as ``cursor``
    for the next (older) page."""

    items: list[DeliveryRunOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")


class RunNowOut(BaseModel):
    """Run now accepted: the run (``created`` False for a repeated Idempotency-Key)."""

    run_id: UUID
    schedule_id: UUID
    created: bool


def _errors_doc(*codes: int) -> dict[int, dict[str, Any]]:
    texts = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
             404: "No such query schedule in the caller's workspace",
             409: "The saved rule no longer validates (update the recurrence first)", 410: "The link has expired",
             415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
    return {code: {"description": texts[code], "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}}}
            for code in codes}


def _out(conn: Any, settings: dl.QuerySchedule, *, recipients: bool = False) -> QueryScheduleOut:
    row = conn.execute("SELECT status, pause_reason, next_due_at FROM schedules WHERE id = %s",
                       (settings.schedule_id,)).fetchone()
    return QueryScheduleOut(
        id=settings.schedule_id, name=settings.name, status=row["status"], pause_reason=row["pause_reason"],
        next_due_at=row["next_due_at"], owner_user_id=settings.owner_user_id,
        source=SourceIn(kind=settings.source_kind, query_id=settings.query_id, query_version=settings.query_version,
                        report_id=settings.report_id),
        format=settings.format, skip_when_empty=settings.skip_when_empty, subject_template=settings.subject_template,
        body_template=settings.body_template, link_ttl_hours=settings.link_ttl_hours,
        recipients=dl.list_recipients(conn, workspace_id=settings.workspace_id, schedule_id=settings.schedule_id)
        if recipients else None)


def register_delivery_routes(app: Any, route: Any, scope_for: Any, adapters: Any,
                             publisher: RunPublisher) -> None:
    """Register the query-schedule routes and ``GET /downloads/{token}`` on ``app``.
    ``adapters`` gives ``connection()``, ``now()``, ``files()`` (S3 client, bucket) and
    ``links()`` (the link signer); ``publisher`` routes Run now's message to the queries
    pipeline's queue."""
    from aws_lambda_powertools.event_handler.depends import Depends

    from timekeeper.api.auth import QUERIES_READ, QUERIES_WRITE
    from timekeeper.api.scope import WorkspaceScope

    reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]
    writer = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_WRITE))]
    schedule_id_path = Annotated[CanonicalUuid, Path(description="the query schedule's id")]

    @app.exception_handler(SettingsInvalid)
    def _settings_invalid(error: SettingsInvalid) -> Response:
        return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, error.reason, error.field)

    def person(scope: WorkspaceScope, permission: str) -> None:
        with scope.conn.transaction():
            decision = access.check_person(scope.conn, workspace_id=scope.workspace_id,
                                           user_id=scope.identity.user_id, permission=permission)
        access.require(decision, f"use query schedules ({permission})")

    def settings_of(scope: WorkspaceScope, schedule_id: UUID) -> dl.QuerySchedule:
        settings = dl.get_query_schedule(scope.conn, workspace_id=scope.workspace_id, schedule_id=schedule_id)
        deleted = scope.conn.execute("SELECT deleted_at FROM schedules WHERE id = %s", (schedule_id,)).fetchone()
        if settings is None or deleted is None or deleted["deleted_at"] is not None:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such query schedule")
        return settings

    @route("POST", "/query-schedules", tags=["query schedules"], operation_id="createQuerySchedule",
           security=_SECURITY, summary="Schedule the delivery of a saved query or a report to workspace users",
           responses={201: {"description": "Created"}, **_errors_doc(401, 403, 404, 415, 422)})
    def create(scope: writer, body: Annotated[QueryScheduleCreate, Body()]) -> Response[QueryScheduleOut]:
        check_rule_shape(body.recurrence)
        with scope.conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_WRITE)
            source = Source(body.source.kind, query_id=body.source.query_id, query_version=body.source.query_version,
                            report_id=body.source.report_id)
            _, settings = create_query_schedule(
                scope.conn, workspace_id=scope.workspace_id, actor=scope.identity.user_id, name=body.name,
                recurrence=body.recurrence, source=source, format=body.format, recipients=body.recipients,
                subject_template=body.subject_template, body_template=body.body_template, now=scope.now,
                skip_when_empty=body.skip_when_empty, link_ttl_hours=body.link_ttl_hours, active=body.active,
                kinds=scope.kinds)
            with scope.conn.transaction():
                out = _out(scope.conn, settings, recipients=True)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON, body=out,
                        headers={"Location": f"/query-schedules/{settings.schedule_id}"})

    @route("GET", "/query-schedules", tags=["query schedules"], operation_id="listQuerySchedules",
           security=_SECURITY, summary="The workspace's query schedules, oldest first (cursor pagination)",
           responses={200: {"description": "A page of query schedules"}, **_errors_doc(401, 403, 422)})
    def list_all(
        scope: reader,
        limit: Annotated[int, Query(ge=1, le=MAX_SCHEDULES_PAGE, description="page size")] = 50,
        cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                            description="next_cursor of the previous page")] = None,
    ) -> QuerySchedulePage:
        after = decode_cursor(cursor)
        with scope.conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_READ)
            with scope.conn.transaction():
                rows, after = split_page(list_query_schedules(scope.conn, workspace_id=scope.workspace_id,
                                                              after=after, limit=limit + 1),
                                         limit, lambda q: (q.created_at, q.schedule_id))
                items = [_out(scope.conn, settings) for settings in rows]
        return QuerySchedulePage(items=items, next_cursor=encode_cursor(after))

    @route("GET", "/query-schedules/<schedule_id>", tags=["query schedules"], operation_id="getQuerySchedule",
           security=_SECURITY, summary="A query schedule with its recipients",
           responses={200: {"description": "The query schedule"}, **_errors_doc(401, 403, 404, 422)})
    def get_one(scope: reader, schedule_id: schedule_id_path) -> QueryScheduleOut:
        with scope.conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_READ)
            with scope.conn.transaction():
                return _out(scope.conn, settings_of(scope, schedule_id), recipients=True)

    @route("PATCH", "/query-schedules/<schedule_id>", tags=["query schedules"], operation_id="updateQuerySchedule",
           security=_SECURITY, summary="Change a query schedule (the source and format stay)",
           responses={200: {"description": "The query schedule"}, **_errors_doc(401, 403, 404, 415, 422)})
    def update(scope: writer, schedule_id: schedule_id_path,
               body: Annotated[QueryScheduleUpdate, Body()]) -> QueryScheduleOut:
        if body.recurrence is not None:
            check_rule_shape(body.recurrence)
        with scope.conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_WRITE)
            with scope.conn.transaction():
                current = settings_of(scope, schedule_id)
                access.require(dl.check_source_access(scope.conn, current, scope.identity.user_id),
                               f"read the {current.source_kind}")
            updated = update_query_schedule(
                scope.conn, workspace_id=scope.workspace_id, schedule_id=schedule_id, actor=scope.identity.user_id,
                now=scope.now, name=body.name, recurrence=body.recurrence, recipients=body.recipients,
                subject_template=body.subject_template, body_template=body.body_template,
                skip_when_empty=body.skip_when_empty, link_ttl_hours=body.link_ttl_hours)
            with scope.conn.transaction():
                return _out(scope.conn, updated, recipients=True)

    @route("POST", "/query-schedules/<schedule_id>/run", tags=["query schedules"], operation_id="runQuerySchedule",
           security=_SECURITY, summary="Run now, acting as the caller (their access to the source)",
           responses={202: {"description": "Accepted: the manual run is queued"}, **_errors_doc(401, 403, 404, 422),
                      **errors.error_docs({409: errors.KEY_REUSED_TEXT}, 409)})
    def run_now(scope: writer, schedule_id: schedule_id_path,
                idempotency_key: Annotated[str | None, Header(
                    alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
                    description="repeat a request safely: the same key returns the same run")] = None,
                ) -> Response[RunNowOut]:
        key = scope.claim_key(idempotency_key)
        with scope.conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_WRITE)
            with scope.conn.transaction():
                settings = settings_of(scope, schedule_id)
                access.require(dl.check_source_access(scope.conn, settings, scope.identity.user_id),
                               f"read the {settings.source_kind}")
            run_id, created = service.run_now(scope.conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                                              actor=scope.identity.user_id, now=scope.now, publisher=publisher,
                                              idempotency_key=key)
        return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                        body=RunNowOut(run_id=run_id, schedule_id=schedule_id, created=created))

    def owner_action(scope: WorkspaceScope, schedule_id: UUID, action: Any, **kwargs: Any) -> Any:
        """Run a schedule action (pause, resume, delete) on a query schedule the caller may
        change (``queries:write`` and the access rule's ``queries:write``)."""
        with scope.conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_WRITE)
            with scope.conn.transaction():
                settings_of(scope, schedule_id)
            return action(scope.conn, workspace_id=scope.workspace_id, schedule_id=schedule_id,
                          actor=scope.identity.user_id, now=scope.now, **kwargs)

    def status_out(scope: WorkspaceScope, schedule_id: UUID) -> QueryScheduleOut:
        with scope.conn.entered(scope.workspace_id), scope.conn.transaction():
            return _out(scope.conn, settings_of(scope, schedule_id), recipients=True)

    @route("POST", "/query-schedules/<schedule_id>/pause", tags=["query schedules"],
           operation_id="pauseQuerySchedule", security=_SECURITY, summary="Pause (idempotent)",
           responses={200: {"description": "The paused query schedule"}, **_errors_doc(401, 403, 404, 422)})
    def pause(scope: writer, schedule_id: schedule_id_path) -> QueryScheduleOut:
        owner_action(scope, schedule_id, service.pause_schedule)
        return status_out(scope, schedule_id)

    @route("POST", "/query-schedules/<schedule_id>/resume", tags=["query schedules"],
           operation_id="resumeQuerySchedule", security=_SECURITY,
           summary="Resume from now (resets the failure streak; no backlog run)",
           responses={200: {"description": "The active query schedule"}, **_errors_doc(401, 403, 404, 409, 422)})
    def resume(scope: writer, schedule_id: schedule_id_path) -> QueryScheduleOut:
        try:
            owner_action(scope, schedule_id, service.resume_schedule)
        except InvalidRecurrence as error:
            raise ApiError(HTTPStatus.CONFLICT, errors.DEFINITION_INVALID,
                           f"the saved rule no longer validates: {error.reason}; update the recurrence first",
                           "recurrence") from None
        return status_out(scope, schedule_id)

    @route("DELETE", "/query-schedules/<schedule_id>", tags=["query schedules"], operation_id="deleteQuerySchedule",
           security=_SECURITY, summary="Delete (runs, deliveries and history are kept for audit)",
           responses={204: {"description": "Deleted"}, **_errors_doc(401, 403, 404, 422)})
    def delete(scope: writer, schedule_id: schedule_id_path) -> Response[None]:
        owner_action(scope, schedule_id, service.delete_schedule)
        return Response(status_code=HTTPStatus.NO_CONTENT, content_type=None, body=None)

    @route("GET", "/query-schedules/<schedule_id>/runs", tags=["query schedules"], operation_id="queryScheduleRuns",
           security=_SECURITY,
           summary="The delivery history: runs, files and every recipient's outcome (newest first; cursor pagination)",
           responses={200: {"description": "A page of runs, newest first"}, **_errors_doc(401, 403, 404, 422)})
    def history(
        scope: reader, schedule_id: schedule_id_path,
        limit: Annotated[int, Query(ge=1, le=MAX_RUNS_PAGE, description="runs per page")] = 20,
        cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                            description="next_cursor of the previous page")] = None,
    ) -> DeliveryHistory:
        after = decode_cursor(cursor)
        conn = scope.conn
        with conn.entered(scope.workspace_id):
            person(scope, access.QUERIES_READ)
            with conn.transaction():
                settings_of(scope, schedule_id)
                runs, after = split_page(list_delivery_runs(conn, workspace_id=scope.workspace_id,
                                                            schedule_id=schedule_id, after=after, limit=limit + 1),
                                         limit, lambda r: (r.occurrence_at, r.id))
                items = [DeliveryRunOut(
                    run_id=r.id, trigger=r.trigger, requested_by=r.requested_by, state=r.state,
                    outcome_code=r.outcome_code, occurrence_at=r.occurrence_at, finished_at=r.finished_at,
                    acted_for=r.acted_for, row_count=r.row_count, sha256=r.sha256,
                    report_version=r.report_version, version_changed=r.version_changed,
                    deliveries=[DeliveryOut(user_id=d.user_id, status=d.status, skip_reason=d.skip_reason,
                                            provider_message_id=d.provider_message_id,
                                            link_expires_at=d.link_expires_at, error=d.error,
                                            error_code=d.error_code)
                                for d in dl.list_deliveries(conn, workspace_id=scope.workspace_id, run_id=r.id)])
                    for r in runs]
        return DeliveryHistory(items=items, next_cursor=encode_cursor(after))

    @route("GET", "/downloads/<token>", tags=["downloads"], operation_id="download", security=[],
           summary="Follow a delivery's personal link (public: the signed token is the credential)",
           responses={302: {"description": "Redirect to the file (a presigned URL valid 60 s)"},
                      **_errors_doc(403, 404, 410)})
    def download(token: Annotated[str, Path(min_length=1, max_length=2000,
                                            description="the signed link token")]) -> Response[None]:
        if adapters.links is None or adapters.files is None:
            raise RuntimeError("the download route's adapters are not configured")
        now = adapters.now()
        try:
            link = adapters.links().verify(token, now=now)
        except LinkExpired:
            raise ApiError(HTTPStatus.GONE, LINK_EXPIRED, "the link has expired; ask for a new delivery") from None
        except LinkInvalid:
            raise ApiError(HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid") from None
        conn = adapters.connection()
        with conn.entered(link.workspace_id), conn.transaction():
            delivery = dl.get_delivery(conn, workspace_id=link.workspace_id, run_id=link.run_id, user_id=link.user_id)
            source = dl.get_source(conn, workspace_id=link.workspace_id, run_id=link.run_id)
            settings = (dl.get_query_schedule(conn, workspace_id=link.workspace_id, schedule_id=source.schedule_id)
                        if source is not None else None)
            if (delivery is None or delivery.status != "sent" or source is None or settings is None
                    or source.object_key != link.object_key):
                raise ApiError(HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid")
            deleted = conn.execute("SELECT deleted_at FROM schedules WHERE id = %s",
                                   (settings.schedule_id,)).fetchone()
            if deleted is None or deleted["deleted_at"] is not None:  # deleting a schedule revokes its links
                raise ApiError(HTTPStatus.FORBIDDEN, LINK_INVALID, "the link is not valid: its schedule was deleted")
            decision = dl.check_source_access(conn, settings, link.user_id)
        if not decision:
            raise ApiError(HTTPStatus.FORBIDDEN, decision.reason or access.NOT_FOUND,
                           f"you may no longer read this {settings.source_kind}")
        s3, bucket = adapters.files()
        name = f"{settings.name or 'delivery'}-{link.run_id}.{source.format}".replace('"', "")
        url = s3.generate_presigned_url("get_object", ExpiresIn=DOWNLOAD_URL_TTL_S, Params={
            "Bucket": bucket, "Key": link.object_key, "ResponseContentDisposition": f'attachment; filename="{name}"'})
        return Response(status_code=HTTPStatus.FOUND, headers={
            "Location": url, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
            content_type=content_types.TEXT_PLAIN, body="")


__all__ = ["DOWNLOAD_URL_TTL_S", "LINK_EXPIRED", "LINK_INVALID", "register_delivery_routes"]
