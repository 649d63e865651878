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
* an HTTP server on ``--host``/``--port`` that parks each new connection, without a
  thread, until its first bytes arrive (at most :data:`WAITING_CONNECTIONS` of them, each
  for at most :data:`HEADER_READ_TIMEOUT_S` seconds), then reads it on one of
  :data:`CONNECTION_THREADS` threads and turns each request into an API Gateway REST proxy
  event for the REAL API handler (``functions/api/handler.py``), run on one of
  :data:`API_ENVIRONMENTS` API execution environments (threads, each with its own
  database connection), with a local stand-in for the Lambda authorizer. Each request
  phase has a deadline: the request line and headers :data:`HEADER_READ_TIMEOUT_S`
  seconds, the body :data:`BODY_READ_TIMEOUT_S` seconds (a byte now and then extends
  neither), so a slow or silent client never holds up the others. Errors of the HTTP
  layer itself (an oversized header, a malformed request line, a ``Content-Length``
  that is no byte count, a body that ends early or arrives too late) get the API's JSON
  error body (``bad_request``) too.

The authorizer stand-in (:mod:`timekeeper.local.apigw`) takes the claims from a development token:
``Authorization: Bearer dev:<user id>:<workspace uuid>:<role,role,...>``, e.g.
``dev:alice:5f0c6a52-8f0e-4c51-9d53-4a7c3e1f2b10:schedules:read,schedules:write,schedules:run``.
It passes ``principalId``, ``workspace_id`` and ``roles`` as ``requestContext.authorizer``,
as the deployed Lambda authorizer does; without a dev token the request reaches the API
with no claims (401). It checks nothing: it is for a laptop, never for a deployment.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import selectors
import socket
import sys
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from timekeeper.api import errors
from timekeeper.local.apigw import ENVIRONMENTS_KEY, ApiGatewayProxy
from timekeeper.local.stack import LocalStack, platform_sample_day, start_local_stack

SERVE_DATABASE = "timekeeper_serve"


@dataclass(frozen=True)
class ServeOptions:
    """``host``/``port`` of the HTTP server (port 0 picks a free one), ``reset`` the serve
    database, ``poll_interval_s`` of the queue poller (seconds), ``access_log`` to stderr,
    ``sample``: add the sample schedules and deliveries on a database without them
    (:mod:`timekeeper.local.serve_sample`; the Platform sample's people and invoices are
    loaded either way), ``mail_dir``: the folder every message sent is kept in (None:
    ``serve-mail`` in the state folder, :func:`timekeeper.local.embedded.state_home`)."""

    host: str = "127.0.0.1"
    port: int = 8080
    reset: bool = False
    poll_interval_s: float = 1.0
    access_log: bool = True
    sample: bool = True
    mail_dir: Path | None = None


#: Seconds a client has, from the moment its connection is taken up, to send the request
#: line and every header: a deadline for the whole phase, which a byte now and then does
#: not extend. A connection that has not finished by then is closed.
HEADER_READ_TIMEOUT_S = 10
#: Seconds a client has, once its headers are read, to send the whole body its
#: ``Content-Length`` announces; past it the answer is 400 ``bad_request``.
BODY_READ_TIMEOUT_S = 10
#: Seconds the server may spend writing one response to a client that does not read it.
WRITE_TIMEOUT_S = 30
#: The largest body the server reads (bytes; API Gateway's payload limit, 10 MB); a larger
#: ``Content-Length`` is 413 ``bad_request``.
MAX_BODY_BYTES = 10 * 1024 * 1024
#: Concurrent connections the server reads and answers (threads); each holds its thread
#: at most the two deadlines plus its API call and response, from its first byte on.
#: Connections beyond it wait for a thread (a slow sender holds one; a silent one none).
CONNECTION_THREADS = 64
#: The development sign-in's analyst: writes queries and reports and runs schedules, no
#: workspace admin or staff role (the sample's analyst persona's own roles, plus reading).
ANALYST_ROLES = ("schedules:read,schedules:write,schedules:run,queries:read,queries:write,reports:read,"
                 "reports:write,snapshots:read")
