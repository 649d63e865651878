"""Query schedules: the scheduled delivery of a saved query or a report (the public
routes of their links are :mod:`timekeeper.api.download_routes`).

Routes (:data:`router`):

* ``POST /query-schedules`` (claims role ``queries:write``): create; the caller becomes the
  schedule's owner, whose access automatic runs use.
* ``GET /query-schedules`` / ``GET /query-schedules/{id}`` (``queries:read``): list (oldest
  first, ``limit`` <= 200, keyset ``cursor``); one with its settings and recipients.
* ``PATCH /query-schedules/{id}`` (``queries:write``): change name, recurrence, recipients,
  templates, ``skip_when_empty``, link lifetime (the source and format stay).
* ``POST /query-schedules/{id}/run`` (``queries:write``): Run now, acting as the caller (the
  run reads the source with the caller's access); ``Idempotency-Key`` returns the same run.
* ``POST /query-schedules/{id}/test`` (``queries:write``): "Send a test to me": one message
  of the delivery to the caller only (their own address), a run of trigger ``test`` through
  the Run now path, recorded in the ledger; the schedule is unchanged (streak, next due).
  409 ``no_address`` / ``unsubscribed`` / ``suppressed`` when the caller cannot be sent to;
  429 ``test_send_limited`` with ``Retry-After`` past 5 tests of the delivery or 20 of the
  caller within an hour (:mod:`timekeeper.reporting.send_tests`).
* ``POST /query-schedules/{id}/pause`` / ``.../resume`` and ``DELETE /query-schedules/{id}``
  (``queries:write``): pause (idempotent), resume from now (409 ``definition_invalid``
  when the saved rule no longer validates), delete (runs and deliveries kept for audit).
  The generic ``/schedules`` routes do not see query schedules (404): their access rule
  and settings are here.
* ``GET /query-schedules/{id}/runs`` (``queries:read``): the delivery history, newest first
  (``limit`` <= 100, 20 by default, keyset ``cursor``): each run with its file and every
  recipient's outcome.

After the token's roles, every schedule route asks the access rule for the person
(``check_person`` with ``queries:read`` or ``queries:write``); saving a schedule (create and
PATCH) and Run now also need read access to its source. Validation errors are 422 naming the field
(``recipients[1]``, ``subject_template``, ``format``, ``source.query_id`` ...).
"""

import copy
import os
from dataclasses import asdict
from datetime import datetime
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from pydantic.dataclasses import dataclass as pydantic_dataclass

from timekeeper.api import deleted, errors
from timekeeper.api.auth import QUERIES_READ, QUERIES_WRITE
from timekeeper.api.errors import ApiError, error_response
from timekeeper.api.models import (
    CURSOR_PATTERN,
    PLAIN_NAME_PATTERN,
    PLAIN_PATTERN,
    TOKEN_PATTERN,
    CanonicalUuid,
    PlainText,
    Recurrence,
    UtcDatetime,
    check_rule_shape,
    decode_cursor,
    encode_cursor,
    rule_description,
)
from timekeeper.api.reports import SnapshotBasisOut
from timekeeper.api.routing import SECURITY, ApiRouter, idempotency_header
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.db.keyset import split_page
from timekeeper.platform import access
from timekeeper.platform.directory import workspace_timezone
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import delivery_preview, message_states, send_tests
from timekeeper.reporting.query_schedules import (
    DeliveryRun,
    NewQuerySchedule,
    SettingsInvalid,
    Source,
    create_query_schedule,
    list_delivery_runs,
    list_query_schedules,
    schedule_recurrence,
    source_names,
    update_query_schedule,
)
from timekeeper.reporting.work_kinds import ROUTE
from timekeeper.schedules import service
from timekeeper.schedules.recurrence import InvalidRecurrence
from timekeeper.schema_forms import whole_forms
from timekeeper.settings import DOWNLOAD_BASE_URL_VARIABLE
from timekeeper.strict_input import JSON_INTEGER

