"""``python -m timekeeper serve``: the HTTP API on localhost over the local stack, on the
real clock (DESIGN section 7; issue 4).

What runs:

* the database: embedded PostgreSQL (or ``DATABASE_URL``), database ``timekeeper_serve``
  (kept between runs; ``--reset`` starts it empty), migrated;
* a moto server on 127.0.0.1 with every pipeline's queue, dead-letter queue and the
  notification topic (:func:`timekeeper.local.aws.start_local_aws`);
* a worker thread that invokes the REAL dispatcher handler of every pipeline once per
  wall-clock minute (an EventBridge scheduled event) and polls each run queue every second
  with the SQS event source mapping that feeds the REAL consumer handler -- so a "Run now"
  runs within about a second;
* an HTTP server on ``--host``/``--port`` (single-threaded ``wsgiref``) that turns each
  request into an API Gateway REST proxy event and invokes the REAL API handler
  (``functions/api/handler.py``), with a local stand-in for the Lambda authorizer.

The authorizer stand-in takes the claims from a development token:
``Authorization: Bearer dev:<user id>:<workspace uuid>:<role,role,...>``, e.g.
``dev:alice:5f0c6a52-8f0e-4c51-9d53-4a7c3e1f2b10:schedules:read,schedules:write,schedules:run``.
It passes ``principalId``, ``workspace_id`` and ``roles`` as ``requestContext.authorizer``,
as the deployed Lambda authorizer does; without a dev token the request reaches the API
with no claims (401). It checks nothing: it is for a laptop, never for a deployment.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from timekeeper.local import embedded

SERVE_DATABASE = "timekeeper_serve"
API_FUNCTION = "api"
DEV_TOKEN_PREFIX = "dev:"

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade"}


@dataclass(frozen=True)
class ServeOptions:
    """``host``/``port`` of the HTTP server (port 0 picks a free one), ``reset`` the serve
    database, ``poll_interval_s`` of the queue poller (seconds), ``access_log`` to stderr."""

    host: str = "127.0.0.1"
    port: int = 8080
    reset: bool = False
    poll_interval_s: float = 1.0
    access_log: bool = True


# --------------------------------------------------------------------- authorizer stand-in


def dev_claims(authorization: str | None) -> dict[str, str] | None:
    """The claims of a development token (``Bearer dev:<user>:<workspace>:<roles>``), as a
    Lambda authorizer's context map; None when the header holds no dev token. The values
    are passed through unchecked: the API validates them (a bad workspace id is a 401)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.startswith(DEV_TOKEN_PREFIX):
        return None
    parts = token.strip().split(":", 3)
    if len(parts) < 3 or not parts[1]:
        return None
    return {"principalId": parts[1], "workspace_id": parts[2], "roles": parts[3] if len(parts) > 3 else ""}


# --------------------------------------------------------------- HTTP <-> API Gateway proxy


def _header_name(environ_key: str) -> str:
    return "-".join(part.capitalize() for part in environ_key.split("_"))


def proxy_event_from_wsgi(environ: dict[str, Any], *, stage: str = "local") -> dict[str, Any]:
    """The API Gateway REST proxy event (``{proxy+}`` integration, Lambda authorizer) for a
    WSGI request: method, path, headers, query string, body (base64 when not UTF-8) and
    ``requestContext`` with the dev token's claims as ``authorizer``."""
    method = environ["REQUEST_METHOD"].upper()
    path = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace") or "/"
    headers: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[_header_name(key[5:])] = value
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    body: str | None = None
    is_base64 = False
    if raw:
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            body, is_base64 = base64.b64encode(raw).decode("ascii"), True
    query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    context: dict[str, Any] = {
        "accountId": "000000000000", "apiId": "local", "stage": stage, "requestId": str(uuid.uuid4()),
        "httpMethod": method, "path": path, "resourcePath": "/{proxy+}", "protocol": "HTTP/1.1",
        "requestTimeEpoch": int(time.time() * 1000),
        "identity": {"sourceIp": environ.get("REMOTE_ADDR", "127.0.0.1"), "userAgent": headers.get("User-Agent")}}
    claims = dev_claims(headers.get("Authorization"))
    if claims is not None:
        context["authorizer"] = claims
    return {
        "resource": "/{proxy+}", "path": path, "httpMethod": method,
        "headers": headers or None, "multiValueHeaders": {k: [v] for k, v in headers.items()} or None,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": {"proxy": path.lstrip("/")}, "stageVariables": None,
        "requestContext": context, "body": body, "isBase64Encoded": is_base64}