#: Connections accepted but silent so far, parked without a thread until their first
#: bytes arrive; each may stay :data:`HEADER_READ_TIMEOUT_S` seconds. A connection past
#: this number closes the one parked longest.
WAITING_CONNECTIONS = 1000
#: API execution environments (threads, each with its own database connection).
API_ENVIRONMENTS = 8

_MAX_LENGTH_DIGITS = 18
#: A download link's path in an access log line: its token is the recipient's credential.
_DOWNLOAD_TOKEN = re.compile(r"(/downloads/)[^\s?\"]+")  # a longer Content-Length is no byte count any client means


class _DeadlineReader(io.RawIOBase):
    """The connection's socket as a raw stream whose reads end at ``deadline`` (a
    ``time.monotonic()`` value; None: the socket's own timeout): each read waits at most
    the time left, and one past the deadline raises ``TimeoutError``."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("read deadline passed")
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _BodyRefused(Exception):
    """The request's body cannot be read: ``status`` and the ``message`` of the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _RequestHandler(WSGIRequestHandler):
    """wsgiref's handler that reads each request phase under its own deadline (request
    line and headers :data:`HEADER_READ_TIMEOUT_S`, body :data:`BODY_READ_TIMEOUT_S`),
    checks ``Content-Length`` and reads the whole body before the API is called, drops
    wsgiref's invented ``Content-Type: text/plain`` for requests that sent none, answers
    the HTTP layer's own refusals with JSON error bodies and has an optional access log."""

    access_log = True
    timeout = HEADER_READ_TIMEOUT_S
    header_timeout_s: float = HEADER_READ_TIMEOUT_S
    body_timeout_s: float = BODY_READ_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # (the standard library's reader; the socket stays open)
        self._reader = _DeadlineReader(self.connection)
        self._reader.deadline = time.monotonic() + self.header_timeout_s
        self.rfile = io.BufferedReader(self._reader)

    def handle(self) -> None:
        """Handle one request: read the request line, headers and body under their
        deadlines, then run the WSGI application with the body read. A client that does
        not finish its headers in time, or hangs up, is closed without an answer."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline or not self.parse_request():
                return  # nothing sent, or an error answer was sent
            body = self._read_body()
        except _BodyRefused as refused:
            self.send_error(refused.status, refused.message)
            return
        except OSError:  # the header deadline passed (TimeoutError) or the client hung up
            self.close_connection = True
            return
        self._reader.deadline = None
        self.connection.settimeout(WRITE_TIMEOUT_S)
        environ = self.get_environ()
        environ["CONTENT_LENGTH"] = str(len(body))
        handler = ServerHandler(io.BytesIO(body), self.wfile, self.get_stderr(), environ, multithread=False)
        handler.request_handler = self  # (the standard library's back pointer for the access log)
        handler.run(self.server.get_app())

    def _read_body(self) -> bytes:
        """The request body its ``Content-Length`` announces (empty without one), read by
        the body deadline. Raises :class:`_BodyRefused` for a length that is no byte
        count, a repeated one, one above :data:`MAX_BODY_BYTES`, a body that ends early or
        one not sent by the deadline, and for any ``Transfer-Encoding`` (this server reads
        bodies by their length only; with a ``Content-Length`` beside it the pair is the
        request-smuggling ambiguity, refused rather than guessed)."""
        if self.headers.get_all("Transfer-Encoding"):
            raise _BodyRefused(HTTPStatus.BAD_REQUEST,
                               "transfer-encoding is not supported: send the body with a content-length")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            return b""
        text = lengths[0].strip()
        if len(set(lengths)) > 1 or not (text.isascii() and text.isdigit()) or len(text) > _MAX_LENGTH_DIGITS:
            raise _BodyRefused(HTTPStatus.BAD_REQUEST, "content-length must be one decimal byte count")
        length = int(text)
        if length > MAX_BODY_BYTES:
            raise _BodyRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is larger than {MAX_BODY_BYTES} bytes")
        self._reader.deadline = time.monotonic() + self.body_timeout_s
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise _BodyRefused(HTTPStatus.BAD_REQUEST,
                               f"the body did not arrive within {self.body_timeout_s:g} seconds") from None
        if len(body) < length:
            raise _BodyRefused(HTTPStatus.BAD_REQUEST, "the body ended before its content-length")
        return body

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The HTTP layer's refusals (400, 413, 414, 431) as an API error body (code
        ``bad_request``) instead of the standard library's HTML page."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        body = errors.ErrorBody(code=errors.BAD_REQUEST, message=(message or phrase).lower()).model_dump_json(
            exclude_none=True).encode()
        self.log_error("code %d, message %s", code, message)
        self._reader.deadline = None
        self.connection.settimeout(WRITE_TIMEOUT_S)
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
        environments = getattr(self.server, "environments", None)
        if environments is not None:
            env[ENVIRONMENTS_KEY] = environments
        return env

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """The access log line, with a download link's token (a credential) cut out."""
        if self.access_log:
            args = tuple(_DOWNLOAD_TOKEN.sub(r"\1<token>", a) if isinstance(a, str) else a for a in args)
            super().log_message(format, *args)


