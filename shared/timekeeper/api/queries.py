"""The saved-query routes of the HTTP API and the read-only catalogue.

=======  ==========================================  ==============  ===============================
method   path                                        token role      what
=======  ==========================================  ==============  ===============================
GET      ``/catalogue``                              queries:read    entities, columns, operators
GET      ``/queries?limit=&cursor=``                 queries:read    a page of the workspace's queries
POST     ``/queries``                                queries:write   create (version 1) -> 201
POST     ``/queries/preview``                        queries:read    a draft's first rows; saves nothing
GET      ``/queries/{query_id}``                     queries:read    the query, every version newest first
POST     ``/queries/{query_id}/versions``            queries:write   append version n + 1 -> 201
GET      ``/queries/{query_id}/versions/{version}``  queries:read    one version
DELETE   ``/queries/{query_id}``                     queries:write   mark deleted -> 204
=======  ==========================================  ==============  ===============================

Two checks, in this order, on every route:

1. the TOKEN: the authorizer's claims (401 ``unauthenticated`` without them) and a role
   that allows the action (``queries:read``, ``queries:write``, or ``queries:admin`` for
   both; else 403 ``forbidden``), exactly as the schedule routes;
2. the PERSON, now: the access rule of :mod:`timekeeper.platform.access`, asked in the
   database in the request's transaction (:func:`~timekeeper.platform.access.check_person`
   for the list, create and the catalogue, :func:`~timekeeper.platform.access.check_query`
   for a query's routes). A refusal is a 403 whose ``code`` is the rule's reason
   (``not_a_member``, ``left_workspace``, ``user_deactivated``, ``missing_role``: the
   membership's roles do not grant ``queries:read`` / ``queries:write``); ``not_found``
   is a 404 ``not_found``. The API's login sees users only through a membership of the
   entered workspace (row-level security), so a user who never belonged to the caller's
   workspace is ``not_a_member`` even if they exist elsewhere.

A deleted query is 404 on every route, including a pinned version of it (the store keeps
those versions for schedules and exports that pinned them, not for the API). Another
workspace's query is 404, never 403.

Definitions: the body's ``definition`` is a
:class:`~timekeeper.reporting.definition.QueryDefinition` (its JSON schema in the OpenAPI
document is generated from that model). A shape error (type, length, unknown key, limit
out of range) is a 422 ``validation_error``; a definition of the right shape that the
catalogue refuses (unknown entity or column, an operator the column's type does not
allow, a value of the wrong type) is a 422 ``definition_invalid``. Both name the field as
``definition.<dotted path>``, e.g. ``definition.filters[0].value``.

Values as people type them: with ``"values": "locale"`` in the body (create, new version,
preview), each filter value of a date or money column is text typed in the workspace's
locale (de_DE: ``"31.12.2026"``, ``"1.234,50"``), parsed with Babel and stored as the JSON
form (``"2026-12-31"``, ``123450`` minor units of the workspace's currency); a value that
does not parse is a 422 ``definition_invalid`` naming ``definition.filters[i].value``.
The published schema of ``definition`` is the JSON form's (``"values": "json"``, the
default). ``GET /catalogue`` and ``GET /queries/{query_id}`` answer ``entry``: the locale,
currency and zone the workspace's values are typed and shown in.

The preview runs a draft (never saved) as an export runs a saved version: compiled by the
same compiler, walled to the workspace by the query wall's row-level security, under the
export's statement timeout, in a read-only transaction, after the access rule allowed the
person ``queries:read``. A draft slower than the timeout is a 422 ``definition_invalid``
on ``definition`` (narrow it with filters).

(No ``from __future__ import annotations``: Powertools reads the route signatures'
annotations at run time.)
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import partial
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import UUID

import psycopg
from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from timekeeper.api import errors
from timekeeper.api.auth import QUERIES_READ, QUERIES_WRITE
from timekeeper.api.errors import ApiError
from timekeeper.api.models import (
    CURSOR_PATTERN,
    PLAIN_PATTERN,
    CanonicalUuid,
    PlainText,
    UtcDatetime,
    decode_cursor,
    encode_cursor,
)
from timekeeper.api.routing import SECURITY, ApiRouter, idempotency_header
from timekeeper.api.scope import WorkspaceScope, scope_for
from timekeeper.db.keyset import split_page
from timekeeper.reporting import definition as definitions
from timekeeper.reporting import store
from timekeeper.reporting.catalogue import CATALOGUE, OPERATORS, Column, ColumnType, Operator
from timekeeper.reporting.compiler import compile_query, preview_rows
from timekeeper.reporting.definition import (
    InvalidDefinition,
    QueryDefinition,
    check_definition,
    entered_values,
    storable_text,
)
from timekeeper.reporting.presentation import (
    Presentation,
    currency_digits,
    currency_sources,
    format_local_time,
    format_money,
    presentation_of,
)
from timekeeper.topology import WORKER_STATEMENT_TIMEOUT_S

_TAGS = ["queries"]
#: The largest version number a path may name (the column is a PostgreSQL integer).
MAX_VERSION = 2**31 - 1
MAX_DESCRIPTION = 2000
#: The most rows a preview answers.
MAX_PREVIEW_ROWS = 50


# --------------------------------------------------------------------------------- models


def _plain(text: str) -> str:
    if not storable_text(text):
        raise ValueError("must not contain NUL characters or unpaired surrogates")
    return text


QueryName = Annotated[str, Field(min_length=1, max_length=200, pattern=PLAIN_PATTERN,
                                 description="a label for people"), AfterValidator(_plain), PlainText]
Description = Annotated[str, Field(max_length=MAX_DESCRIPTION, pattern=r"^[^\x00]*$"), AfterValidator(_plain)]


Values = Annotated[Literal["json", "locale"], Field(
    description="json: filter values in their JSON form (ISO dates, integer minor units); locale: date and "
                "money filter values as text typed in the workspace's locale (de_DE: 31.12.2026, 1.234,50)")]


class QueryCreate(BaseModel):
    """``POST /queries``: a new saved query; ``definition`` becomes version 1."""

    model_config = ConfigDict(extra="forbid")

    name: QueryName
    description: Description = ""
    definition: QueryDefinition
    values: Values = "json"


class VersionCreate(BaseModel):
    """``POST /queries/{query_id}/versions``: append a version with ``definition`` and make
    it current; ``name`` / ``description`` change too when given (null or left out: kept)."""

    model_config = ConfigDict(extra="forbid")

    definition: QueryDefinition
    name: QueryName | None = None
    description: Description | None = None
    values: Values = "json"


class PreviewCreate(BaseModel):
    """``POST /queries/preview``: a draft definition (not saved) and how many of its first
    rows to answer."""

    model_config = ConfigDict(extra="forbid")

    definition: QueryDefinition
    values: Values = "json"
    limit: int = Field(20, ge=1, le=MAX_PREVIEW_ROWS, description="rows to answer (at most 50)")


class QueryOut(BaseModel):
    """A saved query (without its versions)."""

    id: UUID
    name: str
    description: str
    current_version: int = Field(ge=1)
    entity: str = Field(description="the entity of the current version")
    created_by: str
    created_at: UtcDatetime
    updated_by: str = Field(description="who saved the current version (the last change)")
    updated_at: UtcDatetime


class DefinitionProblem(BaseModel):
    """Why a stored definition no longer checks against today's catalogue (e.g. a column
    was removed): it cannot be run or exported until a new version replaces it."""

    field: str = Field(examples=["definition.columns[1]"])
    reason: str


class VersionOut(BaseModel):
    """One immutable version of a saved query."""

    query_id: UUID
    version: int = Field(ge=1)
    definition: QueryDefinition
    created_by: str
    created_at: UtcDatetime
    problem: DefinitionProblem | None = Field(
        None, description="null while the definition checks against the catalogue")


class QuerySaved(BaseModel):
    """``POST /queries`` and ``POST /queries/{query_id}/versions``: the query and the
    version just saved."""

    query: QueryOut
    version: VersionOut


class EntryOut(BaseModel):
    """How the workspace writes values: filter values sent with ``"values": "locale"`` are
    typed in ``locale``; money in ``currency`` has ``currency_digits`` decimals; instants
    are shown in ``timezone``."""

    locale: str = Field(examples=["de_DE"])
    currency: str = Field(examples=["EUR"])
    currency_digits: int = Field(examples=[2])
    timezone: str = Field(examples=["Europe/Berlin"])


class PinnedBy(BaseModel):
    """A delivery (query schedule) of the workspace whose source is this query."""

    schedule_id: UUID
    name: str
    version: int = Field(ge=1, description="the version it pins")


class QueryDetail(BaseModel):
    """``GET /queries/{query_id}``: the query, every version newest first, the deliveries
    that pin its versions and how the workspace writes values."""

    query: QueryOut
    versions: list[VersionOut]
    pinned_by: list[PinnedBy] = Field(description="the workspace's deliveries of this query, by name")
    entry: EntryOut


class QueryPage(BaseModel):
    """One page of saved queries, oldest first; pass ``next_cursor`` as ``cursor`` for the next."""

    items: list[QueryOut]
    next_cursor: str | None = Field(description="opaque; null on the last page")
    timezone: str = Field(description="the workspace's IANA zone (where people read its instants)")


class PreviewColumn(BaseModel):
    """A column of a preview, in output order."""

    name: str
    label: str
    type: ColumnType


class PreviewOut(BaseModel):
    """``POST /queries/preview``: the draft's first rows, each cell as text for people
    (money with its currency in the workspace's locale, instants in the workspace's zone
    with the UTC instant beside, dates ISO) or null."""

    columns: list[PreviewColumn]
    rows: list[list[str | None]]
    more: bool = Field(description="more rows match than were answered")


class ColumnOut(BaseModel):
    """A column a query may select, filter and sort by."""

    name: str
    label: str
    type: ColumnType
    values: list[str] | None = Field(description="the allowed values of an enum column; null otherwise")
    nullable: bool = Field(description="may be missing (is_null / is_not_null find it)")


class EntityOut(BaseModel):
    """An entity of the catalogue with its columns, in catalogue order."""

    name: str
    label: str
    columns: list[ColumnOut]


class OperatorOut(BaseModel):
    """A filter operator and the value it takes: ``one`` value of the column's type, a
    ``list`` of 1 to ``max_list_values`` values, a ``pair`` ``[low, high]`` (inclusive), or
    ``none`` (leave ``value`` out)."""

    name: Operator
    value: str = Field(examples=["one", "list", "pair", "none"])


class TypeOut(BaseModel):
    """A column type and the operators it allows."""

    name: ColumnType
    operators: list[Operator]


class LimitsOut(BaseModel):
    """Bounds of a definition."""

    max_columns: int
    max_filters: int
    max_sort: int
    max_list_values: int
    max_text_value: int = Field(description="characters of a text filter value")
    max_limit: int = Field(description="the largest row limit")


class CatalogueOut(BaseModel):
    """``GET /catalogue``: what a definition may name, for building query editors."""

    entities: list[EntityOut]
    types: list[TypeOut]
    operators: list[OperatorOut]
    limits: LimitsOut
    entry: EntryOut | None = Field(None, description="how the caller's workspace writes values")


_TAKES = {Operator.BETWEEN: "pair", Operator.IN: "list", Operator.NOT_IN: "list", Operator.IS_NULL: "none",
          Operator.IS_NOT_NULL: "none"}


def catalogue_out() -> CatalogueOut:
    """The catalogue of :mod:`timekeeper.reporting.catalogue` as :class:`CatalogueOut`
    (operators in the order :class:`~timekeeper.reporting.catalogue.Operator` lists them)."""
    order = list(Operator)
    return CatalogueOut(
        entities=[EntityOut(name=e.name, label=e.label, columns=[
            ColumnOut(name=c.name, label=c.label, type=c.type, values=list(c.values) if c.values else None,
                      nullable=c.nullable) for c in e.columns.values()]) for e in CATALOGUE.values()],
        types=[TypeOut(name=t, operators=sorted(OPERATORS[t], key=order.index)) for t in ColumnType],
        operators=[OperatorOut(name=op, value=_TAKES.get(op, "one")) for op in order],
        limits=LimitsOut(max_columns=definitions.MAX_COLUMNS, max_filters=definitions.MAX_FILTERS,
                         max_sort=definitions.MAX_SORT, max_list_values=definitions.MAX_LIST_VALUES,
                         max_text_value=definitions.MAX_TEXT_VALUE, max_limit=definitions.MAX_LIMIT))


def query_out(query: store.SavedQuery, current: store.QueryVersion | store.QuerySummary) -> QueryOut:
    """A :class:`~timekeeper.reporting.store.SavedQuery` as :class:`QueryOut`; ``current``
    is its current version (or its summary): the entity and who saved it."""
    if isinstance(current, store.QuerySummary):
        entity, updated_by = current.entity, current.updated_by
    else:
        entity, updated_by = str(current.definition.get("entity", "")), current.created_by
    return QueryOut(id=query.id, name=query.name, description=query.description,
                    current_version=query.current_version, entity=entity, created_by=query.created_by,
                    created_at=query.created_at, updated_by=updated_by, updated_at=query.updated_at)


def version_out(version: store.QueryVersion) -> VersionOut:
    """A :class:`~timekeeper.reporting.store.QueryVersion` as :class:`VersionOut`, with the
    problem today's catalogue finds in it (if any)."""
    problem = None
    try:
        check_definition(version.definition)
    except InvalidDefinition as error:
        problem = DefinitionProblem(field=_definition_field(error.field), reason=error.reason)
    return VersionOut(query_id=version.query_id, version=version.version,
                      definition=QueryDefinition.model_validate(version.definition),
                      created_by=version.created_by, created_at=version.created_at, problem=problem)


