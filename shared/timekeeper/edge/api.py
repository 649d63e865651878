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
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from timekeeper import clock
from timekeeper.api.app import ApiAdapters, create_app, openapi_document
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.api.errors import NOT_FOUND
from timekeeper.console.app import ConsoleSettings, create_console, is_console_path
from timekeeper.console.sign_in import IdentityProvider
from timekeeper.db.connection import ConnectionProvider
from timekeeper.edge import adapters, registries, sign_in
from timekeeper.settings import (
    CONSOLE_BASE_PATH_VARIABLE,
    CONSOLE_DEV_SIGN_IN_VARIABLE,
    CONSOLE_OIDC_CLIENT_SECRET_VARIABLE,
    CONSOLE_SAMPLES_VARIABLE,
    CONSOLE_SESSION_KEY_VARIABLE,
    CONSOLE_SESSION_SECRET_VARIABLE,
)

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
                       snapshot_registry=registries.snapshot_types, dead_letters=adapters.dead_letter_queues)


def lambda_app() -> APIGatewayRestResolver:
    """The resolver ``functions/api/handler.py`` serves, built on first use in each
    execution environment."""
    return _cached("app", lambda: create_app(edge_adapters()))


def session_keys_of_secret(secret: Mapping[str, Any]) -> list[str]:
    """The console's session keys a Secrets Manager secret holds, oldest first: JSON
    ``{"keys": [oldest, ..., newest]}`` (a rotation: the newest signs, the others still
    verify) or ``{"key": k}`` (as the stack generates it). Raises ``ValueError`` when it
    holds neither."""
    keys = secret.get("keys", [secret["key"]] if isinstance(secret.get("key"), str) else None)
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError('the console session secret holds neither "keys" (a list of text, newest last) nor "key"')
    return keys


def console_configured() -> bool:
    """Whether this environment serves the console: a session key secret
    (:data:`~timekeeper.settings.CONSOLE_SESSION_SECRET_VARIABLE`, deployed) or a session
    key (:data:`~timekeeper.settings.CONSOLE_SESSION_KEY_VARIABLE`, the local stack)."""
    return bool(os.environ.get(CONSOLE_SESSION_SECRET_VARIABLE) or os.environ.get(CONSOLE_SESSION_KEY_VARIABLE))


def _client_secret() -> str | None:
    arn = os.environ.get(CONSOLE_OIDC_CLIENT_SECRET_VARIABLE)
    if not arn:
        return None
    secret = adapters.json_secret(arn)
    value = secret.get("client_secret")
    if not isinstance(value, str) or not value:
        raise sign_in.SignInRefused("the console's client secret holds no client_secret")
    return value


def _identity_provider() -> IdentityProvider:
    """This environment's identity provider (discovered on first use, kept once found)."""
    return _cached("identity_provider", lambda: sign_in.identity_provider(os.environ, _client_secret))


def console_settings() -> ConsoleSettings | None:
    """The console's settings from the environment, or None when it is not configured
    (:func:`console_configured`). Deployed, the session keys come from the Secrets
    Manager secret (read now, through the edge's cached secrets provider) and the sign-in
    is the OpenID Connect issuer's (:mod:`timekeeper.edge.sign_in`); locally, ``serve``
    sets the key itself and the development sign-in. Raises ``ValueError`` for a secret
    without keys or a key shorter than 32 characters."""
    arn = os.environ.get(CONSOLE_SESSION_SECRET_VARIABLE, "")
    if arn:
        keys = session_keys_of_secret(adapters.json_secret(arn))
    else:
        key = os.environ.get(CONSOLE_SESSION_KEY_VARIABLE, "")
        if not key:
            return None
        keys = [key]
    dev = os.environ.get(CONSOLE_DEV_SIGN_IN_VARIABLE) == "1"
    try:
        samples = tuple(json.loads(os.environ.get(CONSOLE_SAMPLES_VARIABLE) or "[]"))
    except ValueError:
        samples = ()
    provider = _identity_provider if not dev and sign_in.configured(os.environ) else None
    return ConsoleSettings(session_key=keys[-1], older_session_keys=tuple(keys[:-1]), dev_sign_in=dev,
                           secure_cookies=not dev, samples=samples, identity_provider=provider,
                           base_path=os.environ.get(CONSOLE_BASE_PATH_VARIABLE, ""))


def console_app() -> APIGatewayRestResolver | None:
    """The console's resolver (its pages call this environment's API resolver), built on
    first use in each execution environment (the API function builds it at cold start);
    None when the console is not configured."""
    if not console_configured():
        return None
    return _cached("console", lambda: create_console(lambda event, context: lambda_app().resolve(event, context),
                                                    console_settings()))


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
#: method): the download route and its "send me a fresh link" POST, and the one-click
#: opt-out's page and POST (RFC 8058).
DOWNLOAD_RESOURCE, DOWNLOAD_METHOD = "/downloads/{token}", "GET"
OPT_OUT_RESOURCE = "/opt-outs/{token}"
PUBLIC_LINK_ROUTES = frozenset({(DOWNLOAD_RESOURCE, DOWNLOAD_METHOD), (DOWNLOAD_RESOURCE, "POST"),
                                (OPT_OUT_RESOURCE, "GET"), (OPT_OUT_RESOURCE, "POST")})


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
