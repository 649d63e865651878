"""Machine-readable error bodies and the resolver's exception handlers.

Every error the API returns is ``{"code": str, "message": str, "field"?: str}`` with one
of the codes below. Messages are fixed texts or validator reasons: never a stack trace,
SQL, a driver message or the caller's input. Unexpected faults are logged by exception
type and code location only (no message: a driver message may carry SQL or values).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from datetime import datetime
from http import HTTPStatus
from typing import Any

import psycopg
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from pydantic import BaseModel, ConfigDict, Field

from timekeeper import json_input
from timekeeper.observability import logger
from timekeeper.platform import access
from timekeeper.reporting.store import QueryNotFound
from timekeeper.schedules.recurrence import InvalidRecurrence
from timekeeper.schedules.service import ScheduleNotFound
from timekeeper.schedules.work import InvalidSubject, OwnRouteOnly

UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
VALIDATION_ERROR = "validation_error"
INVALID_RECURRENCE = "invalid_recurrence"
INVALID_CURSOR = "invalid_cursor"
DEFINITION_INVALID = "definition_invalid"
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
INTERNAL_ERROR = "internal_error"
#: The database did not answer the request (a connection lost, the server restarting or
#: failing over, a statement cancelled): 503 with ``Retry-After``. Nothing the request
#: would have changed is half done (its transaction rolled back, or committed whole: a
#: retry with the same Idempotency-Key returns what the first made).
DATABASE_UNAVAILABLE = "database_unavailable"
#: Seconds a client waits before retrying a ``database_unavailable`` answer.
DATABASE_RETRY_AFTER_S = 1
#: The message of a 503 ``database_unavailable``.
DATABASE_UNAVAILABLE_MESSAGE = "the database did not answer; retry the request (with the same Idempotency-Key)"
#: The caller sent an Idempotency-Key they used for another request (method, path or body).
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
#: The local server's HTTP layer refused the request itself (oversized header, bad request line).
BAD_REQUEST = "bad_request"
#: 403 codes of the access rule (:mod:`timekeeper.platform.access`): the person, as the
#: directory knows them now, may not do this (the token's roles allowed it).
NOT_A_MEMBER = access.NOT_A_MEMBER
LEFT_WORKSPACE = access.LEFT_WORKSPACE
USER_DEACTIVATED = access.USER_DEACTIVATED
MISSING_ROLE = access.MISSING_ROLE

#: 410: the schedule was the caller's workspace's and was deleted (:class:`ScheduleGone`).
SCHEDULE_DELETED = "schedule_deleted"

#: The message of an ``invalid_cursor`` refusal.
CURSOR_MESSAGE = "not a cursor this API returned"
#: Reasons of :func:`timekeeper.api.app.parse_json_body` worth showing the caller.
_JSON_REASONS = json_input.REASONS


class ErrorBody(BaseModel):
    """The body of every error response. ``field`` names the offending input where one
    applies: a body field as a dotted path (``"recurrence.calendar.times[0]"``), or a
    query, path or header parameter by its name (``"limit"``, ``"Idempotency-Key"``)."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="machine-readable error code", examples=[INVALID_RECURRENCE])
    message: str = Field(description="human-readable explanation")
    field: str | None = Field(None, description="the input the error is about, when there is one")


class GoneBody(ErrorBody):
    """The body of a 410 ``schedule_deleted``: an :class:`ErrorBody` with when the schedule
    was deleted and, where the workspace's history still says so, by whom."""

    deleted_at: datetime = Field(description="when the schedule was deleted (UTC)")
    deleted_by: str | None = Field(None, description="the user id who deleted it (null: no longer recorded)")
    deleted_by_name: str | None = Field(None, description="their display name (null: not in the directory)")
    timezone: str = Field("UTC", description="the workspace's IANA zone, to show deleted_at in")


class ApiError(Exception):
    """An expected refusal: HTTP ``status`` with an :class:`ErrorBody`."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class ScheduleGone(ApiError):
    """A 410 ``schedule_deleted`` for a deleted schedule of the caller's workspace: when
    (``deleted_at``, aware UTC) and who (``deleted_by`` user id and ``deleted_by_name``,
    each None when not known); ``timezone``: the workspace's IANA zone."""

    def __init__(self, deleted_at: datetime, deleted_by: str | None, deleted_by_name: str | None,
                 timezone: str = "UTC") -> None:
        super().__init__(HTTPStatus.GONE, SCHEDULE_DELETED, "this schedule was deleted")
        self.deleted_at = deleted_at
        self.deleted_by = deleted_by
        self.deleted_by_name = deleted_by_name
        self.timezone = timezone


#: The OpenAPI response of a 410 ``schedule_deleted`` (add it to a route's responses).
GONE_DOCS = {410: {"description": "The schedule was the caller's workspace's and was deleted: schedule_deleted "
                                  "with when and by whom", "content": {content_types.APPLICATION_JSON:
                                                                        {"model": GoneBody}}}}