#: The largest page of ``GET /query-schedules`` and of a schedule's delivery history (each
#: run carries every recipient's outcome, up to 1,000).
MAX_SCHEDULES_PAGE = 200
MAX_RUNS_PAGE = 100
#: Where a preview's stand-in links point when the function is given no download URL (the
#: deployed API is not; ``serve`` is): a reserved name that resolves nowhere.
PREVIEW_BASE_URL = "https://downloads.invalid/"
#: The error code of a test send past its limits (429 with Retry-After).
TEST_SEND_LIMITED = "test_send_limited"
_Text = Annotated[str, Field(min_length=1, max_length=500, pattern=PLAIN_PATTERN), PlainText]
#: A name: 1-500 characters, not only white space, no bidirectional control.
_Name = Annotated[str, Field(min_length=1, max_length=500, pattern=PLAIN_NAME_PATTERN), PlainText]
#: Numbers and booleans are taken as JSON numbers and booleans only (strict: ``"5"`` or
#: ``"yes"`` is a 422 naming the field, never coerced).
_Hours = Annotated[int, Field(ge=1, le=720), JSON_INTEGER]


_UUID = {"type": "string", "format": "uuid"}
#: The two forms of a source the document publishes (the route checks the same): ``query``
#: with its ``query_id`` (and optionally ``query_version``), ``report`` with its
#: ``report_id``. Whether they exist is the database's to say.
QUERY_SOURCE = {"title": "QuerySource", "type": "object", "additionalProperties": False,
                "description": "a saved query: its version pinned now (omitted: the current one)",
                "required": ["kind", "query_id"],
                "properties": {"kind": {"type": "string", "const": "query"}, "query_id": _UUID,
                               "query_version": {"type": "integer", "minimum": 1}}}
REPORT_SOURCE = {"title": "ReportSource", "type": "object", "additionalProperties": False,
                 "description": "a report, rendered at its current version on each run",
                 "required": ["kind", "report_id"],
                 "properties": {"kind": {"type": "string", "const": "report"}, "report_id": _UUID}}


def _source_forms(schema: dict[str, Any]) -> None:
    """Publish a source as ``oneOf`` its two whole forms (:data:`QUERY_SOURCE`,
    :data:`REPORT_SOURCE`)."""
    kept = {k: schema[k] for k in ("title", "description") if k in schema}
    schema.clear()
    schema.update(kept, oneOf=[copy.deepcopy(QUERY_SOURCE), copy.deepcopy(REPORT_SOURCE)])


class SourceIn(BaseModel):
    """What to deliver: a saved query (its version pinned now; omitted: the current one)
    or a report (rendered at its current version on each run)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema: _source_forms(schema))

    kind: Literal["query", "report"]
    query_id: CanonicalUuid | None = None
    query_version: Annotated[int, Field(ge=1), JSON_INTEGER] | None = None
    report_id: CanonicalUuid | None = None


class SourceOut(BaseModel):
    """What a query schedule delivers: ``kind`` query with ``query_id`` and the pinned
    ``query_version``, or report with ``report_id`` (the other fields null)."""

    kind: Literal["query", "report"]
    query_id: UUID | None = Field(description="the saved query (kind query)")
    query_version: int | None = Field(ge=1, description="the version each run delivers (kind query)")
    report_id: UUID | None = Field(description="the report (kind report)")
    name: str | None = Field(None, description="the saved query's or report's name (null when the workspace has "
                                               "no such source)")


def _formats_by_source(schema: dict[str, Any]) -> None:
    """Publish which formats each source kind is delivered in (the route checks the same):
    the body is ``oneOf`` two whole forms, ``QueryDeliveryCreate`` (a query as csv or
    xlsx) and ``ReportDeliveryCreate`` (a report as pdf), each with every field."""
    whole_forms(schema, [
        {"title": title, "properties": {"source": source, "format": {"type": "string", "enum": formats}}}
        for title, source, formats in (("QueryDeliveryCreate", QUERY_SOURCE, ["csv", "xlsx"]),
                                       ("ReportDeliveryCreate", REPORT_SOURCE, ["pdf"]))])


class QueryScheduleCreate(BaseModel):
    """A new query schedule."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema: _formats_by_source(schema))

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
    owner_name: str | None = Field(None, description="the owner's display name (null when the directory has none)")
    owner_email: str | None = Field(None, description="the owner's address (null when the directory has none)")
    source: SourceOut
    format: str
    skip_when_empty: bool
    subject_template: str
    body_template: str
    link_ttl_hours: int
    recipients: list[str] | None = None
    recipient_names: dict[str, str] | None = Field(
        None, description="the recipients' display names by user id, for those the directory names (on a single "
                          "schedule's read)", examples=[{"sample-7-admin": "Ada Admin"}])
    recipient_emails: dict[str, str] | None = Field(
        None, description="the recipients' addresses by user id, for those the directory has one (on a single "
                          "schedule's read): a recipient without one is sent nothing", examples=[
                              {"sample-7-admin": "ada@example.com"}])
    timezone: str | None = Field(None, description="the workspace's IANA zone, in which people's times are shown "
                                                   "(on a single schedule's read)")
    recurrence: dict[str, Any] | None = Field(None, description="the saved rule as PATCH takes it, with its "
                                                                "timezone (on a single schedule's read)")
    description: str | None = Field(None, description="the rule in words with its zone (on a single schedule's "
                                                      "read)", examples=["At 09:00 on Monday every week, "
                                                                         "Europe/Berlin"])


