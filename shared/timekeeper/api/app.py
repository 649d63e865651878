"""The HTTP API: Powertools' REST resolver over the owner modules, walled by the tenant rule.

``create_app(adapters)`` builds a resolver whose routes validate requests and responses
with pydantic models; :func:`openapi_document` generates the OpenAPI document from the
same models (served at ``GET /openapi.json`` and written by ``python -m timekeeper openapi
--out FILE``). Each resource's routes live in their own module's Powertools router,
included with ``include_router`` (:mod:`timekeeper.api.routing`, :data:`ROUTERS`):
schedules, saved queries and the catalogue, reports and renders, exports, query
schedules and downloads, snapshots, people, opt-outs, operations, console sessions.

Every workspace route takes a :class:`~timekeeper.api.scope.WorkspaceScope` from the
dependency of its role, :func:`~timekeeper.api.scope.scope_for`, which reads the authorizer's
claims (401), checks the route's role (403) and binds the caller's workspace -- the one
place the tenant rule lives; the scope also asks the access rule of
:mod:`timekeeper.platform.access` and opens the request's transaction.

This module also holds what applies before any route: the JSON-only resolver (401 for a
request to an authenticated path without valid claims, before its request is looked at;
415, NUL characters, a path ending in ``/``), unknown query parameters and numbers in the path
(422), and 404 / 405 for paths no route takes.
"""

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

import psycopg
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types

from timekeeper import clock, json_input
from timekeeper.api import (
    audit_routes,
    claim_weight_routes,
    dead_letter_routes,
    delivery_routes,
    download_routes,
    errors,
    exports,
    link_pages,
    member_routes,
    operations_routes,
    opt_out_routes,
    people_routes,
    queries,
    reports,
    run_routes,
    schedule_routes,
    session_routes,
    settings_routes,
    snapshot_range_routes,
    snapshot_routes,
    suppression_routes,
    work_kind_routes,
)
from timekeeper.api.auth import Identity, identity_from_event
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import ErrorBody
from timekeeper.api.models import (
    NUMBER_PATH_PARAMETERS,
    OWNERS,
    PLAIN_DECIMAL,
    RECURRENCE_SCHEMA,
    generic_kinds_by_owner,
    integral_bounds,
    schedule_create_model,
    subject_required_kinds,
)
from timekeeper.api.openapi import finish
from timekeeper.api.routing import CONTEXT_KEY, SECURITY_SCHEME, ApiContext, ApiRouter, RouteTable
from timekeeper.api.scope import OwnerRoutedPublisher, member_check
from timekeeper.observability import logger
from timekeeper.request_state import RequestScoped
from timekeeper.schedules.messages import RunPublisher
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.schedules.zones import canonical_zones
from timekeeper.snapshots.registry import SnapshotRegistry

#: Every resource's router, in inclusion order (the schedules' create route, whose body
#: the app's registry types, is included first: :func:`timekeeper.api.schedule_routes.create_router`).
ROUTERS = (schedule_routes.router, queries.router, reports.router, exports.router,
           member_routes.router, delivery_routes.router, download_routes.router, snapshot_routes.router,
           snapshot_range_routes.router, people_routes.router, opt_out_routes.router, suppression_routes.router,
           operations_routes.router, session_routes.router, work_kind_routes.router, settings_routes.router,
           audit_routes.router, dead_letter_routes.router, run_routes.router, claim_weight_routes.router)

