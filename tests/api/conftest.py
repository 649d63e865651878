"""Fixtures of the API tests: the resolver over the real database (the API's
row-level-security connection) with a list publisher, and an API Gateway REST proxy event
factory with the authorizer's claims."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support import ListPublisher
from timekeeper import clock, edge
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.db.connection import login_url
from timekeeper.edge import api as api_edge
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext
from timekeeper.local.serve import ServeOptions, start_server

ALL_ROLES = "schedules:read,schedules:write,schedules:run"
NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
#: The console's session key in the tests.
CONSOLE_KEY = "k" * 40


@dataclass
class Caller:
    """Who calls: the authorizer's claims (``None`` fields are left out of the event).
    ``enrol``: the ``call`` fixture first makes the caller an active member of their
    workspace in the directory (:func:`enrol`) when they are not in it yet; False calls as
    a person the directory does not know there (the API refuses them, 403)."""

    user_id: str | None = "user-1"
    workspace_id: uuid.UUID | str | None = field(default_factory=uuid.uuid4)
    roles: str | None = ALL_ROLES
    enrol: bool = True

    def claims(self) -> dict[str, Any] | None:
        out = {"principalId": self.user_id, "workspace_id": str(self.workspace_id) if self.workspace_id else None,
               "roles": self.roles}
        out = {k: v for k, v in out.items() if v is not None}
        return out or None


@dataclass
class Reply:
    """A proxy response: ``status``, parsed JSON ``body`` (None when empty) and ``headers``."""

    status: int
    body: Any
    headers: dict[str, str]


def proxy_event(method: str, target: str, *, claims: dict[str, Any] | None, body: Any = None,
                headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An API Gateway REST proxy event (``{proxy+}`` integration) for ``method target``;
    ``claims`` become ``requestContext.authorizer`` as a Lambda authorizer passes them."""
    parts = urlsplit(target)
    query: dict[str, list[str]] = {}
    for pair in filter(None, parts.query.split("&")):
        key, _, value = pair.partition("=")
        query.setdefault(key, []).append(value)
    all_headers = {"Host": "api.example.com", "Content-Type": "application/json", **(headers or {})}
    text = None if body is None else body if isinstance(body, str) else json.dumps(body)
    context: dict[str, Any] = {
        "accountId": "123456789012", "apiId": "api", "stage": "test", "requestId": str(uuid.uuid4()),
        "httpMethod": method, "path": f"/test{parts.path}", "resourcePath": "/{proxy+}",
        "identity": {"sourceIp": "127.0.0.1", "userAgent": "pytest"}}
    if claims is not None:
        context["authorizer"] = claims
    return {
        "resource": "/{proxy+}", "path": parts.path, "httpMethod": method,
        "headers": all_headers, "multiValueHeaders": {k: [v] for k, v in all_headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": {"proxy": parts.path.lstrip("/")}, "stageVariables": None,
        "requestContext": context, "body": text, "isBase64Encoded": False}


@pytest.fixture
def publisher() -> ListPublisher:
    """Keeps the run messages the API published; set ``refuse_all`` to refuse them."""
    return ListPublisher()


@pytest.fixture
def clock_now() -> dict[str, datetime]:
    """The API's clock: change ``clock_now["now"]`` to move time."""
    return {"now": NOW}


@pytest.fixture
def api_conn(db_url):
    """The API's own connection (role timekeeper_api, row-level security)."""
    conn = connect_api(login_url(db_url, API_ROLE))
    yield conn
    conn.close()


@pytest.fixture
def app(api_conn, publisher, clock_now):
    """The resolver over the module's database, the list publisher and the fixed clock."""
    published_to: list[str] = []

    def publisher_for(pipeline: str) -> ListPublisher:
        published_to.append(pipeline)
        return publisher

    resolver = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=publisher_for,
                                      registry=registries.work_kinds, now=lambda: clock_now["now"],
                                      snapshot_registry=registries.snapshot_types))
    resolver.published_to = published_to
    return resolver