_ACCESS_MESSAGES = {
    NOT_A_MEMBER: "you are not a member of this workspace",
    LEFT_WORKSPACE: "you are no longer a member of this workspace",
    USER_DEACTIVATED: "your user is deactivated",
    MISSING_ROLE: "your membership of this workspace does not grant this",
}


def access_refused(reason: str, noun: str = "object") -> ApiError:
    """The :class:`ApiError` for an access-rule refusal (a
    :class:`~timekeeper.platform.access.Decision`'s ``reason``): ``not_found`` (or an
    unknown reason) is a 404 ``not_found`` ("no such <noun> in this workspace"); the
    person's reasons are a 403 whose ``code`` is the reason itself."""
    if reason in _ACCESS_MESSAGES:
        return ApiError(403, reason, _ACCESS_MESSAGES[reason])
    return ApiError(404, NOT_FOUND, f"no such {noun} in this workspace")


#: The OpenAPI text of a 409 ``idempotency_key_reused``.
KEY_REUSED_TEXT = ("The Idempotency-Key names another request of the caller's (method, path or body): "
                   "idempotency_key_reused")


def error_docs(texts: Mapping[int, str], *codes: int) -> dict[int, dict[str, Any]]:
    """The OpenAPI responses of the error statuses ``codes``: each an :class:`ErrorBody`
    described by ``texts[code]`` (a ``KeyError`` for a status without a text)."""
    return {code: {"description": texts[code], "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}}}
            for code in codes}


#: The ``Location`` header of an answer that made (or found) a resource: its path.
LOCATION = {"Location": {"description": "the path of the resource made (or, replayed, found)", "required": True,
                         "schema": {"type": "string"}}}

#: ``Idempotent-Replayed``: the header of an answer an earlier request with the same
#: Idempotency-Key made (a replay).
REPLAYED = {"Idempotent-Replayed": {
    "description": "\"true\" when an earlier request with the same Idempotency-Key made this answer "
                   "(its status, body and Location are the first answer's)",
    "schema": {"type": "string", "enum": ["true"]}}}

#: ``Location`` and ``Idempotent-Replayed``: the headers of a create that answers once per
#: Idempotency-Key (:meth:`timekeeper.api.scope.WorkspaceScope.create_once`).
CREATED_ONCE = {**LOCATION, **REPLAYED}


def responses(status: int, description: str, *error_codes: int, texts: Mapping[int, str],
              always: tuple[int, ...] = (401, 403, 422),
              headers: Mapping[str, Any] | None = None) -> dict[int, dict[str, Any]]:
    """The OpenAPI responses of a route: ``status`` (its body the route's return model)
    described by ``description``, with the response ``headers`` it sets (e.g.
    :data:`LOCATION`), and the error statuses ``always`` and ``error_codes``
    (:func:`error_docs` with ``texts``). The one way a route documents its errors (500 and
    503 are added to every operation by :func:`timekeeper.api.openapi.finish`)."""
    out: dict[int, dict[str, Any]] = {status: {"description": description, **({"headers": dict(headers)}
                                                                              if headers else {})}}
    out.update(error_docs(texts, *always, *error_codes))
    return out


def error_response(status: int, code: str, message: str, field: str | None = None, *,
                   headers: dict[str, str] | None = None) -> Response:
    """A JSON error :class:`Response` (``field`` omitted when None)."""
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, headers=headers,
                    body=ErrorBody(code=code, message=message, field=field).model_dump(exclude_none=True))


def _field_of(loc: tuple[Any, ...] | list[Any], union_tags: frozenset[str] = frozenset()) -> str | None:
    """``("body", "recurrence", "times", 0)`` -> ``"recurrence.times[0]"``; query/path/header
    locations -> the parameter name. A discriminated union's tag right after ``"body"``
    (one of ``union_tags``) is left out."""
    parts = list(loc)
    if len(parts) > 2 and parts[0] == "body" and parts[1] in union_tags:
        del parts[1]
    if not parts:
        return None
    where, rest = parts[0], parts[1:]
    if where in ("query", "path", "header", "cookie"):
        return str(rest[0]) if rest else str(where)
    if where == "body" and (not rest or isinstance(rest[0], int)):
        return "body"  # the body as a whole (missing, or not JSON: the index is a character offset)
    out = ""
    for part in rest if where == "body" else parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


#: What a text must look like, in words, by the regular expression that checks it (the
#: models register theirs with :func:`pattern_words`): a refusal says the words, never the
#: expression.
PATTERN_WORDS: dict[str, str] = {}


def pattern_words(pattern: str, words: str) -> str:
    """Register ``words`` (``"must be a month YYYY-MM"``) as what a 422 says for a text
    that does not match ``pattern``; returns ``pattern`` (for use in a ``Field``)."""
    PATTERN_WORDS[pattern] = words
    return pattern