API_TITLE = "Timekeeper API"
API_VERSION = "1.0.0"

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
    * ``snapshot_registry()`` -- the snapshot types of the deployment's environment (the
      edge passes :func:`timekeeper.edge.registries.snapshot_types`); without it the
      snapshot routes know no type.
    """

    connection: Callable[[], TenantConnection]
    publisher_for: Callable[[str], RunPublisher]
    registry: Callable[[], WorkKindRegistry]
    now: Callable[[], datetime] = clock.now
    #: The report renderer's client (:class:`timekeeper.aws.renderer.RendererClient`), for render requests.
    renderer: Callable[[], Any] | None = None
    #: ``(s3 client, files bucket)`` for download links of rendered reports.
    files: Callable[[], tuple[Any, str]] | None = None
    #: The exports queue's publisher (:func:`timekeeper.edge.adapters.export_publisher`), for export requests.
    export_publisher: Callable[[], Any] | None = None
    snapshot_registry: Callable[[], SnapshotRegistry] = SnapshotRegistry
    #: The download links' signer (:class:`timekeeper.reporting.links.LinkSigner`), for ``GET /downloads/{token}``.
    links: Callable[[], Any] | None = None
    #: The dead-letter queues (:class:`timekeeper.aws.dead_letters.DeadLetterQueues`), for the
    #: operations routes; None: the overview lists none and a redrive is 404.
    dead_letters: Callable[[], Any] | None = None


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
    """Parse a request body as JSON (:func:`timekeeper.json_input.loads`); raises
    ``json.JSONDecodeError`` for anything it refuses, including input nested deeper than
    :data:`~timekeeper.json_input.MAX_DEPTH` levels (e.g. 1,000 or 100,000 nested
    brackets, which would exhaust the interpreter's stack in the parser or in the code
    reading its result) and integer literals longer than Python converts (over 4,300
    digits), so each is a 422 naming the body instead of an unhandled fault."""
    return json_input.loads(text)


class JsonApiResolver(RequestScoped, APIGatewayRestResolver):
    """Powertools' REST resolver for an API that takes JSON only: a request body sent with
    another ``Content-Type`` is refused with a 415 :class:`ErrorBody` before routing (the
    resolver's own body parsing would otherwise try forms and multipart, and fail with a
    server error on a multipart type without a boundary). A body without a content type is
    read as JSON, and the media type is compared without regard to case. Bodies are parsed
    by :func:`parse_json_body`. Authentication comes first: a request to any path but
    the :attr:`public` ones (method, rule) without valid claims is a 401 whatever else is
    wrong with it (its body, parameters or path), as API Gateway's authorizer answers
    before the integration. Then, for the same requests, the membership rule
    (:attr:`member_check`): a caller who is not an active, current member of the token's
    workspace is a 403 (the access rule's reason) on every route, before routing, so no
    route can skip it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(json_body_deserializer=parse_json_body, **kwargs)
        #: The (method, Powertools rule) pairs that take no credentials.
        self.public: set[tuple[str, str]] = set()
        #: The membership rule (:func:`timekeeper.api.scope.member_check`); raises a 403
        #: :class:`~timekeeper.api.errors.ApiError`. None checks claims only.
        self.member_check: Callable[[Identity], None] | None = None
        #: What every request's handlers may ask for (:data:`timekeeper.api.routing.Api`),
        #: put in the request context before routing.
        self.api_context: ApiContext | None = None

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Resolve ``event`` (a REST proxy event); see ``APIGatewayRestResolver.resolve``."""
        path = str(event.get("path") or "")
        method = str(event.get("httpMethod") or "").upper()
        if not any(m == method and _rule_matches(rule, path) for m, rule in self.public):
            if method == "GET" and _DOWNLOADS.fullmatch(path):
                headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
                if link_pages.wants_html(headers.get("accept")):
                    # A person's browser at a download address without a link token: the
                    # refused-link page (a script keeps the API's answer below).
                    return _proxy_response(link_pages.link_page(
                        HTTPStatus.NOT_FOUND, "link_invalid",
                        language=link_pages.language_of(None, headers.get("accept-language"))))
            try:
                identity = identity_from_event(event)
                if self.member_check is not None:
                    self.member_check(identity)
            except errors.ApiError as refused:
                return _early_error(HTTPStatus(refused.status), refused.code, refused.message)
            except psycopg.OperationalError as lost:  # as the routes' handler answers it
                logger.warning("database unavailable", extra={"error_type": type(lost).__name__})
                return _early_error(HTTPStatus.SERVICE_UNAVAILABLE, errors.DATABASE_UNAVAILABLE,
                                    errors.DATABASE_UNAVAILABLE_MESSAGE,
                                    headers={"Retry-After": [str(errors.DATABASE_RETRY_AFTER_S)]})
            except Exception as error:  # noqa: BLE001 - as the routes' last handler: a generic 500
                errors.log_unexpected(error, "membership")
                return _early_error(HTTPStatus.INTERNAL_SERVER_ERROR, errors.INTERNAL_ERROR, "internal error")
        if len(path) > 1 and path.endswith("/"):
            # One spelling per route: "/schedules/<id>/" is not "/schedules/<id>".
            return _early_error(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such route (a path does not end in /)")
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        content_type = headers.get("content-type")
        body = event.get("body")
        if method == "POST" and _rule_matches(opt_out_routes.OPT_OUT_PATH_PREFIX + "<token>", path):
            # RFC 8058: the one-click request's body is the form List-Unsubscribe=One-Click and
            # nothing else; it is checked and dropped before routing (the route reads no body).
            refused = _one_click_refusal(event, content_type)
            if refused is not None:
                return refused
            event = {**_with_content_type(event, content_types.APPLICATION_JSON), "body": None,
                     "isBase64Encoded": False}
            body = None
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
        # Each request resolves in a copy of the caller's context (RequestScoped), so the
        # log keys a route sets (the caller's workspace) end with the request, and its
        # event and request context are its own: neither a later request on this thread
        # nor one served at once on another reads or writes them.
        # The app's context goes into what every request's context starts with, not into the
        # context of a request being answered around this one (the console's, calling the API).
        if self.api_context is not None:
            self.app_context[CONTEXT_KEY] = self.api_context
        return super().resolve(event, context)


#: The media type of a one-click opt-out request's body (RFC 8058: ``List-Unsubscribe=One-Click``).
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


#: The one body a one-click opt-out request carries (RFC 8058 section 3.1), as parsed.
ONE_CLICK_FORM = {"List-Unsubscribe": ["One-Click"]}


def _one_click_refusal(event: dict[str, Any], content_type: Any) -> dict[str, Any] | None:
    """None when ``event`` (a POST to the public opt-out route) carries exactly the RFC 8058
    one-click form (``List-Unsubscribe=One-Click`` as ``application/x-www-form-urlencoded``:
    a mailbox provider's one-click request, or the confirmation page's button); else its
    refusal: 415 for another media type, 422 naming ``List-Unsubscribe`` for no body or
    another form. The one request whose body is not JSON."""
    if content_type is not None and _normalized_media_type(str(content_type)).partition(";")[0].strip() \
            != FORM_MEDIA_TYPE:
        return _early_error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, errors.UNSUPPORTED_MEDIA_TYPE,
                            f"send List-Unsubscribe=One-Click as {FORM_MEDIA_TYPE} (RFC 8058)")
    text = str(event.get("body") or "")
    if event.get("isBase64Encoded"):
        try:
            text = base64.b64decode(text, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            text = ""
    try:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=True, max_num_fields=2)
    except ValueError:
        fields = {}
    if fields != ONE_CLICK_FORM:
        return _early_error(HTTPStatus.UNPROCESSABLE_ENTITY, errors.VALIDATION_ERROR,
                            "the one-click form is List-Unsubscribe=One-Click and nothing else (RFC 8058)",
                            "List-Unsubscribe")
    return None


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


#: A download address that is no link: ``/downloads`` itself, or a path under it that no
#: public route takes (no token, or more segments than one).
_DOWNLOADS = re.compile(r"/downloads(/.*)?")


def _proxy_response(response: Response) -> dict[str, Any]:
    """A REST proxy response of ``response`` (a text body), for answers before routing."""
    headers: dict[str, list[str]] = {"Content-Type": [str(response.content_type)]}
    for name, value in (response.headers or {}).items():
        headers[name] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return {"statusCode": int(response.status_code), "isBase64Encoded": False, "body": str(response.body),
            "multiValueHeaders": headers}


def _early_error(status: HTTPStatus, code: str, message: str, field: str | None = None, *,
                 headers: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """A REST proxy response with an :class:`ErrorBody` (and ``headers``, multi-value), for
    refusals before routing."""
    body = ErrorBody(code=code, message=message, field=field)
    return {"statusCode": status.value, "isBase64Encoded": False, "body": body.model_dump_json(exclude_none=True),
            "multiValueHeaders": {"Content-Type": [content_types.APPLICATION_JSON], **(headers or {})}}


def create_app(adapters: ApiAdapters) -> JsonApiResolver:
    """Build the API resolver over ``adapters`` (routes, validation, error handlers).

    Call ``app.resolve(event, context)`` with an API Gateway REST proxy event. Each
    resource's routes live in its module's ``router`` (:mod:`timekeeper.api.routing`),
    included in the order of :data:`ROUTERS`.
    """
    app = JsonApiResolver(enable_validation=True)
    app.member_check = member_check(adapters.connection)
    registry = adapters.registry()
    app.api_context = ApiContext(adapters=adapters, publisher=OwnerRoutedPublisher(adapters.publisher_for),
                                 registry=registry)
    kinds_by_owner = generic_kinds_by_owner(registry, OWNERS)
    errors.install_error_handlers(app, union_tags=frozenset(kinds_by_owner))
    table = RouteTable()
    create_body = schedule_create_model(kinds_by_owner, subject_required_kinds(registry))
    for router in (schedule_routes.create_router(create_body), *ROUTERS, _openapi_router(app)):
        app.include_router(router)
        table.add(router)
    methods_by_rule, query_names = table.methods_by_rule, table.query_names

    def check_parameters(app: JsonApiResolver, next_middleware: Callable[..., Response]) -> Response:
        """A query parameter the route does not declare is a 422 (a misspelt filter must
        not silently list everything), and so is a number in the path written other than
        as plain decimal digits."""
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

    app.use(middlewares=[check_parameters])

    @app.not_found
    def no_route(_: Exception) -> Response:
        path, method = app.current_event.path, app.current_event.http_method.upper()
        methods = sorted({m for rule, ms in methods_by_rule.items() if _rule_matches(rule, path) for m in ms})
        if methods and method not in methods:
            return errors.error_response(HTTPStatus.METHOD_NOT_ALLOWED, errors.METHOD_NOT_ALLOWED,
                                         f"this route takes {', '.join(methods)}",
                                         headers={"Allow": ", ".join(methods)})
        return errors.error_response(HTTPStatus.NOT_FOUND, errors.NOT_FOUND, "no such route")

    app.public = table.public
    return app


def _openapi_router(app: APIGatewayRestResolver) -> ApiRouter:
    """The route of ``GET /openapi.json`` (public): ``app``'s document, generated on the
    first request and kept."""
    router = ApiRouter()
    document: dict[str, Any] = {}

    @router.get("/openapi.json", include_in_schema=False)
    def openapi_json():
        if not document:
            document.update(openapi_document(app))
        return document

    return router


def openapi_document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``, generated from the route models (a JSON-ready
    dict), finished for client generators by :func:`timekeeper.api.openapi.finish` (the
    zones and the rule once, named union members, the one error shape everywhere)."""
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
            for status, answer in operation.get("responses", {}).items():
                if status == "204" or status.startswith("3"):
                    answer.pop("content", None)  # a 204 or a redirect has no body
    one_click = doc.get("paths", {}).get(opt_out_routes.OPT_OUT_PATH_PREFIX + "{token}", {}).get("post")
    if one_click is not None:
        # The one body that is not JSON (read before routing): RFC 8058's form, nothing else.
        one_click["requestBody"] = {"required": True, "content": {FORM_MEDIA_TYPE: {"schema": {
            "type": "object", "required": list(ONE_CLICK_FORM), "additionalProperties": False,
            "properties": {name: {"type": "string", "enum": values} for name, values in ONE_CLICK_FORM.items()}}}}}
    finish(doc, recurrence=RECURRENCE_SCHEMA, zones=sorted(canonical_zones()))
    # Powertools' own error shapes are replaced by ErrorBody everywhere: drop them when unused.
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ResponseValidationError", "ValidationError"):
        others = json.dumps({k: v for k, v in doc.items() if k != "components"}) + json.dumps(
            {k: v for k, v in schemas.items() if k != name})
        if name in schemas and f"#/components/schemas/{name}" not in others:
            del schemas[name]
    return integral_bounds(doc)