def _definition_field(path: str) -> str:
    return "definition" if path in ("", "definition") else f"definition.{path}"


def entry_out(presentation: Presentation) -> EntryOut:
    """The workspace's :class:`~timekeeper.reporting.presentation.Presentation` as :class:`EntryOut`."""
    return EntryOut(locale=presentation.locale, currency=presentation.currency,
                    currency_digits=currency_digits(presentation.currency), timezone=presentation.timezone)


def entered(definition: QueryDefinition, values: str, presentation: Presentation) -> QueryDefinition:
    """``definition`` with its date and money filter values parsed from the workspace's
    locale when ``values`` is ``"locale"`` (as it is for ``"json"``); raises
    :class:`~timekeeper.reporting.definition.InvalidDefinition` naming the value."""
    if values != "locale":
        return definition
    return entered_values(definition, locale=presentation.locale,
                          currency_digits=currency_digits(presentation.currency))


def _cell(column: Column, value: Any, currency: Any, presentation: Presentation) -> str | None:
    """One preview cell as text for people (see :class:`PreviewOut`)."""
    if value is None:
        return None
    if column.type is ColumnType.MONEY and isinstance(value, int):
        code = currency.strip() if isinstance(currency, str) and currency.strip() else presentation.currency
        return format_money(value, code, presentation.locale)
    if isinstance(value, datetime):
        return f"{format_local_time(value, presentation)} ({value.astimezone(UTC):%Y-%m-%d %H:%M} UTC)"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def preview_out(columns: tuple[Column, ...], rows: list[tuple[Any, ...]], more: bool,
                presentation: Presentation) -> PreviewOut:
    """Rows of a compiled query as :class:`PreviewOut` (cells as text for people)."""
    sources = currency_sources(columns)
    return PreviewOut(
        columns=[PreviewColumn(name=c.name, label=c.label, type=c.type) for c in columns],
        rows=[[_cell(c, row[i], row[sources[i]] if sources[i] is not None else None, presentation)
               for i, c in enumerate(columns)] for row in rows],
        more=more)