class QuerySchedulePage(BaseModel):
    """A page of the workspace's query schedules, oldest first; pass ``next_cursor`` as
    ``cursor`` for the next."""

    items: list[QueryScheduleOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")
    timezone: str | None = Field(None, description="the workspace's IANA zone, in which people's times are shown "
                                                   "(the instants stay UTC)")


class DeliveryAttemptOut(BaseModel):
    """One attempt's outcome for one recipient: its attempt number, ``sent`` (with the
    provider's message id) or ``failed`` (with the error code), and when."""

    attempt: int
    status: str
    error_code: str | None
    provider_message_id: str | None
    at: datetime


class MessageEventOut(BaseModel):
    """One state SES reported for a sent message: ``state`` delivered | bounced | complained
    | rejected | delivery_delayed, ``at`` the event's own instant (UTC), ``kind`` /
    ``subkind`` the bounce type and subtype (or the complaint's feedback type, the delay
    type, the reject reason)."""

    state: str
    at: datetime
    kind: str | None
    subkind: str | None


class MessageStateOut(MessageEventOut):
    """A sent message's state as it stands: the highest-ranked event (delivery_delayed <
    delivered < bounced = rejected < complained; within a rank the later one), whatever
    order the events arrived in, and every distinct event, in event order."""

    events: list[MessageEventOut]


class DeliveryOut(BaseModel):
    """One recipient's outcome of a run (``skip_reason`` ``suppressed``: the address bounced
    permanently or complained; ``unsubscribed``: the recipient opted out of the schedule)."""

    user_id: str
    status: str
    skip_reason: str | None
    provider_message_id: str | None
    link_expires_at: datetime | None
    error: str | None = Field(description="a failed recipient's fixed, sanitized message (never the provider's text)")
    error_code: str | None = Field(None, description="a failed recipient's reason: rejected, invalid_address, "
                                   "unconfirmed (not retried: the sender stopped while submitting, so the message "
                                   "may or may not have gone), throttled, provider_error, submission_error")
    attempts: list[DeliveryAttemptOut] = Field(
        default_factory=list, description="each attempt's submission for this recipient, oldest first: an "
        "error a later attempt recovered from stays here (skipped recipients have none)")
    message: MessageStateOut | None = Field(
        None, description="what became of the sent message, as SES reported it (null: no report yet, or not sent)")


@pydantic_dataclass(frozen=True)
class DeliveryRunOut(DeliveryRun):
    """One run of a query schedule with its file and its recipients' outcomes;
    ``snapshot_basis`` is the report's per section, as its render answers it."""

    snapshot_basis: list[SnapshotBasisOut | None] | None
    deliveries: list[DeliveryOut]


class DeliveryHistory(BaseModel):
    """A page of a query schedule's runs, newest first; pass ``next_cursor`` as ``cursor``
    for the next (older) page."""

    items: list[DeliveryRunOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")


class MessagePreviewOut(BaseModel):
    """What one recipient would receive if the schedule ran now: the delivery's own
    composition, with stand-in links (a preview never holds a working one)."""

    user_id: str = Field(description="the recipient previewed")
    recipient_name: str = Field(description="their display name, as the message greets them")
    skip_reason: str | None = Field(description="why a run now would skip them (no_access, deactivated, "
                                                "left_workspace, no_address, unsubscribed, suppressed); "
                                                "null when they would be sent to")
    subject: str
    html: str = Field(description="the HTML part (a whole document)")
    text: str = Field(description="the plain-text part")
    link_expires_at: UtcDatetime = Field(description="when the download link of a run now would expire")
    timezone: str = Field(description="the workspace's IANA zone the message writes times in")


class RunNowOut(BaseModel):
    """Run now accepted: the run (``created`` False for a repeated Idempotency-Key)."""

    run_id: UUID
    schedule_id: UUID
    created: bool


_ERRORS = {401: "No or invalid authorizer claims", 403: "The caller's roles, or the access rule, refuse this",
           404: "No such query schedule in the caller's workspace",
           409: "The saved rule no longer validates (update the recurrence first)", 410: "The link has expired",
           415: "The body is not application/json", 422: "Invalid input (the field and the reason)",
           429: "A fresh link of this delivery was asked for within the hour, or five today: fresh_link_limited"}
_responses = partial(errors.responses, texts=_ERRORS)


def _out(conn: Any, settings: dl.QuerySchedule, *, recipients: bool = False,
         named: tuple[dict[UUID, str], dict[str, dict[str, Any]]] | None = None) -> QueryScheduleOut:
    """The schedule as the API shows it; ``named``: the sources' names and the owners'
    contacts a page of them was read with (:func:`_names_of`), else read for this one."""
    sources, owners = named or _names_of(conn, settings.workspace_id, [settings])
    owner = owners.get(settings.owner_user_id) or {}
    state = service.get_state(conn, workspace_id=settings.workspace_id, schedule_id=settings.schedule_id)
    if state is None:
        raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such query schedule")
    listed = (dl.list_recipients(conn, workspace_id=settings.workspace_id, schedule_id=settings.schedule_id)
              if recipients else None)
    known = dl.contacts(conn, listed) if listed else {}
    names = {uid: str(c["display_name"]) for uid, c in known.items() if c.get("display_name")} \
        if listed is not None else None
    emails = {uid: str(c["email"]) for uid, c in known.items() if c.get("email")} if listed is not None else None
    rule = schedule_recurrence(conn, workspace_id=settings.workspace_id, schedule_id=settings.schedule_id) \
        if recipients else None
    return QueryScheduleOut(
        id=settings.schedule_id, name=settings.name, status=state.status, pause_reason=state.pause_reason,
        next_due_at=state.next_due_at, owner_user_id=settings.owner_user_id,
        owner_name=owner.get("display_name"), owner_email=owner.get("email"),
        source=SourceOut(kind=settings.source_kind, query_id=settings.query_id, query_version=settings.query_version,
                         report_id=settings.report_id,
                         name=sources.get(settings.query_id or settings.report_id)),  # type: ignore[arg-type]
        format=settings.format, skip_when_empty=settings.skip_when_empty, subject_template=settings.subject_template,
        body_template=settings.body_template, link_ttl_hours=settings.link_ttl_hours,
        recipients=listed, recipient_names=names, recipient_emails=emails,
        timezone=workspace_timezone(conn, settings.workspace_id) if recipients else None,
        recurrence=rule, description=rule_description(rule) if rule else None)


def _names_of(conn: Any, workspace_id: UUID, rows: list[dl.QuerySchedule]
              ) -> tuple[dict[UUID, str], dict[str, dict[str, Any]]]:
    """The names of ``rows``' sources (``{id: name}``) and their owners' contacts
    (``{user id: {"display_name", "email"}}``), each read once for the page."""
    sources = source_names(conn, workspace_id=workspace_id,
                           query_ids=list({r.query_id for r in rows if r.query_id}),
                           report_ids=list({r.report_id for r in rows if r.report_id}))
    return sources, dl.contacts(conn, list({r.owner_user_id for r in rows}))


def schedule_live(conn: Any, workspace_id: UUID, schedule_id: UUID) -> bool:
    """Whether ``schedule_id`` is a schedule of ``workspace_id`` that was not deleted."""
    state = service.get_state(conn, workspace_id=workspace_id, schedule_id=schedule_id)
    return state is not None and state.deleted_at is None


def _settings_of(conn: Any, workspace_id: UUID, schedule_id: UUID) -> dl.QuerySchedule:
    """The settings of a live query schedule; a 404 otherwise (deleted, or none)."""
    settings = dl.get_query_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id)
    if settings is None or not schedule_live(conn, workspace_id, schedule_id):
        raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such query schedule")
    return settings


def _run_out(conn: Any, workspace_id: UUID, r: DeliveryRun) -> DeliveryRunOut:
    """A run of the delivery history with every recipient's outcome and attempts."""
    attempts = dl.list_attempts(conn, workspace_id=workspace_id, run_id=r.run_id)
    states = message_states.states_of_run(conn, workspace_id=workspace_id, run_id=r.run_id)
    events = message_states.events_of_run(conn, workspace_id=workspace_id, run_id=r.run_id) if states else {}

    def message(user_id: str) -> MessageStateOut | None:
        state = states.get(user_id)
        if state is None:
            return None
        return MessageStateOut(state=state.state, at=state.event_at, kind=state.kind, subkind=state.subkind,
                               events=[MessageEventOut(state=e.state, at=e.event_at, kind=e.kind, subkind=e.subkind)
                                       for e in events.get(user_id, [])])

    return DeliveryRunOut(
        **asdict(r),
        deliveries=[DeliveryOut(user_id=d.user_id, status=d.status, skip_reason=d.skip_reason,
                                provider_message_id=d.provider_message_id,
                                link_expires_at=d.link_expires_at, error=d.error,
                                error_code=d.error_code,
                                attempts=[DeliveryAttemptOut(attempt=a.attempt, status=a.status,
                                                             error_code=a.error_code,
                                                             provider_message_id=a.provider_message_id,
                                                             at=a.at)
                                          for a in attempts.get(d.user_id, [])],
                                message=message(d.user_id))
                    for d in dl.list_deliveries(conn, workspace_id=workspace_id, run_id=r.run_id)])


Reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]
Writer = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_WRITE))]
ScheduleIdPath = Annotated[CanonicalUuid, Path(description="the query schedule's id")]
_TAGS = ["query schedules"]

