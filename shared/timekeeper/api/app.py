"""The HTTP API of schedule owners: routes on Powertools' REST resolver over the owner
actions of :mod:`timekeeper.schedules.service`, walled by the tenant rule.

``create_app(adapters)`` builds a resolver whose routes validate requests and responses
with the pydantic models of :mod:`timekeeper.api.models`; :func:`openapi_document`
generates the OpenAPI document from the same models (served at ``GET /openapi.json`` and
written by ``python -m timekeeper openapi --out FILE``).

Every route but ``/openapi.json`` takes a :class:`~timekeeper.api.scope.WorkspaceScope`
from a dependency that reads the authorizer's claims (401), checks the route's role (403)
and binds the caller's workspace -- the one place the tenant rule lives.

The saved-query routes and ``GET /catalogue`` live in :mod:`timekeeper.api.queries`
(registered by :func:`create_app` through the same ``route`` helper); they also apply the
access rule of :mod:`timekeeper.platform.access` to the person.

(No ``from __future__ import annotations`` here: Powertools reads the route signatures'
annotations at run time, including the dependencies built inside :func:`create_app`.)
"""

import base64
import contextvars
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any, get_type_hints

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from aws_lambda_powertools.event_handler.request import Request

from timekeeper import clock
from timekeeper.api import errors
from timekeeper.api.auth import READ, RUN, WRITE, identity_from_event
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import ApiError, ErrorBody
from timekeeper.api.models import (
    CURSOR_PATTERN,
    NUMBER_PATH_PARAMETERS,
    OWNERS,
    PLAIN_DECIMAL,
    CanonicalUuid,
    OwnerName,
    RunAccepted,
    ScheduleDetail,
    ScheduleOut,
    SchedulePage,
    ScheduleStatus,
    ScheduleUpdate,
    check_rule_shape,
    decode_cursor,
    detail_out,
    encode_cursor,
    schedule_create_model,
    schedule_out,
)
from timekeeper.api.queries import register_query_routes
from timekeeper.api.reports import register_report_routes
from timekeeper.api.scope import OwnerRoutedPublisher, WorkspaceScope
from timekeeper.api.snapshot_routes import register_snapshot_routes
from timekeeper.observability import set_log_keys
from timekeeper.schedules.messages import RunPublisher
from timekeeper.schedules.recurrence import InvalidRecurrence
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.snapshots.registry import SnapshotRegistry

API_TITLE = "Timekeeper API"
API_VERSION = "1.0.0"
SECURITY_SCHEME = "authorizer"
_SECURITY = [{SECURITY_SCHEME: []}]

_DESCRIPTION = """Schedule owners' routes of Timekeeper, the scheduled-work backbone.

Authentication is API Gateway's: its Lambda authorizer verifies the bearer token and passes
the claims user_id (or principalId), workspace_id and roles (comma-separated) to the API.
Roles: schedules:read (list, get), schedules:write (create, update, pause, resume, delete),
schedules:run (run now), schedules:admin (all); queries:read (list, get, catalogue),
queries:write (create, new version, delete), queries:admin (both). A request without claims
is 401, a missing role 403, another workspace's schedule or query 404. The saved-query
routes then apply the access rule to the person (an active user, a current member whose
membership roles grant it): a refusal is 403 with its reason as the code (not_a_member,
left_workspace, user_deactivated, missing_role). Every error body is {"code", "message", "field"?}.
Monthly snapshots: snapshots:read lists the caller's workspace's periods; a snapshot type's
staff role (the Platform's: platform:staff) requests re-runs and backfills of that type in
any workspace and reads any workspace's periods; a refused request's code is the ledger's
reason (unsupported_type, type_disabled, unknown_workspace: 422; period_not_complete,
active_work, protected_history, not_planned, already_planned: 409).
Locally (python -m timekeeper serve) the bearer token is dev:<user>:<workspace uuid>:<roles>."""


def _runtime_snapshot_registry() -> SnapshotRegistry:
    from timekeeper import runtime

    return runtime.snapshot_registry()