# --------------------------------------------------------------------------------- routes


@contextmanager
def _definition_checked() -> Iterator[None]:
    """A definition the catalogue refuses is a 422 ``definition_invalid`` naming the field."""
    try:
        yield
    except InvalidDefinition as error:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, errors.DEFINITION_INVALID, error.reason,
                       _definition_field(error.field)) from None


_ERRORS = {401: "No or invalid authorizer claims",
           403: "forbidden: the token's roles do not allow this; or the access rule's reason "
                "(not_a_member, left_workspace, user_deactivated, missing_role)",
           404: "No such (undeleted) query or version in the caller's workspace",
           415: "The body is not application/json",
           422: "Invalid input (the field and the reason): validation_error, definition_invalid, invalid_cursor"}
_responses = partial(errors.responses, texts=_ERRORS)

QueryId = Annotated[CanonicalUuid, Path(description="the saved query's id")]
VersionNumber = Annotated[int, Path(ge=1, le=MAX_VERSION, description="the version number (1, 2, ...)")]


Reader = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_READ))]
Writer = Annotated[WorkspaceScope, Depends(scope_for(QUERIES_WRITE))]
#: The catalogue as ``GET /catalogue`` answers it (it changes only with a release).
_CATALOGUE = catalogue_out()

router = ApiRouter()