#: The query-schedule routes. The app's adapters (:data:`~timekeeper.api.routing.Api`)
#: give ``connection()`` and ``now()``; its ``publisher`` routes Run now's message to the
#: queries pipeline's queue.
#:
#: Transactions: reads (and the checks before a change) run in ONE unit of the scope,
#: the access rule first; the schedule's own changes (create, update, pause, resume,
#: delete, Run now) are services that open their own and publish after commit.
router = ApiRouter()


@router.exception_handler(SettingsInvalid)
def _settings_invalid(error: SettingsInvalid) -> Response:
    return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR, error.reason, error.field)


def _may_change(scope: WorkspaceScope, schedule_id: UUID) -> dl.QuerySchedule:
    """The settings of a query schedule the caller may change and run: ``queries:write``
    by the access rule, and read access to its source (one unit)."""
    with scope.unit(access.QUERIES_WRITE) as conn:
        settings = _settings_of(conn, scope.workspace_id, schedule_id)
        access.require(dl.check_source_access(conn, settings, scope.user_id), f"read the {settings.source_kind}")
    return settings


def _shown(scope: WorkspaceScope, schedule_id: UUID) -> QueryScheduleOut:
    with scope.unit() as conn:
        return _out(conn, _settings_of(conn, scope.workspace_id, schedule_id), recipients=True)