@pytest.fixture
def console(app, db_url):
    """The console's resolver over ``app`` (in-process API calls), with the development
    sign-in and a fixed session key (:data:`CONSOLE_KEY`); its ``db_url`` is where a
    test's browser enrols the people it signs in (:func:`enrol`)."""
    from timekeeper.console.app import ConsoleSettings, create_console

    resolver = create_console(lambda event, context: app.resolve(event, context),
                              ConsoleSettings(session_key=CONSOLE_KEY, dev_sign_in=True, secure_cookies=True))
    resolver.db_url = db_url
    return resolver


@pytest.fixture
def caller() -> Caller:
    """A user of a fresh workspace with every role."""
    return Caller()


def enrol(db_url: Any, user_id: Any, workspace_id: Any) -> None:
    """Make ``user_id`` a member of ``workspace_id`` in the directory (as the schema owner:
    ``db_url``, or an autocommit connection of its; committed) when either is missing
    there: the workspace (UTC), an active user and a membership without roles. Whatever is
    there already is left as it is (a deactivated user, a membership left), and so are ids
    the API refuses anyway (not a UUID, no user)."""
    from contextlib import nullcontext

    from timekeeper.db.connection import connect

    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 200 or "\x00" in user_id:
        return
    try:
        workspace = uuid.UUID(str(workspace_id))
    except ValueError:
        return
    user = user_id.strip()
    with (connect(db_url) if isinstance(db_url, str) else nullcontext(db_url)) as conn, conn.transaction():
        conn.execute("INSERT INTO workspaces (id, name, timezone, created_at) VALUES (%s, 'Workspace', 'UTC', %s) "
                     "ON CONFLICT DO NOTHING", (workspace, NOW))
        conn.execute("INSERT INTO users (id, display_name, created_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                     (user, user, NOW))
        conn.execute("INSERT INTO workspace_memberships (workspace_id, user_id, joined_at) VALUES (%s, %s, %s) "
                     "ON CONFLICT DO NOTHING", (workspace, user, NOW))


@pytest.fixture
def call(app, caller, db_url):
    """``call(method, target, body=None, headers=None, as_=caller)`` -> :class:`Reply`; the
    caller is enrolled first (:func:`enrol`) unless ``as_.enrol`` is False."""

    def _call(method: str, target: str, body: Any = None, *, headers: dict[str, str] | None = None,
              as_: Caller | None = None, claims: dict[str, Any] | None | str = "from-caller") -> Reply:
        who = as_ or caller
        if who.enrol and claims == "from-caller":
            enrol(db_url, who.user_id, who.workspace_id)
        event = proxy_event(method, target, claims=who.claims() if claims == "from-caller" else claims,
                            body=body, headers=headers)
        response = app.resolve(event, LambdaContext(function_name="timekeeper-api"))
        raw = response.get("body")
        headers_out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
        for k, v in (response.get("multiValueHeaders") or {}).items():
            headers_out.setdefault(k.lower(), v[-1] if isinstance(v, list) else v)
        return Reply(response["statusCode"], json.loads(raw) if raw else None, headers_out)

    return _call


DAILY = {"cron": "30 2 * * *", "timezone": "America/New_York"}


def new_schedule(**overrides: Any) -> dict[str, Any]:
    """A valid create body (an accounting reconciliation sweep at 02:30 New York time)."""
    return {"owner": "accounting", "work_kind": "reconciliation.sweep", "recurrence": DAILY,
            "name": "nightly sweep", **overrides}


# ------------------------------------------------------------ saved queries: directory rows

#: Token roles that allow every saved-query route.
QUERY_ROLES = "queries:read,queries:write"


def seed_member(db_url: str, *, workspace_id: uuid.UUID | None = None, user_id: str | None = None,
                roles: tuple[str, ...] = ("queries:admin",), status: str = "active", left: bool = False,
                token_roles: str = QUERY_ROLES) -> Caller:
    """Make a directory member (as the schema owner, committed): the workspace (created when
    new), the user with ``status`` and a membership with ``roles`` (``left``: the user has
    left it since). Returns the :class:`Caller` whose token names them with ``token_roles``."""
    from timekeeper.db.connection import connect
    from timekeeper.platform import directory

    workspace_id = workspace_id or uuid.uuid4()
    user_id = user_id or f"user-{uuid.uuid4().hex[:10]}"
    with connect(db_url) as conn, conn.transaction():
        if directory.get_workspace(conn, workspace_id) is None:
            directory.create_workspace(conn, workspace_id=workspace_id, name="Workspace", timezone="Europe/Berlin",
                                       now=NOW)
        directory.upsert_user(conn, user_id=user_id, display_name="Member", status=status, now=NOW)
        directory.add_member(conn, workspace_id=workspace_id, user_id=user_id, roles=roles, now=NOW)
        if left:
            directory.leave_workspace(conn, workspace_id=workspace_id, user_id=user_id, now=NOW)
    return Caller(user_id=user_id, workspace_id=workspace_id, roles=token_roles)


@pytest.fixture
def member(db_url) -> Caller:
    """A current, active member of a fresh workspace whose membership (queries:admin) and
    token (queries:read, queries:write) allow every saved-query route."""
    return seed_member(db_url)


#: A valid definition: open invoices' numbers and amounts, largest first.
OPEN_INVOICES = {"entity": "invoices", "columns": ["number", "amount_minor"],
                 "filters": [{"column": "status", "op": "eq", "value": "open"}],
                 "sort": [{"column": "amount_minor", "direction": "desc"}], "limit": 100}


def new_query(**overrides: Any) -> dict[str, Any]:
    """A valid ``POST /queries`` body."""
    return {"name": "Open invoices", "description": "what is still owed", "definition": OPEN_INVOICES, **overrides}


@pytest.fixture
def analyst(db_url):
    """A member of a fresh workspace who may read and write queries and schedules (every
    token role), and a saved query of theirs: ``(caller, query id)``."""
    from timekeeper.db.connection import connect
    from timekeeper.reporting import store

    who = seed_member(db_url, roles=("queries:admin",), token_roles=f"queries:read,queries:write,{ALL_ROLES}")
    with connect(db_url) as conn, conn.transaction():
        query, _ = store.create_query(conn, workspace_id=who.workspace_id, name="Invoices", actor=who.user_id,
                                      now=NOW, definition={"entity": "invoices", "columns": ["number"]})
    return who, query.id


@contextmanager
def serving(db_url: str, *, poll_interval_s: float = 0.2) -> Iterator[Any]:
    """``python -m timekeeper serve`` on a free port over ``db_url``, in the background; the
    link base is left to serve. On exit the server stops and the environment, the edge's
    caches and the clock are restored."""
    saved = dict(os.environ)
    os.environ.pop("DOWNLOAD_BASE_URL", None)
    mail_dir = Path(tempfile.mkdtemp(prefix="tk-serve-mail-"))
    server = start_server(ServeOptions(port=0, access_log=False, poll_interval_s=poll_interval_s,
                                       mail_dir=mail_dir), database_url=db_url)
    server.serve_in_background()
    try:
        yield server
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved)
        edge.reset()
        api_edge.reset()
        clock.install(None)
        shutil.rmtree(mail_dir, ignore_errors=True)


