"""The HTTP API's Lambda edge: its adapters, created once per execution environment.

The API's connection is its own (the login ``timekeeper_api``, row-level security; see
:mod:`timekeeper.api.db`), built from the same settings as
:func:`timekeeper.edge.adapters.database`; the publishers, the registries, the clock and
the other adapters are the edge's own (:mod:`timekeeper.edge.adapters`,
:mod:`timekeeper.edge.registries`).

An execution environment handles one request at a time on one thread. In Lambda that is
the whole process; the local server (``python -m timekeeper serve``) runs several
environments in one process, one per worker thread, so the resolver (which holds the
current request) and the connection are cached per thread.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from timekeeper import clock
from timekeeper.api.app import ApiAdapters, create_app, openapi_document
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.api.errors import NOT_FOUND
from timekeeper.console.app import ConsoleSettings, create_console, is_console_path
from timekeeper.db.connection import ConnectionProvider
from timekeeper.edge import adapters, registries
from timekeeper.settings import CONSOLE_DEV_SIGN_IN_VARIABLE, CONSOLE_SAMPLES_VARIABLE, CONSOLE_SESSION_KEY_VARIABLE

_environment = threading.local()
_lock = threading.Lock()
_providers: list[ConnectionProvider] = []  # every environment's connection, closed by reset()
_generation = 0  # bumped by reset(): environments of an older generation are rebuilt


def _cached(name: str, build: Any) -> Any:
    """This thread's (execution environment's) ``name``, built on first use."""
    if getattr(_environment, "generation", None) != _generation:
        _environment.__dict__.clear()
        _environment.generation = _generation
    value = getattr(_environment, name, None)
    if value is None:
        value = build()
        setattr(_environment, name, value)
    return value


def _new_provider() -> ConnectionProvider:
    provider = ConnectionProvider(lambda: adapters.open_with_rotation(connect_api, login=API_ROLE),
                                  max_idle_s=adapters.CONNECTION_MAX_IDLE_S)
    with _lock:
        _providers.append(provider)
    return provider


def api_database() -> ConnectionProvider:
    """The execution environment's lazy API connection (recreated when broken)."""
    return _cached("database", _new_provider)


def edge_adapters() -> ApiAdapters:
    """The adapters of a Lambda execution environment (or of the local stack's ``serve``)."""
    return ApiAdapters(connection=lambda: api_database().get(), publisher_for=adapters.publisher,
                       registry=registries.work_kinds, now=clock.now, renderer=adapters.renderer_client,
                       files=lambda: (adapters.s3_client(), adapters.files_bucket()),
                       export_publisher=adapters.export_publisher, links=adapters.link_signer,
                       snapshot_registry=registries.snapshot_types)


def lambda_app() -> APIGatewayRestResolver:
    """The resolver ``functions/api/handler.py`` serves, built on first use in each
    execution environment."""
    return _cached("app", lambda: create_app(edge_adapters()))


def console_settings() -> ConsoleSettings | None:
    """The console's settings from the environment, or None when no session key is set
    (:data:`timekeeper.settings.CONSOLE_SESSION_KEY_VARIABLE`)."""
    key = os.environ.get(CONSOLE_SESSION_KEY_VARIABLE, "")
    if not key:
        return None
    dev = os.environ.get(CONSOLE_DEV_SIGN_IN_VARIABLE) == "1"
    try:
        samples = tuple(json.loads(os.environ.get(CONSOLE_SAMPLES_VARIABLE) or "[]"))
    except ValueError:
        samples = ()
    return ConsoleSettings(session_key=key, dev_sign_in=dev, secure_cookies=not dev, samples=samples)


def console_app() -> APIGatewayRestResolver | None:
    """The console's resolver (its pages call this environment's API resolver), built on
    first use in each execution environment; None when the console is not configured."""
    chosen = console_settings()
    if chosen is None:
        return None
    return _cached("console", lambda: create_console(lambda event, context: lambda_app().resolve(event, context),
                                                    chosen))


def resolve(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The API function's answer to a REST proxy event: the console's pages for its paths
    (a 404 when the console is not configured), the API for every other."""
    if is_console_path(str(event.get("path") or "")):
        console = console_app()
        if console is None:
            return {"statusCode": 404, "headers": {"Content-Type": "text/plain; charset=utf-8"},
                    "body": "The console is not configured in this deployment.", "isBase64Encoded": False}
        return console.resolve(event, context)
    return lambda_app().resolve(event, context)


#: The public link routes ``functions/downloads`` serves (API Gateway's resource and
#: method): the download route and the one-click opt-out's page and POST (RFC 8058).
DOWNLOAD_RESOURCE, DOWNLOAD_METHOD = "/downloads/{token}", "GET"
OPT_OUT_RESOURCE = "/opt-outs/{token}"
PUBLIC_LINK_ROUTES = frozenset({(DOWNLOAD_RESOURCE, DOWNLOAD_METHOD), (OPT_OUT_RESOURCE, "GET"),
                                (OPT_OUT_RESOURCE, "POST")})


def serve_download(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """``functions/downloads``: the public link routes (:data:`PUBLIC_LINK_ROUTES`: the
    download route, the opt-out page and its one-click POST) through the API's own resolver
    (:func:`lambda_app`: the same routes, validation and answers); any other resource or
    method of the event is 404 ``not_found`` without touching the resolver, so the
    function stays the public link routes whatever API Gateway sends it."""
    if (event.get("resource"), event.get("httpMethod")) not in PUBLIC_LINK_ROUTES:
        return {"statusCode": 404, "headers": {"Content-Type": "application/json"},
                "body": json.dumps({"code": NOT_FOUND, "message": "this function serves the public link routes only"})}
    return lambda_app().resolve(event, context)


def reset() -> None:
    """Forget every environment's app and close their API connections (local stack and
    tests, after the environment changed); the edge's own caches are reset by
    :func:`timekeeper.edge.reset`."""
    global _generation
    with _lock:
        _generation += 1
        providers = list(_providers)
        _providers.clear()
    for provider in providers:
        provider.close()


# --- the OpenAPI document ----------------------------------------------------------------------


def unconfigured_adapters() -> ApiAdapters:
    """Adapters for an app that only generates its OpenAPI document: the real work-kind and
    snapshot-type registries (the document lists the work kinds); any other use raises
    ``RuntimeError``."""
    return ApiAdapters(connection=_unused, publisher_for=_unused, registry=registries.work_kinds, now=_unused,
                       renderer=_unused, files=_unused, snapshot_registry=registries.snapshot_types)


def openapi_text() -> str:
    """The OpenAPI document as written to files: JSON, two-space indent, sorted keys, newline."""
    return json.dumps(openapi_document(create_app(unconfigured_adapters())), indent=2, sort_keys=True) + "\n"


def write_openapi(path: str) -> None:
    """Write the API's OpenAPI document (:func:`openapi_text`) to ``path``."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(openapi_text())


def _unused(*_: Any) -> Any:
    raise RuntimeError("not configured: this app only generates its OpenAPI document")