@router.post("/query-schedules", tags=_TAGS, operation_id="createQuerySchedule",
             security=SECURITY, summary="Schedule the delivery of a saved query or a report to workspace users",
             responses=_responses(201, "Created", 404, 409, 415, texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT},
                                   headers=errors.CREATED_ONCE))
def create(
    scope: Writer, body: Annotated[QueryScheduleCreate, Body()],
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key answers what the first request answered")] = None,
) -> Response[QueryScheduleOut]:
    check_rule_shape(body.recurrence)
    scope.check_access(access.QUERIES_WRITE)

    def create_it() -> Response:
        source = Source(body.source.kind, query_id=body.source.query_id, query_version=body.source.query_version,
                        report_id=body.source.report_id)
        _, settings = scope.call(
            create_query_schedule, actor=scope.user_id,
            new=NewQuerySchedule(name=body.name, recurrence=body.recurrence, source=source, format=body.format,
                                 recipients=body.recipients, subject_template=body.subject_template,
                                 body_template=body.body_template, skip_when_empty=body.skip_when_empty,
                                 link_ttl_hours=body.link_ttl_hours, active=body.active),
            now=scope.now, kinds=scope.kinds)
        with scope.unit() as conn:
            out = _out(conn, settings, recipients=True)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON, body=out,
                        headers={"Location": f"/query-schedules/{settings.schedule_id}"})

    return scope.create_once(idempotency_key, body, create_it)