#: The workspaces of :func:`seed_overdue_workspaces` (names with markup and HTML to escape).
MISSING_NAME, FAILED_NAME, PUBLISHED_NAME = "Missing [b]<GmbH>", "Failed & Co", "Published AG"


def seed_overdue_workspaces(db, *, created: datetime, periods: list[date]) -> dict[str, uuid.UUID]:
    """Three Berlin workspaces created at ``created`` on the owner's connection (not
    committed): :data:`MISSING_NAME` never planned, :data:`FAILED_NAME` whose ``periods``
    failed (every enabled snapshot type, version 1, ``generator_failed``), and
    :data:`PUBLISHED_NAME` whose ``periods`` are published. Returns ``{name: id}``."""
    from timekeeper.platform.directory import create_workspace

    made = {name: create_workspace(db, name=name, timezone="Europe/Berlin", currency="EUR", now=created).id
            for name in (MISSING_NAME, FAILED_NAME, PUBLISHED_NAME)}
    for snapshot_type in registries.snapshot_types().enabled():
        for period in periods:
            for name, state in ((FAILED_NAME, "failed"), (PUBLISHED_NAME, "published")):
                published = state == "published"
                db.execute("""INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode,
                                                         state, is_current, published_at, failure_code, created_at,
                                                         updated_at)
                              VALUES (%s, %s, %s, %s, 1, 'planned', %s, %s, %s, %s, %s, %s)""",
                           (snapshot_type.owner, snapshot_type.name, made[name], period, state, published,
                            created if published else None, None if published else "generator_failed",
                            created, created))
    return made