@router.get("/catalogue", tags=_TAGS, operation_id="getCatalogue", security=SECURITY,
            summary="The entities, columns (type, enum values) and operators per type a saved query may use",
            responses=_responses(200, "The catalogue"))
def get_catalogue(scope: Reader) -> CatalogueOut:
    with scope.unit(QUERIES_READ, noun="query") as conn:
        presentation = presentation_of(conn, scope.workspace_id)
    return _CATALOGUE.model_copy(update={"entry": entry_out(presentation)})


@router.get("/queries", tags=_TAGS, operation_id="listQueries", security=SECURITY,
            summary="List the workspace's saved queries (cursor pagination)",
            responses=_responses(200, "A page of saved queries, oldest first"))
def list_queries(
    scope: Reader,
    limit: Annotated[int, Query(ge=1, le=200, description="page size")] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                        description="next_cursor of the previous page")] = None,
) -> QueryPage:
    with scope.unit(QUERIES_READ, noun="query") as conn:
        found = store.list_queries(conn, workspace_id=scope.workspace_id, after=decode_cursor(cursor),
                                   limit=limit + 1)
        rows, after = split_page(found, limit, lambda q: (q.created_at, q.id))
        summaries = store.current_summaries(conn, workspace_id=scope.workspace_id, query_ids=[q.id for q in rows])
        zone = presentation_of(conn, scope.workspace_id).timezone
    return QueryPage(items=[query_out(q, summaries[q.id]) for q in rows], next_cursor=encode_cursor(after),
                     timezone=zone)