@router.get("/query-schedules", tags=_TAGS, operation_id="listQuerySchedules",
            security=SECURITY,
            summary="The workspace's query schedules, oldest first (filter by name, source kind, owner and status; "
                    "cursor pagination)",
            responses=_responses(200, "A page of query schedules"))
def list_all(
    scope: Reader,
    limit: Annotated[int, Query(ge=1, le=MAX_SCHEDULES_PAGE, description="page size")] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                        description="next_cursor of the previous page")] = None,
    name: Annotated[str | None, Query(min_length=1, max_length=200, pattern=PLAIN_PATTERN,
                                      description="only those whose name contains this (any case)")] = None,
    source: Annotated[Literal["query", "report"] | None, Query(description="only those of this source kind")] = None,
    owner: Annotated[str | None, Query(min_length=1, max_length=200, pattern=TOKEN_PATTERN,
                                       description="only those this user id owns")] = None,
    status: Annotated[Literal["active", "paused", "disabled"] | None,
                      Query(description="only those in this status")] = None,
) -> QuerySchedulePage:
    after = decode_cursor(cursor)
    with scope.unit(access.QUERIES_READ) as conn:
        rows, after = split_page(list_query_schedules(conn, workspace_id=scope.workspace_id, after=after,
                                                      limit=limit + 1, name=name, source_kind=source, owner=owner,
                                                      status=status),
                                 limit, lambda q: (q.created_at, q.schedule_id))
        named = _names_of(conn, scope.workspace_id, rows)
        items = [_out(conn, settings, named=named) for settings in rows]
        zone = workspace_timezone(conn, scope.workspace_id)
    return QuerySchedulePage(items=items, next_cursor=encode_cursor(after), timezone=zone)


@router.get("/query-schedules/<schedule_id>", tags=_TAGS, operation_id="getQuerySchedule",
            security=SECURITY, summary="A query schedule with its recipients",
            responses={**_responses(200, "The query schedule", 404), **errors.GONE_DOCS})
def get_one(scope: Reader, schedule_id: ScheduleIdPath) -> QueryScheduleOut:
    with scope.unit(access.QUERIES_READ) as conn:
        deleted.raise_if_deleted(conn, scope.workspace_id, schedule_id, kinds=scope.kinds, route=ROUTE)
        return _out(conn, _settings_of(conn, scope.workspace_id, schedule_id), recipients=True)


@router.patch("/query-schedules/<schedule_id>", tags=_TAGS, operation_id="updateQuerySchedule",
              security=SECURITY, summary="Change a query schedule (the source and format stay)",
              responses=_responses(200, "The query schedule", 404, 415))
def update(scope: Writer, schedule_id: ScheduleIdPath,
           body: Annotated[QueryScheduleUpdate, Body()]) -> QueryScheduleOut:
    if body.recurrence is not None:
        check_rule_shape(body.recurrence)
    _may_change(scope, schedule_id)
    scope.call(update_query_schedule, schedule_id=schedule_id, actor=scope.user_id, now=scope.now,
               name=body.name, recurrence=body.recurrence, recipients=body.recipients,
               subject_template=body.subject_template, body_template=body.body_template,
               skip_when_empty=body.skip_when_empty, link_ttl_hours=body.link_ttl_hours)
    return _shown(scope, schedule_id)