def _validation_message(error: dict[str, Any]) -> str:
    if error.get("type") == "string_pattern_mismatch":
        return PATTERN_WORDS.get(str((error.get("ctx") or {}).get("pattern")), "is not in the expected form")
    if error.get("type") == "missing":
        return "required"
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error")
        return f"the body is not valid JSON ({reason})" if reason in _JSON_REASONS else "the body is not valid JSON"
    if error.get("type") == "extra_forbidden":
        return "unknown field"
    message = str(error.get("msg") or "invalid value")
    return message.removeprefix("Value error, ")


def log_unexpected(error: BaseException, where: str) -> None:
    """Log an unexpected fault by type and code location (never its message or values)."""
    frames = traceback.extract_tb(error.__traceback__)[-5:]
    logger.error("unexpected error", extra={
        "error_type": type(error).__name__, "where": where,
        "frames": [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}:{f.name}" for f in frames]})


def install_error_handlers(app: APIGatewayRestResolver, *, union_tags: frozenset[str] = frozenset()) -> None:
    """Register the handlers that turn every exception into an :class:`ErrorBody` response.

    ``union_tags``: the values of the body's union discriminator (owner modules), left out
    of field paths."""

    @app.exception_handler(ApiError)
    def _api_error(error: ApiError) -> Response:
        return error_response(error.status, error.code, error.message, error.field)

    @app.exception_handler(ScheduleGone)
    def _gone(error: ScheduleGone) -> Response:
        body = GoneBody(code=error.code, message=error.message, deleted_at=error.deleted_at,
                        deleted_by=error.deleted_by, deleted_by_name=error.deleted_by_name,
                        timezone=error.timezone)
        return Response(status_code=error.status, content_type=content_types.APPLICATION_JSON,
                        body=body.model_dump(mode="json", exclude={"field"}))

    @app.exception_handler(ScheduleNotFound)
    def _not_found(_: ScheduleNotFound) -> Response:
        return error_response(HTTPStatus.NOT_FOUND, NOT_FOUND, "no such schedule in this workspace")

    @app.exception_handler(QueryNotFound)
    def _query_not_found(_: QueryNotFound) -> Response:
        return error_response(HTTPStatus.NOT_FOUND, NOT_FOUND, "no such query in this workspace")

    @app.exception_handler(access.AccessDenied)
    def _access_denied(error: access.AccessDenied) -> Response:
        refusal = access_refused(error.reason)
        return error_response(refusal.status, refusal.code, refusal.message)

    @app.exception_handler(InvalidRecurrence)
    def _invalid_recurrence(error: InvalidRecurrence) -> Response:
        field = "recurrence" if error.field == "rule" else f"recurrence.{error.field}"
        return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, INVALID_RECURRENCE, error.reason, field)

    @app.exception_handler(InvalidSubject)
    def _invalid_subject(error: InvalidSubject) -> Response:
        return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, VALIDATION_ERROR, error.reason, error.field)

    @app.exception_handler(OwnRouteOnly)
    def _own_route_only(error: OwnRouteOnly) -> Response:
        return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, VALIDATION_ERROR, error.reason, error.field)

    @app.exception_handler(RequestValidationError)
    def _request_invalid(error: RequestValidationError) -> Response:
        errors = error.errors()
        if any(list(e.get("loc") or ())[:1] == ["response"] for e in errors):
            # Powertools reports a response that breaks its own model this way: our bug, not the caller's.
            log_unexpected(error, "response validation")
            return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, INTERNAL_ERROR, "internal error")
        first = errors[0] if errors else {}
        field = _field_of(first.get("loc") or (), union_tags)
        if list(first.get("loc") or ())[:2] == ["query", "cursor"]:
            return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, INVALID_CURSOR, CURSOR_MESSAGE, "cursor")
        if first.get("type") in ("union_tag_invalid", "union_tag_not_found"):
            field = str((first.get("ctx") or {}).get("discriminator", "body")).strip("'")
        return error_response(HTTPStatus.UNPROCESSABLE_ENTITY, VALIDATION_ERROR, _validation_message(first), field)

    @app.exception_handler(RequestUnsupportedContentType)
    def _unsupported(_: RequestUnsupportedContentType) -> Response:
        return error_response(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, UNSUPPORTED_MEDIA_TYPE,
                              "send the body as application/json")

    @app.exception_handler(NotFoundError)
    def _no_route(_: NotFoundError) -> Response:  # create_app replaces it (405 for a known path)
        return error_response(HTTPStatus.NOT_FOUND, NOT_FOUND, "no such route")

    @app.exception_handler(psycopg.OperationalError)
    def _database_unavailable(error: psycopg.OperationalError) -> Response:
        logger.warning("database unavailable", extra={"error_type": type(error).__name__})
        return error_response(HTTPStatus.SERVICE_UNAVAILABLE, DATABASE_UNAVAILABLE, DATABASE_UNAVAILABLE_MESSAGE,
                              headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)})

    @app.exception_handler(Exception)
    def _unexpected(error: Exception) -> Response:
        log_unexpected(error, "route")
        return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, INTERNAL_ERROR, "internal error")