@router.post("/queries", tags=_TAGS, operation_id="createQuery", security=SECURITY,
             summary="Save a query (the definition is checked against the catalogue) as version 1",
             responses=_responses(201, "Created: the query and its version 1", 409, 415,
                                  texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT}, headers=errors.CREATED_ONCE))
def create_query(
    scope: Writer, body: Annotated[QueryCreate, Body()],
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key answers what the first request answered")] = None,
) -> Response[QuerySaved]:
    def create() -> Response:
        with _definition_checked(), scope.unit(QUERIES_WRITE, noun="query") as conn:
            definition = entered(body.definition, body.values, presentation_of(conn, scope.workspace_id))
            query, version = store.create_query(
                conn, workspace_id=scope.workspace_id, name=body.name, description=body.description,
                definition=definition, actor=scope.user_id, now=scope.now)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=QuerySaved(query=query_out(query, version), version=version_out(version)),
                        headers={"Location": f"/queries/{query.id}"})

    return scope.create_once(idempotency_key, body, create)


@router.get("/queries/<query_id>", tags=_TAGS, operation_id="getQuery", security=SECURITY,
            summary="A saved query with every version (newest first), each with its definition, and the "
                    "deliveries that pin its versions",
            responses=_responses(200, "The query, its versions and what pins them", 404))