@router.post("/query-schedules/<schedule_id>/run", tags=_TAGS, operation_id="runQuerySchedule",
             security=SECURITY, summary="Run now, acting as the caller (their access to the source)",
             responses=_responses(202, "Accepted: the manual run is queued", 404, 409,
                                  texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT}))
def run_now(scope: Writer, schedule_id: ScheduleIdPath,
            idempotency_key: Annotated[str | None, idempotency_header(
                "repeat a request safely: the same key returns the same run")] = None,
            ) -> Response[RunNowOut]:
    key = scope.claim_key(idempotency_key)
    _may_change(scope, schedule_id)
    run_id, created = scope.call(service.run_now, schedule_id=schedule_id, actor=scope.user_id, now=scope.now,
                                 publisher=scope.publisher, idempotency_key=key)
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=RunNowOut(run_id=run_id, schedule_id=schedule_id, created=created))


class TestSendOut(BaseModel):
    """A test send accepted: its run (trigger ``test``; ``created`` False for a repeated
    Idempotency-Key) and where the message goes (the requester, their own address)."""

    __test__ = False  # not a pytest class

    run_id: UUID
    schedule_id: UUID
    created: bool
    user_id: str = Field(description="the one recipient: the person who asked")
    email: str = Field(description="the address the message goes to (theirs in the directory)")


@router.exception_handler(send_tests.TestLimited)
def _test_limited(error: send_tests.TestLimited) -> Response:
    return error_response(HTTPStatus.TOO_MANY_REQUESTS, TEST_SEND_LIMITED, error.reason,
                          headers={"Retry-After": str(error.retry_after_s)})


@router.exception_handler(send_tests.NotSendable)
def _not_sendable(error: send_tests.NotSendable) -> Response:
    return error_response(HTTPStatus.CONFLICT, error.skip_reason, error.reason)


@router.post("/query-schedules/<schedule_id>/test", tags=_TAGS, operation_id="testQuerySchedule",
             security=SECURITY, summary="Send a test to me: one message of this delivery to the caller only "
                                        "(recorded as a test run; the schedule is unchanged)",
             responses=_responses(202, "Accepted: the test run is queued", 404, 409, 429, texts={
                 **_ERRORS, 409: "The caller cannot be sent to (no_address, unsubscribed, suppressed), or the "
                                 "Idempotency-Key named another request",
                 429: f"More than {send_tests.PER_DELIVERY_PER_HOUR} tests of this delivery, or "
                      f"{send_tests.PER_PERSON_PER_HOUR} of the caller, within the hour: test_send_limited "
                      "(Retry-After)"}))
def send_test(scope: Writer, schedule_id: ScheduleIdPath,
              idempotency_key: Annotated[str | None, idempotency_header(
                  "repeat a request safely: the same key returns the same run")] = None,
              ) -> Response[TestSendOut]:
    key = scope.claim_key(idempotency_key)
    _may_change(scope, schedule_id)
    run_id, created = scope.call(send_tests.request_test, schedule_id=schedule_id, actor=scope.user_id,
                                 now=scope.now, publisher=scope.publisher, idempotency_key=key)
    with scope.unit() as conn:
        email = str(dl.contacts(conn, [scope.user_id]).get(scope.user_id, {}).get("email") or "")
    return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                    body=TestSendOut(run_id=run_id, schedule_id=schedule_id, created=created,
                                     user_id=scope.user_id, email=email))


def _owner_action(scope: WorkspaceScope, schedule_id: UUID, action: Any) -> None:
    """Run a schedule action (pause, resume, delete) on a live query schedule the
    caller may change (``queries:write`` by the token and by the access rule)."""
    with scope.unit(access.QUERIES_WRITE) as conn:
        _settings_of(conn, scope.workspace_id, schedule_id)
    scope.call(action, schedule_id=schedule_id, actor=scope.user_id, now=scope.now)


@router.post("/query-schedules/<schedule_id>/pause", tags=_TAGS,
             operation_id="pauseQuerySchedule", security=SECURITY, summary="Pause (idempotent)",
             responses=_responses(200, "The paused query schedule", 404))