@dataclass(frozen=True)
class ApiAdapters:
    """What the API needs from the edge, created once per execution environment.

    * ``connection()`` -- the API's tenant-walled connection (:func:`timekeeper.api.db.connect_api`),
      idle and usable (e.g. ``ConnectionProvider.get``).
    * ``publisher_for(pipeline_name)`` -- the run-queue publisher of a pipeline.
    * ``registry()`` -- every owner's registered work kinds.
    * ``now()`` -- the clock (aware UTC), read once per request.
    * ``export_publisher()`` -- the exports queue's publisher (export routes); ``files()``
      also gives their download links.
    * ``snapshot_registry()`` -- the snapshot types of the deployment's environment
      (default: :func:`timekeeper.runtime.snapshot_registry`).
    """

    connection: Callable[[], TenantConnection]
    publisher_for: Callable[[str], RunPublisher]
    registry: Callable[[], WorkKindRegistry]
    now: Callable[[], datetime] = clock.now
    #: The report renderer's client (:class:`timekeeper.aws.renderer.RendererClient`), for render requests.
    renderer: Callable[[], Any] | None = None
    #: ``(s3 client, files bucket)`` for download links of rendered reports.
    files: Callable[[], tuple[Any, str]] | None = None
    #: The exports queue's publisher (:func:`timekeeper.runtime.export_publisher`), for export requests.
    export_publisher: Callable[[], Any] | None = None
    snapshot_registry: Callable[[], SnapshotRegistry] = _runtime_snapshot_registry
    #: The download links' signer (:class:`timekeeper.queries.links.LinkSigner`), for ``GET /downloads/{token}``.
    links: Callable[[], Any] | None = None


