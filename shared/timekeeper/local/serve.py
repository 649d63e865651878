"""``python -m timekeeper serve``: the HTTP API on localhost over the local stack, on the
real clock.

What runs (the start-up is :func:`timekeeper.local.stack.start_local_stack`, shared with
``simulate``):

* the database: embedded PostgreSQL (or ``DATABASE_URL``), database ``timekeeper_serve``
  (kept between runs; ``--reset`` starts it empty), migrated, with the Platform sample
  tenant set (:func:`timekeeper.local.platform_data.load_sample`, ending at midnight UTC
  of the start day; rows already there are kept);
* a moto server on 127.0.0.1 with every pipeline's queue, dead-letter queue and the
  notification topic (:func:`timekeeper.local.aws.start_local_aws`);
* a worker thread that invokes the REAL dispatcher handler of every pipeline once per
  wall-clock minute (an EventBridge scheduled event) and polls each run queue every second
  with the SQS event source mapping that feeds the REAL consumer handler -- so a "Run now"
  runs within about a second;
* an HTTP server on ``--host``/``--port`` that handles connections concurrently (a pool of
  worker threads, each an API execution environment with its own database connection)
  and turns each request into an API Gateway REST proxy event for the REAL API handler
  (``functions/api/handler.py``), with a local stand-in for the Lambda authorizer. An
  idle client is dropped after ``REQUEST_READ_TIMEOUT_S`` seconds; errors of the HTTP
  layer itself (an oversized header, a malformed request line) get the API's JSON error
  body too.

The authorizer stand-in takes the claims from a development token:
``Authorization: Bearer dev:<user id>:<workspace uuid>:<role,role,...>``, e.g.
``dev:alice:5f0c6a52-8f0e-4c51-9d53-4a7c3e1f2b10:schedules:read,schedules:write,schedules:run``.
It passes ``principalId``, ``workspace_id`` and ``roles`` as ``requestContext.authorizer``,
as the deployed Lambda authorizer does; without a dev token the request reaches the API
with no claims (401). It checks nothing: it is for a laptop, never for a deployment.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from timekeeper.api import errors
from timekeeper.local.stack import LocalStack, platform_sample_day, start_local_stack

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


#: Seconds a connection may stay silent before the server drops it.
REQUEST_READ_TIMEOUT_S = 10


class _RequestHandler(WSGIRequestHandler):
    """wsgiref's handler without its invented ``Content-Type: text/plain`` for requests that
    sent none, with a read timeout, JSON error bodies for the HTTP layer's own refusals
    and an optional access log."""

    access_log = True
    timeout = REQUEST_READ_TIMEOUT_S

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The HTTP layer's refusals (431 header too large, 414, 400) as an API error body
        (code ``bad_request``) instead of the standard library's HTML page."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        body = errors.ErrorBody(code=errors.BAD_REQUEST, message=(message or phrase).lower()).model_dump_json(
            exclude_none=True).encode()
        self.log_error("code %d, message %s", code, message)
        self.send_response(code, phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            self.wfile.write(body)

    def get_environ(self) -> dict[str, Any]:
        env = super().get_environ()
        if self.headers.get("content-type") is None:
            env.pop("CONTENT_TYPE", None)
        return env

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.access_log:
            super().log_message(format, *args)


# ---------------------------------------------------------------------- pipeline worker


class PipelineWorker(threading.Thread):
    """Drives the pipelines of ``stack`` on the real clock: the dispatcher handler of every
    pipeline and the snapshot dispatcher once per wall-clock minute, the snapshot planner
    every 15 minutes (and at start), and the queues' SQS event sources every
    ``poll_interval_s`` seconds. A failed round is counted in ``errors`` and retried."""

    def __init__(self, stack: LocalStack, *, poll_interval_s: float = 1.0) -> None:
        super().__init__(name="timekeeper-pipelines", daemon=True)
        self.stack = stack
        self.poll_interval_s = poll_interval_s
        self._stop_requested = threading.Event()
        self.dispatches = 0
        self.errors = 0

    def run(self) -> None:
        from timekeeper import clock
        from timekeeper.topology import PIPELINES, SNAPSHOTS

        last_minute: datetime | None = None
        while not self._stop_requested.is_set():
            now = clock.now()
            minute = now.replace(second=0, microsecond=0)
            try:
                if minute != last_minute:
                    first = last_minute is None
                    last_minute = minute
                    for pipeline in PIPELINES.values():
                        self.stack.dispatch(pipeline, now)
                        self.dispatches += 1
                    if first or minute.minute % SNAPSHOTS.planner_rate_minutes == 0:
                        self.stack.plan_snapshots(now)
                    self.stack.dispatch_snapshots(now)
                self.stack.poll(clock.now())
            except Exception as error:  # noqa: BLE001 - keep serving; the next round retries
                self.errors += 1
                print(f"pipeline worker: {type(error).__name__} (retrying)", file=sys.stderr)
            self._stop_requested.wait(self.poll_interval_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to stop and wait for it (at most ``timeout_s`` seconds)."""
        self._stop_requested.set()
        if self.is_alive():
            self.join(timeout_s)


# -------------------------------------------------------------------------- the stack