def pause(scope: Writer, schedule_id: ScheduleIdPath) -> QueryScheduleOut:
    _owner_action(scope, schedule_id, service.pause_schedule)
    return _shown(scope, schedule_id)


@router.post("/query-schedules/<schedule_id>/resume", tags=_TAGS,
             operation_id="resumeQuerySchedule", security=SECURITY,
             summary="Resume from now (resets the failure streak; no backlog run)",
             responses=_responses(200, "The active query schedule", 404, 409))
def resume(scope: Writer, schedule_id: ScheduleIdPath) -> QueryScheduleOut:
    try:
        _owner_action(scope, schedule_id, service.resume_schedule)
    except InvalidRecurrence as error:
        raise ApiError(HTTPStatus.CONFLICT, errors.DEFINITION_INVALID,
                       f"the saved rule no longer validates: {error.reason}; update the recurrence first",
                       "recurrence") from None
    return _shown(scope, schedule_id)


@router.delete("/query-schedules/<schedule_id>", tags=_TAGS, operation_id="deleteQuerySchedule",
               security=SECURITY, summary="Delete (runs, deliveries and history are kept for audit)",
               responses=_responses(204, "Deleted", 404))
def delete(scope: Writer, schedule_id: ScheduleIdPath) -> Response[None]:
    _owner_action(scope, schedule_id, service.delete_schedule)
    return Response(status_code=HTTPStatus.NO_CONTENT, content_type=None, body=None)


@router.get("/query-schedules/<schedule_id>/message-preview", tags=_TAGS,
            operation_id="queryScheduleMessagePreview", security=SECURITY,
            summary="The message a recipient would receive if the schedule ran now (nothing is sent or written)",
            responses=_responses(200, "The composed message", 404))
def message_preview(
    scope: Reader, schedule_id: ScheduleIdPath,
    user_id: Annotated[str | None, Query(pattern=TOKEN_PATTERN, max_length=200,
                                         description="a recipient of the schedule (default: the first)")] = None,
) -> MessagePreviewOut:
    with scope.unit(access.QUERIES_READ) as conn:
        settings = _settings_of(conn, scope.workspace_id, schedule_id)
        recipients = dl.list_recipients(conn, workspace_id=scope.workspace_id, schedule_id=schedule_id)
        chosen = user_id if user_id is not None else (recipients[0] if recipients else None)
        if chosen is None or chosen not in recipients:
            raise ApiError(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such recipient of this schedule")
        base = os.environ.get(DOWNLOAD_BASE_URL_VARIABLE) or PREVIEW_BASE_URL
        preview = delivery_preview.preview_message(conn, settings, user_id=chosen, now=scope.now,
                                     base_url=base if base.endswith("/") else base + "/")
    return MessagePreviewOut(user_id=preview.user_id, recipient_name=preview.recipient_name,
                             skip_reason=preview.skip_reason, subject=preview.message.subject,
                             html=preview.message.html, text=preview.message.text,
                             link_expires_at=preview.link_expires_at, timezone=preview.timezone)


@router.get("/query-schedules/<schedule_id>/runs", tags=_TAGS, operation_id="queryScheduleRuns",
            security=SECURITY,
            summary="The delivery history: runs, files and every recipient's outcome (newest first; cursor pagination)",
            responses=_responses(200, "A page of runs, newest first", 404))
def history(
    scope: Reader, schedule_id: ScheduleIdPath,
    limit: Annotated[int, Query(ge=1, le=MAX_RUNS_PAGE, description="runs per page")] = 20,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                        description="next_cursor of the previous page")] = None,
) -> DeliveryHistory:
    after = decode_cursor(cursor)
    with scope.unit(access.QUERIES_READ) as conn:
        _settings_of(conn, scope.workspace_id, schedule_id)
        runs, after = split_page(list_delivery_runs(conn, workspace_id=scope.workspace_id,
                                                    schedule_id=schedule_id, after=after, limit=limit + 1),
                                 limit, lambda r: (r.occurrence_at, r.run_id))
        items = [_run_out(conn, scope.workspace_id, r) for r in runs]
    return DeliveryHistory(items=items, next_cursor=encode_cursor(after))


__all__ = ["router", "schedule_live"]