def get_query(scope: Reader, query_id: QueryId) -> QueryDetail:
    with scope.unit(QUERIES_READ, query_id=query_id, noun="query") as conn:
        query = store.get_query(conn, workspace_id=scope.workspace_id, query_id=query_id)
        versions = store.list_versions(conn, workspace_id=scope.workspace_id, query_id=query_id)
        pins = store.pinned_by(conn, workspace_id=scope.workspace_id, query_id=query_id)
        presentation = presentation_of(conn, scope.workspace_id)
    current = next(v for v in versions if v.version == query.current_version)
    return QueryDetail(query=query_out(query, current), versions=[version_out(v) for v in reversed(versions)],
                       pinned_by=[PinnedBy(schedule_id=p.schedule_id, name=p.name, version=p.version) for p in pins],
                       entry=entry_out(presentation))


@router.post("/queries/preview", tags=_TAGS, operation_id="previewQuery", security=SECURITY,
             summary="The first rows (at most 50) of a draft definition, read with the caller's access; saves nothing",
             responses=_responses(200, "The draft's first rows", 415))
def preview_query(scope: Reader, body: Annotated[PreviewCreate, Body()]) -> PreviewOut:
    with _definition_checked(), scope.unit(QUERIES_READ, noun="query") as conn:
        presentation = presentation_of(conn, scope.workspace_id)
        compiled = compile_query(entered(body.definition, body.values, presentation), workspace_id=scope.workspace_id)
        try:
            rows, more = preview_rows(conn, compiled, limit=body.limit)
        except psycopg.errors.QueryCanceled:
            raise InvalidDefinition("", f"the query took longer than {WORKER_STATEMENT_TIMEOUT_S} s: "
                                        "narrow it with filters") from None
    return preview_out(compiled.columns, rows, more, presentation)


@router.post("/queries/<query_id>/versions", tags=_TAGS, operation_id="addQueryVersion", security=SECURITY,
             summary="Save a new version (n + 1, made current); earlier versions never change",
             responses=_responses(201, "Created: the query and its new version", 404, 409, 415,
                                  texts={**_ERRORS, 409: errors.KEY_REUSED_TEXT}, headers=errors.CREATED_ONCE))
def add_query_version(
    scope: Writer, query_id: QueryId, body: Annotated[VersionCreate, Body()],
    idempotency_key: Annotated[str | None, idempotency_header(
        "repeat a request safely: the same key answers what the first request answered")] = None,
) -> Response[QuerySaved]:
    def create() -> Response:
        with _definition_checked(), scope.unit(QUERIES_WRITE, query_id=query_id, noun="query") as conn:
            definition = entered(body.definition, body.values, presentation_of(conn, scope.workspace_id))
            query, version = store.add_version(
                conn, workspace_id=scope.workspace_id, query_id=query_id, definition=definition,
                actor=scope.user_id, now=scope.now, name=body.name, description=body.description)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=QuerySaved(query=query_out(query, version), version=version_out(version)),
                        headers={"Location": f"/queries/{query.id}/versions/{version.version}"})

    return scope.create_once(idempotency_key, body, create)


@router.get("/queries/<query_id>/versions/<version>", tags=_TAGS, operation_id="getQueryVersion",
            security=SECURITY, summary="One version of a saved query",
            responses=_responses(200, "The version", 404))
def get_query_version(scope: Reader, query_id: QueryId, version: VersionNumber) -> VersionOut:
    with scope.unit(QUERIES_READ, query_id=query_id, noun="query") as conn:
        found = store.get_version(conn, workspace_id=scope.workspace_id, query_id=query_id, version=version)
    return version_out(found)


@router.delete("/queries/<query_id>", tags=_TAGS, operation_id="deleteQuery", security=SECURITY,
               summary="Delete (404 on every route from then on; versions are kept for what pinned them)",
               responses=_responses(204, "Deleted", 404))
def delete_query(scope: Writer, query_id: QueryId) -> Response[None]:
    with scope.unit(QUERIES_WRITE, query_id=query_id, noun="query") as conn:
        store.delete_query(conn, workspace_id=scope.workspace_id, query_id=query_id, now=scope.now,
                           actor=scope.user_id)
    return Response(status_code=HTTPStatus.NO_CONTENT, content_type=None, body=None)