class PooledWSGIServer(WSGIServer):
    """wsgiref's server that handles each connection on one of ``workers`` threads, so an
    idle or slow client holds one worker (until the handler's read timeout) and never the
    others. Each worker thread is one API execution environment (its own resolver and
    database connection, see :mod:`timekeeper.edge.api`)."""

    def __init__(self, *args: Any, workers: int = 8, **kwargs: Any) -> None:
        # Before the bind: a bind that fails (the port is taken) closes the server at once,
        # and server_close shuts the pool down; the caller then sees the OSError itself.
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="timekeeper-api")
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._process, request, client_address)

    def _process(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - socketserver's own policy: report and go on
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class LocalServer:
    """A running ``serve`` stack: ``base_url`` of the API, the local stack (database,
    moto, event sources), the pipeline worker and the HTTP server. :meth:`stop` ends all
    of them."""

    base_url: str
    stack: LocalStack
    worker: PipelineWorker
    httpd: WSGIServer
    _thread: threading.Thread | None = None

    @property
    def database_url(self) -> str:
        return self.stack.database_url

    @property
    def local_aws(self) -> Any:
        return self.stack.aws

    def serve_forever(self) -> None:
        """Handle requests until :meth:`stop` (or Ctrl-C in the calling thread)."""
        self.httpd.serve_forever(poll_interval=0.2)

    def serve_in_background(self) -> None:
        """Handle requests on a daemon thread (tests)."""
        self._thread = threading.Thread(target=self.serve_forever, name="timekeeper-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the HTTP server, the worker and the local stack."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(10)
            self._thread = None
        self.httpd.server_close()
        self.worker.stop()
        self.stack.stop()


def start_server(options: ServeOptions, *, database_url: str | None = None) -> LocalServer:
    """Start the stack described by ``options`` and return it (requests are served once
    :meth:`LocalServer.serve_forever` or :meth:`LocalServer.serve_in_background` runs).

    ``database_url`` names an already migrated database instead of ``timekeeper_serve``.
    Points this process's environment at the stack (``DATABASE_URL``, the queue URLs, the
    moto endpoint, and ``DOWNLOAD_BASE_URL`` at this server's own address unless it was set
    before) and uses the real clock. Raises ``OSError`` when the address cannot be
    bound (nothing is left running then).
    """
    from timekeeper import clock, settings

    chosen_base_url = os.environ.get("DOWNLOAD_BASE_URL")
    stack = start_local_stack(database=SERVE_DATABASE, reset=options.reset, aws_server=True,
                              database_url=database_url, log_level="WARNING",
                              platform_sample_at=platform_sample_day(clock.now()))
    handler = type("RequestHandler", (_RequestHandler,), {"access_log": options.access_log})
    try:
        httpd = make_server(options.host, options.port, ApiGatewayProxy(), server_class=PooledWSGIServer,
                            handler_class=handler)
    except BaseException:
        stack.stop()
        raise
    host, port = httpd.server_address[:2]
    base_url = f"http://{host}:{port}"
    if not chosen_base_url:
        # Delivery links point at this server (where GET /downloads/{token} answers), not at
        # the local stack's default address.
        os.environ["DOWNLOAD_BASE_URL"] = f"{link_base_url(str(host), int(port))}/"
        settings.settings.cache_clear()
    worker = PipelineWorker(stack, poll_interval_s=options.poll_interval_s)
    worker.start()
    return LocalServer(base_url=base_url, stack=stack, worker=worker, httpd=httpd)


def link_base_url(host: str, port: int) -> str:
    """The base URL links to a server listening on ``host``:``port`` should use: a wildcard
    address (``0.0.0.0``, ``::``) is reached at the loopback address; an IPv6 host is
    bracketed. ``link_base_url("0.0.0.0", 8080)`` -> ``"http://127.0.0.1:8080"``."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_serve(options: ServeOptions, out: Any = None) -> int:
    """The ``serve`` command: start, print how to call it, serve until interrupted
    (``KeyboardInterrupt``, raised again once everything is stopped); exit code 1 when the
    address cannot be bound."""
    out = out or sys.stdout
    try:
        server = start_server(options)
    except OSError as error:
        print(f"cannot listen on {options.host}:{options.port}: {error.strerror or error}", file=sys.stderr)
        return 1
    workspace = uuid.uuid4()
    token = f"dev:alice:{workspace}:schedules:read,schedules:write,schedules:run"
    print(f"Timekeeper API on {server.base_url}  (OpenAPI document: {server.base_url}/openapi.json)", file=out)
    print(f"  database: {_redacted(server.database_url)}", file=out)
    print(f"  local AWS (moto): {server.local_aws.endpoint}; dispatchers every minute, queues polled every "
          f"{options.poll_interval_s:g}s, real clock", file=out)
    print("  authorizer stand-in: Authorization: Bearer dev:<user>:<workspace uuid>:<role,role,...>", file=out)
    print(f"  e.g. curl -H 'Authorization: Bearer {token}' {server.base_url}/schedules", file=out)
    if server.stack.platform is not None:
        sample = server.stack.platform
        print(f"  Platform sample: workspace {sample.first_workspace} ({len(sample.workspaces)} workspaces), "
              f"its admin {sample.users['admin']}", file=out)
    print("  Ctrl-C stops.", file=out, flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0


def _redacted(url: str) -> str:
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(url)
    if info.get("password"):
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo(**info)