@pytest.fixture
def ws(db_url) -> dict[str, Any]:
    """Two workspaces for the delivery authoring tests: Acme (Europe/Berlin) with ana
    (queries:write), rui and ria (queries:read), ``Vic <Viewer>`` (reports:read, a name to
    escape) and zed (queries:read, who left an hour ago); Beta (UTC) with bea. Acme has
    the saved query "Open invoices" (version 2 adds ``amount_minor``), Beta "Theirs".
    Returns the ids: ``a``, ``b``, ``query`` and ``other`` (Beta's query)."""
    from datetime import timedelta

    from timekeeper.db.connection import connect
    from timekeeper.platform.directory import add_member, create_workspace, leave_workspace, upsert_user
    from timekeeper.reporting import store

    with connect(db_url) as conn, conn.transaction():
        a = create_workspace(conn, name="Acme", timezone="Europe/Berlin", now=NOW).id
        b = create_workspace(conn, name="Beta", timezone="UTC", now=NOW).id
        for user, name, roles, w in (("ana", "Ana Analyst", ["queries:write"], a),
                                     ("rui", "Rui Reader", ["queries:read"], a),
                                     ("ria", "Ria Reader", ["queries:read"], a),
                                     ("vic", "Vic <Viewer>", ["reports:read"], a),
                                     ("zed", "Zed Gone", ["queries:read"], a),
                                     ("bea", "Bea Other", ["queries:admin"], b)):
            upsert_user(conn, user_id=user, display_name=name, email=f"{user}@x.test", now=NOW)
            add_member(conn, workspace_id=w, user_id=user, roles=roles, now=NOW - timedelta(days=1))
        leave_workspace(conn, workspace_id=a, user_id="zed", now=NOW - timedelta(hours=1))
        query, _ = store.create_query(conn, workspace_id=a, name="Open invoices", actor="ana", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"]})
        store.add_version(conn, workspace_id=a, query_id=query.id, actor="ana", now=NOW,
                          definition={"entity": "invoices", "columns": ["number", "amount_minor"]})
        other, _ = store.create_query(conn, workspace_id=b, name="Theirs", actor="bea", now=NOW,
                                      definition={"entity": "invoices", "columns": ["number"]})
    return {"a": a, "b": b, "query": str(query.id), "other": str(other.id)}


@pytest.fixture
def batches(conn, caller) -> dict[str, str]:
    """Two recurring batches ("Daily sales", "Cash book") of the caller's workspace and one
    ("Their batch") of another workspace; returns their ids by ``daily``, ``cash``, ``theirs``."""
    from timekeeper.accounting import books

    def recurring(workspace_id, name):
        calendar = books.create_calendar(conn, workspace_id=workspace_id, name=f"books {name}", timezone="UTC",
                                         first_period_start=date(2027, 3, 1), periods=3)
        return books.create_recurring_batch(conn, workspace_id=workspace_id, calendar_id=calendar.id,
                                            name=name, opens_on=date(2027, 3, 1), now=NOW)

    with conn.transaction():
        daily = recurring(caller.workspace_id, "Daily sales")
        cash = recurring(caller.workspace_id, "Cash book")
        theirs = recurring(uuid.uuid4(), "Their batch")
    return {"daily": str(daily.id), "cash": str(cash.id), "theirs": str(theirs.id)}