class ApiGatewayProxy:
    """A WSGI application that plays API Gateway in front of the API function: request ->
    proxy event -> ``invoke(function, event)`` -> proxy response -> HTTP response. An
    invocation that raises is a 502, as API Gateway answers a failed integration."""

    def __init__(self, function: str = API_FUNCTION) -> None:
        self.function = function

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        from timekeeper.local.lambdas import invoke

        event = proxy_event_from_wsgi(environ)
        try:
            result = invoke(self.function, event, timeout_s=29)
        except Exception as error:  # noqa: BLE001 - the integration failed: a 502 like API Gateway
            print(f"API function failed: {type(error).__name__}", file=sys.stderr)
            body = json.dumps({"message": "Internal server error"}).encode()
            start_response("502 Bad Gateway", [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(body)))])
            return [body]
        status = int(result.get("statusCode", 200))
        headers: dict[str, str] = {}
        for key, values in (result.get("multiValueHeaders") or {}).items():
            headers[key] = ", ".join(str(v) for v in values)
        for key, value in (result.get("headers") or {}).items():
            headers[key] = str(value)
        payload = result.get("body") or ""
        data = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode("utf-8")
        out = [(k, v) for k, v in headers.items() if k.lower() not in _HOP_BY_HOP | {"content-length"}]
        out.append(("Content-Length", str(len(data))))
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Status"
        start_response(f"{status} {phrase}", out)
        return [data]


class _RequestHandler(WSGIRequestHandler):
    """wsgiref's handler without its invented ``Content-Type: text/plain`` for requests that
    sent none, and with an optional access log."""

    access_log = True

    def get_environ(self) -> dict[str, Any]:
        env = super().get_environ()
        if self.headers.get("content-type") is None:
            env.pop("CONTENT_TYPE", None)
        return env

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.access_log:
            super().log_message(format, *args)


# ---------------------------------------------------------------------- pipeline worker