def _errors_doc(*codes: int) -> dict[int, dict[str, Any]]:
    texts = {401: "No or invalid authorizer claims", 403: "The caller's roles do not allow this",
             404: "No such schedule in the caller's workspace", 409: "The action conflicts with the schedule's state",
             415: "The body is not application/json", 422: "Invalid input (the field and the reason)"}
    return {code: {"description": texts[code], "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}}}
            for code in codes}


def _responses(status: int, description: str, *error_codes: int) -> dict[int, dict[str, Any]]:
    """The OpenAPI responses of a route: ``status`` with the return annotation's model, and
    the error statuses with :class:`ErrorBody` (replacing Powertools' default 422 shape)."""
    out: dict[int, dict[str, Any]] = {status: {"description": description}}
    out.update(_errors_doc(401, 403, 422, *error_codes))
    return out


ScheduleId = Annotated[CanonicalUuid, Path(description="the schedule's id")]


def _rule_matches(rule: str, path: str) -> bool:
    """Whether a Powertools rule (``/schedules/<schedule_id>``) matches ``path``."""
    pattern = re.sub(r"<[^/>]+>", "[^/]+", re.escape(rule))
    return re.fullmatch(pattern, path) is not None


def _raw_path_parameters(route: str | None, path: str) -> dict[str, str]:
    """The path parameters of ``path`` as sent (text), by the OpenAPI-style ``route``
    (``/queries/{query_id}/versions/{version}``); empty when it does not match."""
    if not route:
        return {}
    pattern = re.sub(r"\\\{([^/}]+)\\\}", r"(?P<\1>[^/]+)", re.escape(route))
    found = re.fullmatch(pattern, path)
    return found.groupdict() if found else {}


def _is_json(media_type: str) -> bool:
    kind = media_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _normalized_media_type(media_type: str) -> str:
    """``"APPLICATION/JSON; Charset=UTF-8"`` -> ``"application/json; Charset=UTF-8"``: media
    types are case-insensitive (RFC 9110), parameters are passed on as sent."""
    kind, sep, params = media_type.partition(";")
    return kind.strip().lower() + (sep + params if sep else "")


def parse_json_body(text: str) -> Any:
    """Parse a request body as JSON; raises ``json.JSONDecodeError`` for anything the
    parser refuses, including input too deep for it (``RecursionError``: e.g. 100,000
    nested brackets) and integer literals longer than Python converts (``ValueError``:
    over 4,300 digits), so each is a 422 naming the body instead of an unhandled fault."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except ValueError:
        raise json.JSONDecodeError("a number is too long", text, 0) from None


class JsonApiResolver(APIGatewayRestResolver):
    """Powertools' REST resolver for an API that takes JSON only: a request body sent with
    another ``Content-Type`` is refused with a 415 :class:`ErrorBody` before routing (the
    resolver's own body parsing would otherwise try forms and multipart, and fail with a
    server error on a multipart type without a boundary). A body without a content type is
    read as JSON, and the media type is compared without regard to case. Bodies are parsed
    by :func:`parse_json_body`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(json_body_deserializer=parse_json_body, **kwargs)

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Resolve ``event`` (a REST proxy event); see ``APIGatewayRestResolver.resolve``."""
        path = str(event.get("path") or "")
        if len(path) > 1 and path.endswith("/"):
            # One spelling per route: "/schedules/<id>/" is not "/schedules/<id>".
            return _early_error(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such route (a path does not end in /)")
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        content_type = headers.get("content-type")
        body = event.get("body")
        if body not in (None, ""):
            if content_type and not _is_json(str(content_type)):
                return _early_error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, errors.UNSUPPORTED_MEDIA_TYPE,
                                    "send the body as application/json")
            if content_type:
                event = _with_content_type(event, _normalized_media_type(str(content_type)))
            text = str(body)
            if event.get("isBase64Encoded"):
                try:
                    text = base64.b64decode(text, validate=True).decode("utf-8")
                except (ValueError, UnicodeDecodeError):
                    return _early_error(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR,
                                        "the body is not UTF-8 JSON", "body")
            nul = nul_field(text)
            if nul is not None:
                return _early_error(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR,
                                    "text may not contain the NUL character (U+0000)", nul)
        # Each request resolves in a copy of the caller's context, so the log keys a route
        # sets (the caller's workspace) end with the request: neither a later request on
        # this thread nor one served at once on another writes them.
        return contextvars.copy_context().run(super().resolve, event, context)


def nul_field(text: str) -> str | None:
    """The field path (``"recipients[0]"``, ``"source.kind"``; ``"body"`` for the top
    level or a key) of the first JSON string in ``text`` that holds U+0000, or None (none,
    or not JSON: the route's validation refuses that). Every text column is PostgreSQL
    ``text``, which cannot hold NUL, so one rule at the edge refuses it for every field."""
    if "\x00" not in text and "\\u0000" not in text:
        return None  # the only spellings of NUL in JSON text (a raw NUL is invalid JSON anyway)
    try:
        value = parse_json_body(text)
    except json.JSONDecodeError:
        return None
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path or "body"
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                if "\x00" in key:
                    return path or "body"
                stack.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in reversed(list(enumerate(item))))
    return None


def _with_content_type(event: dict[str, Any], content_type: str) -> dict[str, Any]:
    """A copy of ``event`` whose ``Content-Type`` header (single and multi-value) is ``content_type``."""
    headers = {k: v for k, v in (event.get("headers") or {}).items() if str(k).lower() != "content-type"}
    headers["Content-Type"] = content_type
    out = {**event, "headers": headers}
    if event.get("multiValueHeaders"):
        multi = {k: v for k, v in event["multiValueHeaders"].items() if str(k).lower() != "content-type"}
        out["multiValueHeaders"] = {**multi, "Content-Type": [content_type]}
    return out


def _early_error(status: HTTPStatus, code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """A REST proxy response with an :class:`ErrorBody`, for refusals before routing."""
    body = ErrorBody(code=code, message=message, field=field)
    return {"statusCode": status.value, "isBase64Encoded": False, "body": body.model_dump_json(exclude_none=True),
            "multiValueHeaders": {"Content-Type": [content_types.APPLICATION_JSON]}}


def _query_names(func: Callable[..., Any]) -> frozenset[str]:
    """The query parameter names a route function declares (``Annotated[..., Query()]``)."""
    names = set()
    for name, hint in get_type_hints(func, include_extras=True).items():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Query):
                names.add(meta.alias or name)
    return frozenset(names)


def create_app(adapters: ApiAdapters) -> JsonApiResolver:
    """Build the API resolver over ``adapters`` (routes, validation, error handlers).

    Call ``app.resolve(event, context)`` with an API Gateway REST proxy event.
    """
    app = JsonApiResolver(enable_validation=True)
    publisher = OwnerRoutedPublisher(adapters.publisher_for)
    registry = adapters.registry()
    kinds_by_owner = {owner: registry.names(owner) for owner in OWNERS}
    CreateBody = schedule_create_model(kinds_by_owner)  # noqa: N806 - a type
    errors.install_error_handlers(app, union_tags=frozenset(kinds_by_owner))

    def scope_for(permission: str) -> Callable[[Request], WorkspaceScope]:
        def scope(request: Request) -> WorkspaceScope:
            identity = identity_from_event(request.resolved_event.raw_event)
            set_log_keys(workspace_id=identity.workspace_id)
            identity.require(permission)
            return WorkspaceScope(identity=identity, conn=adapters.connection(), now=adapters.now(),
                                  publisher=publisher, kinds=registry, method=request.method.upper(),
                                  path=request.resolved_event.path)

        scope.__name__ = f"scope_{permission.replace(':', '_')}"
        return scope

    Reader = Annotated[WorkspaceScope, Depends(scope_for(READ))]  # noqa: N806 - type aliases
    Writer = Annotated[WorkspaceScope, Depends(scope_for(WRITE))]  # noqa: N806
    Runner = Annotated[WorkspaceScope, Depends(scope_for(RUN))]  # noqa: N806

    methods_by_rule: dict[str, set[str]] = {}
    query_names: dict[tuple[str, str], frozenset[str]] = {}

    def route(method: str, rule: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """``app.route`` that also records the rule's methods (405) and query names (422)."""
        methods_by_rule.setdefault(rule, set()).add(method)
        register = app.route(rule, method, **kwargs)

        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            query_names[(method, re.sub(r"<([^/>]+)>", r"{\1}", rule))] = _query_names(func)
            return register(func)

        return decorator

    def reject_unknown_query(app: JsonApiResolver, next_middleware: Callable[..., Response]) -> Response:
        """A query parameter the route does not declare is a 422 (a misspelt filter must
        not silently list everything)."""
        request = app.request
        known = query_names.get((request.method, request.route))
        unknown = sorted((request.query_parameters or {}).keys() - (known or frozenset()))
        if known is not None and unknown:  # (the not-found handler runs through here too)
            return errors.error_response(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR,
                                         "unknown query parameter", unknown[0][:100])
        for name, raw in _raw_path_parameters(request.route, app.current_event.path).items():
            if name in NUMBER_PATH_PARAMETERS and not PLAIN_DECIMAL.fullmatch(raw):
                return errors.error_response(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR,
                                             "write the number as plain decimal digits (1, 2, ...)", name)
        return next_middleware(app)

    app.use(middlewares=[reject_unknown_query])

    @app.not_found
    def no_route(_: Exception) -> Response:
        path, method = app.current_event.path, app.current_event.http_method.upper()
        methods = sorted({m for rule, ms in methods_by_rule.items() if _rule_matches(rule, path) for m in ms})
        if methods and method not in methods:
            return errors.error_response(HTTPStatus.METHOD_NOT_ALLOWED, errors.METHOD_NOT_ALLOWED,
                                         f"this route takes {', '.join(methods)}",
                                         headers={"Allow": ", ".join(methods)})
        return errors.error_response(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such route")

    @route("GET", "/schedules", tags=["schedules"], operation_id="listSchedules", security=_SECURITY,
           summary="List the workspace's schedules (filter by owner module and status; cursor pagination)",
           responses=_responses(200, "A page of schedules, oldest first"))
    def list_schedules(
        scope: Reader,
        owner: Annotated[OwnerName | None, Query(description="only this owner module's schedules")] = None,
        status: Annotated[ScheduleStatus | None, Query(description="only schedules in this status")] = None,
        limit: Annotated[int, Query(ge=1, le=200, description="page size")] = 50,
        cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                            description="next_cursor of the previous page")] = None,
    ) -> SchedulePage:
        page = scope.list(owner=owner, status=status, after=decode_cursor(cursor), limit=limit)
        return SchedulePage(items=[schedule_out(r) for r in page.rows], next_cursor=encode_cursor(page.next_after))

    @route("POST", "/schedules", tags=["schedules"], operation_id="createSchedule", security=_SECURITY,
           summary="Create a schedule (the recurrence is validated; the owner's work kind must exist; a kind "
                   "with a route of its own, queries.deliver, is refused: use /query-schedules)",
           responses=_responses(201, "Created", 415))
    def create_schedule(scope: Writer, body: Annotated[CreateBody, Body()]) -> Response[ScheduleOut]:
        check_rule_shape(body.recurrence)
        row = scope.create(owner=body.owner, work_kind=body.work_kind, recurrence=body.recurrence,
                           subject_id=body.subject_id, name=body.name, active=body.active)
        return Response(status_code=HTTPStatus.CREATED, content_type=content_types.APPLICATION_JSON,
                        body=schedule_out(row), headers={"Location": f"/schedules/{row.id}"})

    @route("GET", "/schedules/<schedule_id>", tags=["schedules"], operation_id="getSchedule", security=_SECURITY,
           summary="A schedule with its latest run, next 5 occurrences (UTC and local) and history",
           responses=_responses(200, "The schedule", 404))
    def get_schedule(
        scope: Reader, schedule_id: ScheduleId,
        history_limit: Annotated[int, Query(ge=1, le=200, description="runs and events to return")] = 50,
    ) -> ScheduleDetail:
        return detail_out(scope.details(schedule_id, history_limit=history_limit))

    @route("PATCH", "/schedules/<schedule_id>", tags=["schedules"], operation_id="updateSchedule",
           security=_SECURITY, summary="Change the definition (recomputes the next due instant from now; no backlog)",
           responses=_responses(200, "The updated schedule", 404, 415))
    def update_schedule(scope: Writer, schedule_id: ScheduleId,
                        body: Annotated[ScheduleUpdate, Body()]) -> ScheduleOut:
        if body.recurrence is not None:
            check_rule_shape(body.recurrence)
        return schedule_out(scope.update(schedule_id, recurrence=body.recurrence, name=body.name,
                                         subject_id=body.subject_id))

    @route("POST", "/schedules/<schedule_id>/pause", tags=["schedules"], operation_id="pauseSchedule",
           security=_SECURITY, summary="Pause (idempotent)", responses=_responses(200, "The paused schedule", 404))
    def pause_schedule(scope: Writer, schedule_id: ScheduleId) -> ScheduleOut:
        return schedule_out(scope.pause(schedule_id))

    @route("POST", "/schedules/<schedule_id>/resume", tags=["schedules"], operation_id="resumeSchedule",
           security=_SECURITY, summary="Resume from now (resets the failure streak; no backlog run)",
           responses=_responses(200, "The active schedule", 404, 409))
    def resume_schedule(scope: Writer, schedule_id: ScheduleId) -> ScheduleOut:
        try:
            return schedule_out(scope.resume(schedule_id))
        except InvalidRecurrence as error:
            raise ApiError(409, errors.DEFINITION_INVALID, f"the saved rule no longer validates: {error.reason}; "
                           "update the recurrence first", "recurrence") from None

    @route("DELETE", "/schedules/<schedule_id>", tags=["schedules"], operation_id="deleteSchedule",
           security=_SECURITY, summary="Delete (runs and history are kept for audit)",
           responses=_responses(204, "Deleted", 404))
    def delete_schedule(scope: Writer, schedule_id: ScheduleId) -> Response[None]:
        scope.delete(schedule_id)
        return Response(status_code=HTTPStatus.NO_CONTENT, content_type=None, body=None)

    @route("POST", "/schedules/<schedule_id>/run", tags=["schedules"], operation_id="runScheduleNow",
           security=_SECURITY, summary='"Run now": commit a manual run, then offer it to the queue',
           responses={**_responses(202, "Accepted: the run is queued", 404),
                      **errors.error_docs({409: errors.KEY_REUSED_TEXT}, 409)})
    def run_now(
        scope: Runner, schedule_id: ScheduleId,
        idempotency_key: Annotated[str | None, Header(
            alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
            description="repeat a request safely: the same key returns the same run")] = None,
    ) -> Response[RunAccepted]:
        run_id, created = scope.run_now(schedule_id, idempotency_key=scope.claim_key(idempotency_key))
        return Response(status_code=HTTPStatus.ACCEPTED, content_type=content_types.APPLICATION_JSON,
                        body=RunAccepted(run_id=run_id, schedule_id=schedule_id, created=created))

    # Saved queries and the catalogue (timekeeper.api.queries): token roles, then the access rule.
    register_query_routes(route, adapters.connection, adapters.now)
    register_report_routes(route, connection=adapters.connection, now=adapters.now, renderer=adapters.renderer,
                           files=adapters.files, security=_SECURITY)
    from timekeeper.api.exports import add_export_routes

    add_export_routes(app, route, scope_for, adapters)

    # Query schedules and the public download route (timekeeper.api.delivery_routes).
    from timekeeper.api.delivery_routes import register_delivery_routes

    register_delivery_routes(app, route, scope_for, adapters, publisher)

    # Monthly snapshots (timekeeper.api.snapshot_routes): staff requests and period listings.
    register_snapshot_routes(route, adapters.connection, adapters.now, adapters.snapshot_registry)

    document: dict[str, Any] = {}

    @route("GET", "/openapi.json", include_in_schema=False)
    def openapi_json():
        if not document:
            document.update(openapi_document(app))
        return document

    return app


def openapi_document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``, generated from the route models (a JSON-ready dict)."""
    text = app.get_openapi_json_schema(
        title=API_TITLE, version=API_VERSION, description=_DESCRIPTION,
        security_schemes={SECURITY_SCHEME: {
            "type": "http", "scheme": "bearer",
            "description": "API Gateway Lambda authorizer (production: the identity provider's token; "
                           "local stack: dev:<user>:<workspace uuid>:<roles>)"}},
    )
    doc = json.loads(text)
    for path in doc.get("paths", {}).values():
        for operation in path.values():
            no_content = operation.get("responses", {}).get("204")
            if no_content is not None:
                no_content.pop("content", None)  # a 204 has no body
    # Powertools' own error shapes are replaced by ErrorBody everywhere: drop them when unused.
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ResponseValidationError", "ValidationError"):
        others = json.dumps({k: v for k, v in doc.items() if k != "components"}) + json.dumps(
            {k: v for k, v in schemas.items() if k != name})
        if name in schemas and f"#/components/schemas/{name}" not in others:
            del schemas[name]
    return doc


def openapi_text() -> str:
    """The OpenAPI document as written to files: JSON, two-space indent, sorted keys, newline."""
    return json.dumps(openapi_document(create_app(unconfigured_adapters())), indent=2, sort_keys=True) + "\n"


def write_openapi(path: str) -> None:
    """Write the API's OpenAPI document (:func:`openapi_text`) to ``path``."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(openapi_text())


def unconfigured_adapters() -> ApiAdapters:
    """Adapters for an app that only generates its OpenAPI document: the real work-kind
    registry (the document lists the work kinds); any other use raises ``RuntimeError``."""
    from timekeeper import runtime

    return ApiAdapters(connection=_unused, publisher_for=_unused, registry=runtime.registry, now=_unused,
                       renderer=_unused, files=_unused)


def _unused(*_: Any) -> Any:
    raise RuntimeError("not configured: this app only generates its OpenAPI document")