# ---------------------------------------------------------------------- pipeline worker


class PipelineWorker(threading.Thread):
    """Drives the pipelines of ``stack`` on the real clock: the dispatcher handler of every
    pipeline and the snapshot dispatcher once per wall-clock minute, the snapshot planner
    every 15 minutes (and at start unless ``plan_at_start`` is False: the start-up ran it),
    and the queues' SQS event sources every
    ``poll_interval_s`` seconds (each mapping invokes its consumer with up to its maximum
    concurrency at once, on threads of its own: a poll starts batches on the free ones and
    does not wait for them). A failed round is counted in ``errors`` and retried."""

    def __init__(self, stack: LocalStack, *, poll_interval_s: float = 1.0, plan_at_start: bool = True) -> None:
        super().__init__(name="timekeeper-pipelines", daemon=True)
        self.stack = stack
        self.plan_at_start = plan_at_start
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
                    if (first and self.plan_at_start) or minute.minute % SNAPSHOTS.planner_rate_minutes == 0:
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
    """wsgiref's server that parks each accepted connection, without a thread, until its
    first bytes arrive (a silent client costs a socket, not a thread; at most
    ``waiting`` are parked, each for at most the header deadline), then reads and
    answers it on one of ``connections`` threads and runs the API on one of ``workers``
    execution environments (threads, each with its own resolver and database connection,
    see :mod:`timekeeper.edge.api`). A slow client holds one connection thread, for at
    most the handler's header and body deadlines, and never an API environment: the
    others are answered meanwhile."""

    def __init__(self, *args: Any, workers: int = API_ENVIRONMENTS, connections: int = CONNECTION_THREADS,
                 waiting: int = WAITING_CONNECTIONS, wait_s: float = HEADER_READ_TIMEOUT_S,
                 **kwargs: Any) -> None:
        # Before the bind: a bind that fails (the port is taken) closes the server at once,
        # and server_close shuts the pools down; the caller then sees the OSError itself.
        self._pool = ThreadPoolExecutor(max_workers=connections, thread_name_prefix="timekeeper-http")
        self.environments = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="timekeeper-api")
        self._waiting_limit, self._wait_s = waiting, wait_s
        self._arrived: list[tuple[Any, Any]] = []  # accepted, not yet parked (guarded by the lock)
        self._arrived_lock = threading.Lock()
        self._parked: OrderedDict[Any, tuple[Any, float]] = OrderedDict()  # only the watcher touches it
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._closing = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="timekeeper-http-waiting", daemon=True)
        self._watcher.start()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Park the accepted connection until it is readable (the watcher thread hands
        it to a connection thread then)."""
        with self._arrived_lock:
            self._arrived.append((request, client_address))
        try:
            self._wake_write.send(b"\0")
        except OSError:
            pass  # closing, or the wake-up pipe is full: the watcher is awake anyway

    def _watch(self) -> None:
        """The parking lot's loop: park arrivals, hand readable connections to the pool,
        close those silent past the deadline or pushed out by newer ones."""
        while not self._closing.is_set():
            for key, _ in self._selector.select(timeout=0.25):
                if key.fileobj is self._wake_read:
                    try:
                        while self._wake_read.recv(4096):
                            pass
                    except OSError:
                        pass  # drained
                    continue
                self._selector.unregister(key.fileobj)
                client_address, _ = self._parked.pop(key.fileobj)
                self._pool.submit(self._process, key.fileobj, client_address)
            with self._arrived_lock:
                arrived, self._arrived = self._arrived, []
            now = time.monotonic()
            for request, client_address in arrived:
                if len(self._parked) >= self._waiting_limit:
                    oldest, _ = self._parked.popitem(last=False)
                    self._selector.unregister(oldest)
                    self.shutdown_request(oldest)
                self._parked[request] = (client_address, now + self._wait_s)
                self._selector.register(request, selectors.EVENT_READ)
            while self._parked:
                oldest, (_, deadline) = next(iter(self._parked.items()))
                if deadline > now:
                    break
                del self._parked[oldest]
                self._selector.unregister(oldest)
                self.shutdown_request(oldest)

    def _process(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - socketserver's own policy: report and go on
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._closing.set()
        if self._watcher.is_alive():
            self._watcher.join(2)
        for request in list(self._parked):
            self.shutdown_request(request)
        self._parked.clear()
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.environments.shutdown(wait=False, cancel_futures=True)


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
    #: The handlers' logger's level before the server set it (given back by :meth:`stop`).
    _log_level: int | None = None
    #: Where a copy of every message sent is kept (``.html`` and ``.txt`` per message).
    mail_dir: Path | None = None
    #: The start-up's snapshot catch-up (``{"planned", "published", "failed"}``), None without samples.
    snapshots: dict[str, int] | None = None

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
        if self.mail_dir is not None:
            from timekeeper.edge import adapters

            adapters.install_mailer(None)
        if self._log_level is not None:
            from timekeeper.observability import logger

            logger.setLevel(self._log_level)
            self._log_level = None


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
    snapshots: dict[str, int] | None = None
    stack = start_local_stack(database=SERVE_DATABASE, reset=options.reset, aws_server=True,
                              database_url=database_url, log_level="WARNING",
                              platform_sample_at=platform_sample_day(clock.now()), concurrent_consumers=True)
    handler = type("RequestHandler", (_RequestHandler,), {"access_log": options.access_log})
    try:
        if options.sample and stack.platform is not None:
            from timekeeper.db.connection import connect
            from timekeeper.local.serve_sample import (
                catch_up_snapshots,
                drill_failed_snapshot,
                seed_dead_letters,
                seed_serve_sample,
            )

            with connect(stack.database_url) as conn:
                created = seed_serve_sample(conn, stack.platform, now=clock.now())
            berlin = stack.platform.workspaces.get("berlin")
            if berlin is not None:
                drill_failed_snapshot(berlin, "Europe/Berlin", now=clock.now())
            snapshots = catch_up_snapshots(stack, now=clock.now())
            queues = {**stack.aws.queues, **stack.aws.work_queues}
            seed_dead_letters(stack.aws.client("sqs"), {name: pair.dlq_url for name, pair in queues.items()}, created,
                              workspace_id=stack.platform.workspaces.get("berlin"))
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
    _enable_console(stack)
    mail_dir = _keep_mail(options.mail_dir)
    # The functions' log lines at the level the stack's environment names (WARNING unless
    # POWERTOOLS_LOG_LEVEL says otherwise): their logger may have been built before it was set.
    from timekeeper.observability import logger

    log_level = logger.level
    logger.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING").upper())
    worker = PipelineWorker(stack, poll_interval_s=options.poll_interval_s, plan_at_start=snapshots is None)
    worker.start()
    return LocalServer(base_url=base_url, stack=stack, worker=worker, httpd=httpd, _log_level=log_level,
                       mail_dir=mail_dir, snapshots=snapshots)


def _keep_mail(folder: Path | None) -> Path:
    """Send this server's messages through SES in moto as deployed, and keep a copy of each
    in ``folder`` (default ``serve-mail`` in the state folder): ``<SES message id>.html``
    (a JSON header line with the recipient, subject and headers, then the HTML part) and
    ``.txt`` (the plain-text part), as ``simulate`` keeps its mail. Returns the folder."""
    from timekeeper.edge import adapters
    from timekeeper.local.delivery import DiskMailer
    from timekeeper.local.embedded import state_home

    folder = folder or state_home() / "serve-mail"
    adapters.install_mailer(None)
    adapters.install_mailer(DiskMailer(adapters.mailer(), folder))
    return folder


def _enable_console(stack: LocalStack) -> None:
    """Turn the console on for this server: a fresh session key (signing in again after a
    restart), the development sign-in, and the Platform sample's people to pick from
    (an admin of its first workspace who is also staff, an analyst and a viewer there, the
    admin of another who is not staff)."""
    from timekeeper import settings

    os.environ[settings.CONSOLE_SESSION_KEY_VARIABLE] = secrets.token_urlsafe(48)
    os.environ[settings.CONSOLE_DEV_SIGN_IN_VARIABLE] = "1"
    sample = stack.platform
    samples = console_samples(sample) if sample is not None else []
    os.environ[settings.CONSOLE_SAMPLES_VARIABLE] = json.dumps(samples)


def console_samples(sample: Any) -> list[dict[str, str]]:
    """The people the development sign-in offers for the Platform sample ``sample`` (a
    :class:`~timekeeper.local.platform_data.SampleSet`): ``[{"label", "user_id",
    "workspace_id", "roles", "summary"}]`` with the token's roles comma-separated and
    ``summary`` what the person may do, in words (shown beside the sign-in button). Each token role the
    access rule judges by membership (queries, reports) is one the sample membership
    grants, so the navigation offers no page the person is refused."""
    from timekeeper.console.sessions import DEV_ROLES

    everything = ",".join(DEV_ROLES)
    samples = []
    # The Berlin admin is also the staff sample person; Sydney's admin is no staff member.
    for label, persona, workspace, roles, summary in (
            ("Berlin admin", "admin", "berlin", everything,
             "workspace admin and platform staff: every page, Operations and the audit log included"),
            ("Berlin analyst", "analyst", "berlin", ANALYST_ROLES,
             "writes schedules, queries, reports and deliveries; no admin or staff pages"),
            ("Berlin viewer", "viewer", "berlin", "schedules:read,queries:read,reports:read,snapshots:read",
             "reads schedules, queries, reports and snapshots; changes nothing"),
            ("Sydney admin", "sydney_admin", "sydney", ",".join(r for r in DEV_ROLES if r != "platform:staff"),
             "workspace admin of another workspace (Sydney); not staff")):
        if persona in sample.users and workspace in sample.workspaces:
            samples.append({"label": label, "user_id": sample.users[persona],
                            "workspace_id": str(sample.workspaces[workspace]), "roles": roles,
                            "summary": summary})
    return samples


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
    sample = server.stack.platform
    person, workspace = (sample.users["admin"], sample.first_workspace) if sample is not None else (
        "alice", uuid.uuid4())
    token = f"dev:{person}:{workspace}:schedules:read,schedules:write,schedules:run"
    print(f"Timekeeper API on {server.base_url}  (OpenAPI document: {server.base_url}/openapi.json)", file=out)
    print(f"  console: {server.base_url}/  (development sign-in: pick a sample person)", file=out)
    print(f"  database: {_redacted(server.database_url)}", file=out)
    print(f"  mail sent: a copy of every message in {server.mail_dir}", file=out)
    print(f"  local AWS (moto): {server.local_aws.endpoint}; dispatchers every minute, queues polled every "
          f"{options.poll_interval_s:g}s, real clock", file=out)
    print("  authorizer stand-in: Authorization: Bearer dev:<user>:<workspace uuid>:<role,role,...>", file=out)
    print(f"  e.g. curl -H 'Authorization: Bearer {token}' {server.base_url}/schedules", file=out)
    if server.stack.platform is not None:
        sample = server.stack.platform
        print(f"  Platform sample: workspace {sample.first_workspace} ({len(sample.workspaces)} workspaces), "
              f"its admin {sample.users['admin']}", file=out)
    if server.snapshots is not None:
        print(f"  snapshots: {server.snapshots['published']} periods published, {server.snapshots['failed']} failed "
              "(the sample's failed Self-test month: staff re-run it from the console's Snapshots)", file=out)
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