class _NullWriter(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


class PipelineWorker(threading.Thread):
    """Drives the pipelines on the real clock: the dispatcher handler of every pipeline once
    per wall-clock minute, and each run queue's SQS event source every ``poll_interval_s``.
    The handlers' metric lines (EMF, for CloudWatch) are discarded."""

    def __init__(self, local_aws: Any, *, poll_interval_s: float = 1.0) -> None:
        super().__init__(name="timekeeper-pipelines", daemon=True)
        from timekeeper.local.event_source import SqsEventSource

        self.poll_interval_s = poll_interval_s
        self._stop_requested = threading.Event()
        self.dispatches = 0
        self.errors = 0
        sqs = local_aws.client("sqs")
        self.sources = {
            name: SqsEventSource(
                sqs=sqs, queue_url=pair.url, queue_arn=pair.arn,
                function=lambda event, fn=pair.pipeline.consumer_function: self._invoke(fn, event),
                batch_size=pair.pipeline.batch_size, max_concurrency=pair.pipeline.max_concurrency,
                visibility_timeout=timedelta(seconds=pair.pipeline.visibility_timeout_s))
            for name, pair in local_aws.queues.items()}

    @staticmethod
    def _invoke(function: str, event: dict[str, Any], **kwargs: Any) -> Any:
        from timekeeper.local.lambdas import invoke

        with contextlib.redirect_stdout(_NullWriter()):
            return invoke(function, event, **kwargs)

    def run(self) -> None:
        from timekeeper import clock
        from timekeeper.topology import PIPELINES

        last_minute: datetime | None = None
        while not self._stop_requested.is_set():
            now = clock.now()
            minute = now.replace(second=0, microsecond=0)
            try:
                if minute != last_minute:
                    last_minute = minute
                    for pipeline in PIPELINES.values():
                        self._invoke(pipeline.dispatcher_function, _scheduled_event(now),
                                     timeout_s=pipeline.dispatcher_timeout_s)
                        self.dispatches += 1
                for source in self.sources.values():
                    source.poll(clock.now())
            except Exception as error:  # noqa: BLE001 - keep serving; the next round retries
                self.errors += 1
                print(f"pipeline worker: {type(error).__name__} (retrying)", file=sys.stderr)
            self._stop_requested.wait(self.poll_interval_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to stop and wait for it (at most ``timeout_s`` seconds)."""
        self._stop_requested.set()
        if self.is_alive():
            self.join(timeout_s)


def _scheduled_event(now: datetime) -> dict[str, Any]:
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "000000000000", "time": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": ["arn:aws:events:us-east-1:000000000000:rule/timekeeper-minute"],
            "detail": {}}


# -------------------------------------------------------------------------- the stack


def _quiet_lambda_environment() -> None:
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "timekeeper")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Timekeeper")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")


def prepare_database(*, reset: bool = False) -> str:
    """Create (``reset``: re-create) the serve database if needed and migrate it; return its URL."""
    from timekeeper.db.connection import connect
    from timekeeper.db.migrate import apply_migrations

    url = embedded.create_database(embedded.server_url(), SERVE_DATABASE, drop_existing=reset)
    with connect(url) as conn:
        apply_migrations(conn)
    return url


@dataclass
class LocalServer:
    """A running ``serve`` stack: ``base_url`` of the API, the database URL, the local AWS,
    the pipeline worker and the HTTP server. :meth:`stop` ends all of them."""

    base_url: str
    database_url: str
    local_aws: Any
    worker: PipelineWorker
    httpd: WSGIServer
    _thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Handle requests until :meth:`stop` (or Ctrl-C in the calling thread)."""
        self.httpd.serve_forever(poll_interval=0.2)

    def serve_in_background(self) -> None:
        """Handle requests on a daemon thread (tests)."""
        self._thread = threading.Thread(target=self.serve_forever, name="timekeeper-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the HTTP server, the worker and moto; close the cached connections."""
        from timekeeper import runtime
        from timekeeper.api import edge

        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(10)
            self._thread = None
        self.httpd.server_close()
        self.worker.stop()
        self.local_aws.stop()
        edge.reset()
        runtime.reset()


def start_server(options: ServeOptions, *, database_url: str | None = None) -> LocalServer:
    """Start the stack described by ``options`` and return it (requests are served once
    :meth:`LocalServer.serve_forever` or :meth:`LocalServer.serve_in_background` runs).

    ``database_url`` names an already migrated database instead of ``timekeeper_serve``.
    Points this process's environment at the stack (``DATABASE_URL``, the queue URLs, the
    moto endpoint) and installs the real clock.
    """
    _quiet_lambda_environment()
    from timekeeper import clock, runtime
    from timekeeper.api import edge
    from timekeeper.local.aws import start_local_aws

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    url = database_url or prepare_database(reset=options.reset)
    os.environ["DATABASE_URL"] = url
    local_aws = start_local_aws(server=True)
    clock.install(None)
    runtime.reset()
    edge.reset()
    worker = PipelineWorker(local_aws, poll_interval_s=options.poll_interval_s)
    handler = type("RequestHandler", (_RequestHandler,), {"access_log": options.access_log})
    try:
        httpd = make_server(options.host, options.port, ApiGatewayProxy(), handler_class=handler)
    except OSError:
        local_aws.stop()
        raise
    worker.start()
    host, port = httpd.server_address[:2]
    return LocalServer(base_url=f"http://{host}:{port}", database_url=url, local_aws=local_aws, worker=worker,
                       httpd=httpd)


def run_serve(options: ServeOptions, out: Any = None) -> int:
    """The ``serve`` command: start, print how to call it, serve until Ctrl-C; exit code."""
    out = out or sys.stdout
    try:
        server = start_server(options)
    except OSError as error:
        print(f"cannot listen on {options.host}:{options.port}: {error.strerror or error}", file=sys.stderr)
        return 1
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # stop as cleanly on SIGTERM as on Ctrl-C
    workspace = uuid.uuid4()
    token = f"dev:alice:{workspace}:schedules:read,schedules:write,schedules:run"
    print(f"Timekeeper API on {server.base_url}  (OpenAPI document: {server.base_url}/openapi.json)", file=out)
    print(f"  database: {_redacted(server.database_url)}", file=out)
    print(f"  local AWS (moto): {server.local_aws.endpoint}; dispatchers every minute, queues polled every "
          f"{options.poll_interval_s:g}s, real clock", file=out)
    print("  authorizer stand-in: Authorization: Bearer dev:<user>:<workspace uuid>:<role,role,...>", file=out)
    print(f"  e.g. curl -H 'Authorization: Bearer {token}' {server.base_url}/schedules", file=out)
    print("  Ctrl-C stops.", file=out, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopping", file=out)
    finally:
        server.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _redacted(url: str) -> str:
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(url)
    if info.get("password"):
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo(**info)
