"""The console's pages: a Powertools REST resolver answering HTML, each page built from
the API's answers for the signed-in person.

Sessions: a signed cookie (:class:`Sessions`, itsdangerous with SHA-256, eight hours)
holds the person's claims (user, workspace, roles) and a random session id; it is
``HttpOnly``, ``SameSite=Lax`` and ``Secure`` wherever the console is served over HTTPS.
Locally, a development sign-in (:attr:`ConsoleSettings.dev_sign_in`) lets you pick a
sample person; a deployment signs in through its OpenID Connect identity provider
(:mod:`timekeeper.console.sign_in`: the authorization-code flow with PKCE), whose ID token
maps to the same claims the API's authorizer gives the API. Every state-changing request
is a POST carrying the session's CSRF token (a signature of its session id), checked
before anything is done.

Every response carries a Content-Security-Policy without ``unsafe-inline`` (scripts and
styles come from ``/console/static/`` only; no code or font from another origin),
``frame-ancestors 'none'`` and ``nosniff``, and where cookies are ``Secure`` (HTTPS)
``Strict-Transport-Security``; every text is escaped by Jinja2's autoescape.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from html.parser import HTMLParser
from http import HTTPStatus
from http.cookies import SimpleCookie
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from itsdangerous import BadSignature, URLSafeTimedSerializer
from jinja2 import Environment, PackageLoader, select_autoescape

from timekeeper import json_input
from timekeeper.console import glossary, rule_form
from timekeeper.console.sign_in import (
    FLOW_COOKIE,
    FLOW_MAX_AGE_S,
    FlowCookies,
    Identity,
    IdentityProvider,
    SignInRefused,
    authorization_url,
    check_callback,
    finish,
    new_flow,
)
from timekeeper.observability import logger
from timekeeper.settings import CONSOLE_FAVICON_PATH

#: Where the console's pages live (``/`` leads to them).
PREFIX = "/console"
#: The session cookie's name.
SESSION_COOKIE = "tk_console"
#: How long a session lasts (seconds).
SESSION_MAX_AGE_S = 8 * 3600
#: The roles a development sign-in offers: every role of the API (a deployment's come from
#: its identity provider).
DEV_ROLES = ("schedules:read", "schedules:write", "schedules:run", "schedules:admin", "queries:read",
             "queries:write", "queries:admin", "reports:read", "reports:write", "snapshots:read", "workspace:admin",
             "platform:staff")
#: Staff roles that may read every workspace's snapshot periods and request re-runs and
#: backfills (the API decides; the console only shows the staff form to them).
STAFF_ROLES = frozenset({"platform:staff"})
#: The role the owner hand-off and the failed posting jobs need (the API checks it by the
#: token and by the membership; the console only offers those pages to its holders).
ADMIN_ROLES = frozenset({"workspace:admin"})
#: A local date as the closure routes take it (what a done message may echo).
DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
#: A month as the period picker takes it (``YYYY-MM``, January to December).
MONTH_TEXT = re.compile(r"[1-9][0-9]{3}-(0[1-9]|1[0-2])")
#: Schedules per page of the list.
PAGE_SIZE = 50

#: The policy of every console response: this origin's scripts and styles only, no
#: inline code, never framed, forms posted only here; it may frame its own pages only (a
#: message preview's HTML part).
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                           "base-uri 'none'")
_SECURITY_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
                     "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY"}
#: HTTPS only, for two years, wherever the console is served with ``Secure`` cookies.
STRICT_TRANSPORT_SECURITY = "max-age=63072000; includeSubDomains"
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".svg": "image/svg+xml; charset=utf-8"}
_ACTIONS = {"pause": "paused", "resume": "resumed", "run": "queued to run now"}
#: What a redirect after another change says (``?done=update``).
_DONE = {**_ACTIONS, "update": "updated"}
#: The next occurrences a schedule's page (and its rule preview) shows.
UPCOMING = 10
#: The console's kinds of schedule, by path: the API prefix of each.
_KINDS = {"schedules": "/schedules", "deliveries": "/query-schedules"}
#: What each kind of notice says happened (the API's ``kind``): the glossary's words.
NOTICE_KINDS = ("schedule_paused", "delivery_skipped_stale", "posting_failed", "schedule_ownerless",
                "resubscribe_invited", "schedule_failed")
#: What the snapshots page's "Show" filter offers: overdue, or a period status.
PERIOD_FILTERS = ("overdue", "published", "missing", "failed", "skipped", "planned", "queued", "running",
                  "retry_wait")
#: At most this many API pages (of 100 periods) one filtered snapshots page reads through.
PERIOD_READS = 10
#: A month as the console's addresses name it.
MONTH_PATTERN = re.compile(r"[1-9][0-9]{3}-(0[1-9]|1[0-2])")
#: Which failures a schedule's owner is told of (the API's ``notify_on``), in the glossary's words.
NOTIFY_CHOICES = {code: glossary.words(code) for code in ("first_failure", "every_failure", "pause_only")}


class _StyleAttributes(HTMLParser):
    """The ``style`` attribute values of an HTML document, as a browser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.values.update(value for name, value in attrs if name == "style" and value)


def message_preview_policy(html: str) -> str:
    """The Content-Security-Policy of a message preview's HTML part: nothing loads, nothing
    runs (``sandbox``, no scripts), only the console may frame it, and the message's own
    ``style`` attributes apply by their hashes (``'unsafe-hashes'`` with one ``sha256`` per
    distinct value; never ``unsafe-inline``): the message looks as a mail client shows it."""
    parser = _StyleAttributes()
    parser.feed(html)
    parser.close()
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(v.encode()).digest()).decode()}'"
                      for v in sorted(parser.values))
    styles = f"'unsafe-hashes' {hashes}" if hashes else "'none'"
    return (f"default-src 'none'; style-src {styles}; img-src 'none'; form-action 'none'; "
            "frame-ancestors 'self'; base-uri 'none'; sandbox")


#: The icon path a browser asks for by itself (the console redirects it to its icon).
FAVICON_PATH = CONSOLE_FAVICON_PATH


def is_console_path(path: str | None) -> bool:
    """Whether a request path belongs to the console (``/``, ``/favicon.ico`` and
    ``/console...``)."""
    return path in ("/", "", FAVICON_PATH) or path == PREFIX or (path or "").startswith(PREFIX + "/")


@dataclass(frozen=True)
class ConsoleSettings:
    """How the console runs: ``session_key`` signs its cookies (at least 32 characters)
    and ``older_session_keys`` still verify them (a rotation: sessions signed with the
    previous key stay valid until they expire); ``dev_sign_in`` offers the development
    sign-in (local stack only); ``secure_cookies`` marks cookies ``Secure`` and sends
    ``Strict-Transport-Security`` (HTTPS); ``samples`` are the people the development
    sign-in suggests (``{"label", "user_id", "workspace_id", "roles"}``);
    ``identity_provider()`` gives the OpenID Connect issuer people sign in with (None: no
    deployed sign-in; it may raise :class:`~timekeeper.console.sign_in.SignInRefused`
    when the issuer cannot be reached); ``base_path`` is what the browser's address has
    before ``/console`` (the API stage, e.g. ``/v1``; empty locally)."""

    session_key: str
    dev_sign_in: bool = False
    secure_cookies: bool = True
    samples: tuple[dict[str, str], ...] = ()
    older_session_keys: tuple[str, ...] = ()
    identity_provider: Callable[[], IdentityProvider] | None = None
    base_path: str = ""


@dataclass(frozen=True)
class Session:
    """A signed-in person: the claims the API is called with, and the session's id (what
    its CSRF token signs)."""

    user_id: str
    workspace_id: str
    roles: str
    sid: str = field(default_factory=lambda: secrets.token_urlsafe(16))

    def claims(self) -> dict[str, str]:
        """The authorizer claims of the person's API requests."""
        return {"principalId": self.user_id, "workspace_id": self.workspace_id, "roles": self.roles}

    def has(self, *roles: str) -> bool:
        """Whether the session's token holds any of ``roles`` (what the navigation offers;
        the API still decides every request)."""
        held = set(self.roles.replace(",", " ").split())
        return bool(held & set(roles))

    @property
    def staff(self) -> bool:
        """Whether the person holds a snapshot staff role."""
        return self.has(*STAFF_ROLES)

    @property
    def admin(self) -> bool:
        """Whether the person's token holds the workspace admin role (the ownerless
        schedules and failed posting jobs pages)."""
        return self.has(*ADMIN_ROLES)


class Sessions:
    """Issues and reads session cookies and their CSRF tokens (``secret_key`` signs,
    ``older_keys`` still verify; each at least 32 characters; ``ValueError`` otherwise)."""

    def __init__(self, secret_key: str, older_keys: tuple[str, ...] = ()) -> None:
        if any(len(key) < 32 for key in (*older_keys, secret_key)):
            raise ValueError("the console's session key must have at least 32 characters")
        #: Every key, newest last (itsdangerous signs with the last, verifies with any).
        self.keys = [*older_keys, secret_key]
        self._cookies = URLSafeTimedSerializer(self.keys, salt="timekeeper-console-session",
                                               signer_kwargs={"digest_method": hashlib.sha256})
        self._csrf = URLSafeTimedSerializer(self.keys, salt="timekeeper-console-csrf",
                                            signer_kwargs={"digest_method": hashlib.sha256})

    def issue(self, session: Session) -> str:
        """The cookie value of ``session``."""
        return self._cookies.dumps({"u": session.user_id, "w": session.workspace_id, "r": session.roles,
                                    "s": session.sid})

    def read(self, value: str | None) -> Session | None:
        """The session a cookie value holds, or None (absent, tampered with, expired after
        :data:`SESSION_MAX_AGE_S`, or not what :meth:`issue` writes)."""
        if not value:
            return None
        try:
            data = self._cookies.loads(value, max_age=SESSION_MAX_AGE_S)
            session = Session(user_id=data["u"], workspace_id=data["w"], roles=data["r"], sid=data["s"])
        except (BadSignature, KeyError, TypeError, ValueError):
            return None
        if not all(isinstance(v, str) and v and "\x00" not in v for v in (session.user_id, session.workspace_id,
                                                                          session.sid)):
            return None
        return session

    def csrf_token(self, session: Session) -> str:
        """The token a form of ``session`` carries."""
        return self._csrf.dumps(session.sid)

    def csrf_valid(self, session: Session, token: str | None) -> bool:
        """Whether ``token`` is ``session``'s CSRF token (at most one session long)."""
        if not token:
            return False
        try:
            return self._csrf.loads(token, max_age=SESSION_MAX_AGE_S) == session.sid
        except BadSignature:
            return False


class SessionUnknown(Exception):
    """The API could not say whether a session was signed out (its ``reply``)."""

    def __init__(self, reply: ApiReply) -> None:
        super().__init__(reply.status)
        self.reply = reply


@dataclass(frozen=True)
class ApiReply:
    """An API answer: HTTP ``status`` and the parsed JSON ``body`` (None when empty)."""

    status: int
    body: Any


class ApiClient:
    """The API as one person calls it: REST proxy events with ``claims`` as the authorizer's
    context, resolved by ``resolve(event, context)`` in this execution environment."""

    def __init__(self, resolve: Callable[[dict[str, Any], Any], dict[str, Any]], claims: dict[str, str],
                 context: Any = None) -> None:
        self._resolve, self._claims, self._context = resolve, claims, context

    def call(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
             headers: dict[str, str] | None = None) -> ApiReply:
        """``method path`` with ``query`` parameters and a JSON ``body``; the API's answer."""
        query = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        event = {
            "resource": "/{proxy+}", "path": path, "httpMethod": method,
            "headers": {"Content-Type": "application/json", **(headers or {})},
            "multiValueHeaders": {}, "queryStringParameters": query or None,
            "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
            "pathParameters": {"proxy": path.lstrip("/")}, "stageVariables": None,
            "requestContext": {"resourcePath": "/{proxy+}", "httpMethod": method, "path": path,
                               "requestId": str(uuid.uuid4()), "authorizer": self._claims,
                               "identity": {"sourceIp": "127.0.0.1"}},
            "body": None if body is None else json.dumps(body), "isBase64Encoded": False,
        }
        # Powertools keeps the current event on its router class: the API request would
        # replace the console's own; give it back once the API has answered.
        saved = getattr(BaseRouter, "current_event", None)
        try:
            response = self._resolve(event, self._context)
        finally:
            BaseRouter.current_event = saved
        raw = response.get("body")
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return ApiReply(int(response["statusCode"]), parsed)


def when(instant: str | None, zone: str) -> dict[str, str] | None:
    """An API instant (ISO 8601 UTC) shown for people: ``local`` in ``zone`` with its
    abbreviation, and ``utc`` beside it. None for None."""
    if not instant:
        return None
    at = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    local = at.astimezone(ZoneInfo(zone))
    return {"local": local.strftime("%Y-%m-%d %H:%M %Z"), "utc": at.strftime("%Y-%m-%d %H:%M UTC"),
            "iso": at.isoformat()}


def zone_of(body: Any) -> str:
    """The workspace's IANA zone an API page names (its ``timezone``), ``"UTC"`` when it
    names none or one this machine's zone database does not know."""
    zone = body.get("timezone") if isinstance(body, dict) else None
    if not isinstance(zone, str) or not zone:
        return "UTC"
    try:
        ZoneInfo(zone)
    except (ValueError, ZoneInfoNotFoundError):
        return "UTC"
    return zone


def zone_enum(document: Any) -> list[str]:
    """The zones the API's OpenAPI ``document`` lets a rule name: its ``TimeZone``
    component's enum (the one list every rule's ``timezone`` refers to), sorted; empty
    when the document has none."""
    try:
        names = document["components"]["schemas"]["TimeZone"]["enum"]
    except (KeyError, TypeError):
        return []
    return sorted(name for name in names if isinstance(name, str)) if isinstance(names, list) else []


#: Why a run waits too long, for people (the operations overview's ``why``).
_STRANDED = {"not_started": "accepted by its queue, never started", "not_published": "waiting to be sent again",
             "lease_expired": "started; its execution stopped answering"}
#: The message after an operations action.
_OPERATIONS_DONE = {"redriven": "The redrive started: the messages go back to their queue.",
         "resumed": "The schedule was resumed from now."}


def _age(seconds: int) -> str:
    """``5400`` -> ``"1 h 30 min"``; under a minute ``"under a minute"``."""
    if seconds < 60:
        return "under a minute"
    days, rest = divmod(seconds // 60, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    return " ".join(p for p in parts if p)
def occurrence_rows(occurrences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API's next occurrences for a page: each with its local wall time (with the zone's
    abbreviation), its UTC instant, and its DST markers (``shifted``, ``repeated``)."""
    rows = []
    for o in occurrences:
        local = datetime.fromisoformat(o["local"]).astimezone(ZoneInfo(o["timezone"]))
        at = datetime.fromisoformat(o["at"].replace("Z", "+00:00"))
        rows.append({**o, "when": {"local": local.strftime("%Y-%m-%d %H:%M %Z"),
                                   "utc": at.strftime("%Y-%m-%d %H:%M UTC"), "iso": at.isoformat()}})
    return rows


def rule_code(recurrence: dict[str, Any]) -> str | None:
    """The expression a rule was written in, shown beside its words: ``cron 30 2 * * *``,
    ``RRULE FREQ=... from <start>``; None for a calendar or interval rule (its words say
    all of it)."""
    if "cron" in recurrence or "rrule" in recurrence:
        return rule_text(recurrence)
    return None


def rule_text(recurrence: dict[str, Any]) -> str:
    """A schedule's rule as one line (``cron 30 2 * * *``, ``every 15 minutes``,
    ``daily at 09:00, 18:00``), without its zone (shown beside it)."""
    if "cron" in recurrence:
        return f"cron {recurrence['cron']}"
    if "rrule" in recurrence:
        return f"RRULE {recurrence['rrule']} from {recurrence.get('start', '?')}"
    if "interval" in recurrence:
        ((unit, amount),) = recurrence["interval"].items()
        return f"every {amount} {unit if amount != 1 else unit.rstrip('s')}"
    cal = recurrence.get("calendar") or {}
    parts = [cal.get("frequency", "")]
    if cal.get("interval", 1) != 1:
        parts.append(f"(every {cal['interval']})")
    if cal.get("weekdays"):
        parts.append("on " + ", ".join(cal["weekdays"]))
    if cal.get("month_day") == "last":
        parts.append("on the last day")
    elif cal.get("month_day"):
        parts.append(f"on day {cal['month_day']}")
    if cal.get("nth_weekday"):
        n, day = cal["nth_weekday"]
        parts.append(f"on the {'last' if n == -1 else f'#{n}'} {day}")
    if cal.get("month"):
        parts.append(f"in month {cal['month']}")
    parts.append("at " + ", ".join(cal.get("times", [])))
    return " ".join(parts)


#: The list a page belongs to, by its path's first segment after ``/console``: where an
#: error page leads back to (the path, its words).
_WAYS_BACK = {"deliveries": ("/deliveries", "Back to the deliveries"),
              "mail-suppressions": ("/deliveries", "Back to the deliveries"),
              "snapshots": ("/snapshots", "Back to the snapshots"), "reports": ("/snapshots", "Back to the snapshots"),
              "notices": ("/notices", "Back to the notices"), "open": ("/notices", "Back to the notices"),
              "operations": ("/operations", "Back to operations"), "closures": ("/closures", "Back to the closures"),
              "ownerless": ("/ownerless", "Back to the ownerless schedules"),
              "posting-jobs": ("/posting-jobs", "Back to the failed posting jobs")}


#: The console pages a sign-in never returns to (the sign-in's own).
_NOT_NEXT = (f"{PREFIX}/sign-in", f"{PREFIX}/callback", f"{PREFIX}/sign-out", f"{PREFIX}/signed-out")


def next_page(value: str | None) -> str | None:
    """``value`` when it is a console page to return to after signing in: a path under
    ``/console/`` with an optional query (same origin only: no scheme, no host, no ``//``
    or backslash, no control character or white space, at most 2,000 characters, not a
    sign-in page); else None."""
    if not value or len(value) > 2000 or not value.startswith(PREFIX + "/") or "\\" in value:
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value) or "//" in value.split("?", 1)[0]:
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or parts.fragment or parts.path.startswith(_NOT_NEXT):
        return None
    return value


def way_back(path: str) -> tuple[str, str]:
    """Where an error page on ``path`` (a console path, ``/console/deliveries/...``) leads
    back to: ``(path after /console, words)``, the list the page belongs to; the schedules
    for any other."""
    section = path.removeprefix(PREFIX).lstrip("/").split("/", 1)[0]
    return _WAYS_BACK.get(section, ("/schedules", "Back to the schedules"))


def _changed_fields(detail: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A history event's changed fields (``{"changes": {field: {"from", "to"}}}``) as
    ``[{"field", "from", "to"}]``, sorted by field; empty for any other detail."""
    changes = (detail or {}).get("changes") if isinstance(detail, dict) else None
    if not isinstance(changes, dict):
        return []
    return [{"field": name, "from": (change or {}).get("from") if isinstance(change, dict) else None,
             "to": (change or {}).get("to") if isinstance(change, dict) else change}
            for name, change in sorted(changes.items())]


def _templates() -> Environment:
    env = Environment(loader=PackageLoader("timekeeper.console", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["urlquote"] = lambda value: quote(str(value), safe="")
    env.filters["term"] = glossary.term_html
    env.filters["words"] = glossary.words
    return env


def create_console(resolve_api: Callable[[dict[str, Any], Any], dict[str, Any]],
                   settings: ConsoleSettings) -> APIGatewayRestResolver:
    """Build the console's resolver: its pages call the API through ``resolve_api(event,
    context)`` (the API resolver of the same execution environment) with the signed-in
    person's claims. Raises ``ValueError`` for a session key shorter than 32 characters."""
    app = APIGatewayRestResolver()
    sessions = Sessions(settings.session_key, settings.older_session_keys)
    flows = FlowCookies(sessions.keys)
    env = _templates()
    # What the browser's addresses start with (the stage before /console when deployed).
    public = settings.base_path.rstrip("/") + PREFIX
    security_headers = {**_SECURITY_HEADERS, **({"Strict-Transport-Security": STRICT_TRANSPORT_SECURITY}
                                                if settings.secure_cookies else {})}

    def unread_count(session: Session) -> int | None:
        """The person's unread notices (one API call), or None when the API does not say."""
        reply = api(session).call("GET", "/notices", query={"unread": "true", "limit": "1"})
        body = reply.body if reply.status == 200 and isinstance(reply.body, dict) else {}
        return body.get("unread") if isinstance(body.get("unread"), int) else None

    def page(template: str, http_status: int = 200, *, session: Session | None = None, **values: Any) -> Response:
        unread = values.pop("unread", None)
        if session is not None and unread is None:
            unread = unread_count(session)
        html = env.get_template(template).render(
            session=session, csrf=sessions.csrf_token(session) if session else "", prefix=public, unread=unread,
            **values)
        return Response(status_code=int(http_status), content_type="text/html; charset=utf-8", body=html,
                        headers={**security_headers, "Cache-Control": "no-store"})

    def redirect(location: str, *, cookie: str | None = None, cookies: tuple[str, ...] = (),
                 external: bool = False) -> Response:
        """A 303 to ``location`` (a console path, given from ``/console``; an ``external``
        address as it is) setting ``cookie`` and ``cookies``."""
        if not external and location.startswith(PREFIX):
            location = public + location[len(PREFIX):]
        headers = {**security_headers, "Location": location, "Cache-Control": "no-store"}
        response = Response(status_code=HTTPStatus.SEE_OTHER, content_type="text/plain", body="",
                            headers=headers)
        for value in (*([cookie] if cookie is not None else []), *cookies):
            response.cookies.append(value)
        return response

    def cookie_header(value: str, *, max_age: int, name: str = SESSION_COOKIE) -> str:
        parts = [f"{name}={value}", f"Path={public}", f"Max-Age={max_age}", "HttpOnly", "SameSite=Lax"]
        if settings.secure_cookies:
            parts.append("Secure")
        return "; ".join(parts)

    def cookie(name: str) -> str | None:
        jar = SimpleCookie()
        try:
            jar.load(app.current_event.headers.get("cookie") or "")
        except Exception:  # noqa: BLE001 - a malformed Cookie header holds no cookie
            return None
        morsel = jar.get(name)
        return morsel.value if morsel else None

    def current_session() -> Session | None:
        """The request's session: its cookie's, unless the server signed it out (the API's
        ``GET /sessions/{id}``, seen by every execution environment). Raises
        :class:`SessionUnknown` when the API cannot say."""
        session = sessions.read(cookie(SESSION_COOKIE))
        if session is None:
            return None
        reply = api(session).call("GET", f"/sessions/{quote(session.sid, safe='')}")
        if reply.status == 200 and isinstance(reply.body, dict):
            return session if reply.body.get("revoked_at") is None else None
        if reply.status in (401, 422):
            return None
        raise SessionUnknown(reply)

    @app.exception_handler(SessionUnknown)
    def session_unknown(error: SessionUnknown) -> Response:
        body = error.reply.body if isinstance(error.reply.body, dict) else {}
        status = error.reply.status if 400 <= error.reply.status < 600 else HTTPStatus.BAD_GATEWAY
        return page("error.html", status, title="Not available", code=body.get("code"),
                    message=body.get("message") or "Your session could not be checked. Try again in a moment.")

    def form() -> dict[str, str]:
        body = app.current_event.body or ""
        if app.current_event.is_base64_encoded:
            try:
                body = base64.b64decode(body).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return {}
        try:
            return {k: v[0] for k, v in parse_qs(body, max_num_fields=50).items()}
        except ValueError:  # more fields than any form has: no form of this console
            return {}

    def requested_page() -> str:
        """The page asked for: its console path and query string, as the browser sent them."""
        event = app.current_event
        query = event.multi_value_query_string_parameters or {
            k: [v] for k, v in (event.query_string_parameters or {}).items()}
        return (event.path or "") + (f"?{urlencode(query, doseq=True)}" if query else "")

    def api(session: Session) -> ApiClient:
        """The API as ``session``'s person (:class:`ApiClient` gives the console's own
        request back to ``app.current_event`` after each call)."""
        return ApiClient(resolve_api, session.claims(), app.lambda_context)

    def signed_in(handler: Callable[..., Response]) -> Callable[..., Response]:
        """A page for a signed-in person (others are sent to sign in)."""

        def wrapped(*args: Any, **kwargs: Any) -> Response:
            session = current_session()
            if session is None:
                asked = next_page(requested_page())
                return redirect(f"{PREFIX}/sign-in" + (f"?{urlencode({'next': asked})}" if asked else ""))
            return handler(session, *args, **kwargs)

        return wrapped

    def checked_post(handler: Callable[..., Response]) -> Callable[..., Response]:
        """A state-changing request: a session and its CSRF token first."""

        def wrapped(*args: Any, **kwargs: Any) -> Response:
            session = current_session()
            if session is None:
                return redirect(f"{PREFIX}/sign-in")
            fields = form()
            if not sessions.csrf_valid(session, fields.get("csrf")):
                return page("error.html", HTTPStatus.FORBIDDEN, session=session, title="Refused",
                            message="This form has expired or did not come from this console. Reload the page "
                                    "and try again.")
            return handler(session, fields, *args, **kwargs)

        return wrapped

    def api_error(session: Session, reply: ApiReply) -> Response:
        body = reply.body if isinstance(reply.body, dict) else {}
        status = reply.status if 400 <= reply.status < 600 else 502
        title = {404: "Not found", 403: "Not allowed", 401: "Signed out"}.get(status, "Refused")
        return page("error.html", status, session=session, title=title,
                    message=body.get("message") or "The request was refused.", code=body.get("code"),
                    back=way_back(app.current_event.path or ""))

    @app.get("/")
    def home() -> Response:
        return redirect(f"{PREFIX}/schedules")

    @app.get(FAVICON_PATH)
    def favicon() -> Response:
        # The icon is public (no session): a permanent redirect to the static file.
        return Response(status_code=HTTPStatus.MOVED_PERMANENTLY, content_type="text/plain", body="",
                        headers={**security_headers, "Location": f"{public}/static/favicon.svg",
                                 "Cache-Control": "public, max-age=86400"})

    @app.get(PREFIX)
    def console_root() -> Response:
        return redirect(f"{PREFIX}/schedules")

    def provider() -> IdentityProvider | None:
        """The deployment's identity provider (None: the development sign-in or none).
        Raises :class:`SignInRefused` when it cannot be reached."""
        if settings.dev_sign_in or settings.identity_provider is None:
            return None
        return settings.identity_provider()

    def sign_in_refused(reason: str, status: int = HTTPStatus.FORBIDDEN) -> Response:
        logger.info("console sign-in refused", extra={"reason": reason})
        return page("sign_in.html", status, dev=False, samples=(), roles=DEV_ROLES, problem=f"Sign-in refused: "
                    f"{reason}.", retry=True)

    @app.get(f"{PREFIX}/sign-in")
    def sign_in_form() -> Response:
        try:
            issuer = provider()
        except SignInRefused as refused:
            return sign_in_refused(refused.reason, HTTPStatus.BAD_GATEWAY)
        asked = next_page((app.current_event.query_string_parameters or {}).get("next"))
        if issuer is None:
            return page("sign_in.html", dev=settings.dev_sign_in, samples=settings.samples, roles=DEV_ROLES,
                        next=asked)
        flow = new_flow(asked or "")
        return redirect(authorization_url(issuer, flow), external=True,
                        cookie=cookie_header(flows.issue(flow), max_age=FLOW_MAX_AGE_S, name=FLOW_COOKIE))

    def session_of(identity: Identity) -> Session:
        """A new session for a verified ``identity``. Raises :class:`SignInRefused` when its
        workspace is not a workspace id (a UUID) or its user id is one the API refuses
        (a NUL, more than 200 characters)."""
        try:
            workspace = str(uuid.UUID(identity.workspace_id))
        except ValueError:
            raise SignInRefused("the ID token's workspace claim is not a workspace id") from None
        if "\x00" in identity.user_id or len(identity.user_id) > 200:
            raise SignInRefused("the ID token's user claim is not a user id")
        return Session(user_id=identity.user_id, workspace_id=workspace, roles=identity.roles)

    @app.get(f"{PREFIX}/callback")
    def callback() -> Response:
        params = app.current_event.query_string_parameters or {}
        try:
            issuer = provider()
            if issuer is None:
                return page("error.html", HTTPStatus.NOT_FOUND, title="Not found",
                            message="This console has no identity provider.")
            flow = flows.read(cookie(FLOW_COOKIE))
            code = check_callback(flow, params)
            assert flow is not None  # check_callback refuses a callback without its flow
            session = session_of(finish(issuer, flow, code))
        except SignInRefused as refused:
            response = sign_in_refused(refused.reason)
            response.cookies.append(cookie_header("", max_age=0, name=FLOW_COOKIE))
            return response
        return redirect(next_page(flow.next) or f"{PREFIX}/schedules", cookies=(
            cookie_header(sessions.issue(session), max_age=SESSION_MAX_AGE_S),
            cookie_header("", max_age=0, name=FLOW_COOKIE)))

    @app.get(f"{PREFIX}/signed-out")
    def signed_out() -> Response:
        return page("sign_in.html", dev=False, samples=(), roles=DEV_ROLES, signed_out=True, retry=True)

    @app.post(f"{PREFIX}/sign-in")
    def sign_in() -> Response:
        if not settings.dev_sign_in:
            return page("error.html", HTTPStatus.NOT_FOUND, title="Not found",
                        message="Sign in through your identity provider.")
        fields = form()
        user, workspace = fields.get("user_id", "").strip(), fields.get("workspace_id", "").strip()
        roles = ",".join(r for r in DEV_ROLES if fields.get(f"role:{r}"))
        try:
            workspace = str(uuid.UUID(workspace))
        except ValueError:
            workspace = ""
        asked = next_page(fields.get("next"))
        if not user or "\x00" in user or len(user) > 200 or not workspace:
            return page("sign_in.html", HTTPStatus.UNPROCESSABLE_ENTITY, dev=True, samples=settings.samples,
                        roles=DEV_ROLES, problem="Give a user id and a workspace UUID.", next=asked)
        session = Session(user_id=user, workspace_id=workspace, roles=roles or "schedules:read")
        return redirect(asked or f"{PREFIX}/schedules", cookie=cookie_header(sessions.issue(session),
                                                                             max_age=SESSION_MAX_AGE_S))

    @app.post(f"{PREFIX}/sign-out")
    @checked_post
    def sign_out(session: Session, fields: dict[str, str]) -> Response:
        cleared = cookie_header("", max_age=0)
        # The session ends on the server first: a copy of the cookie is refused everywhere.
        revoked = api(session).call("POST", f"/sessions/{quote(session.sid, safe='')}/revocation")
        if revoked.status != 200:
            response = api_error(session, revoked)
            response.cookies.append(cleared)
            return response
        if settings.dev_sign_in:
            return redirect(f"{PREFIX}/sign-in", cookie=cleared)
        try:
            issuer = provider()
        except SignInRefused:
            issuer = None  # the session is cleared all the same
        if issuer is not None and issuer.logout_url:
            return redirect(issuer.logout_url, cookie=cleared, external=True)
        return redirect(f"{PREFIX}/signed-out", cookie=cleared)

    @app.get(f"{PREFIX}/schedules")
    @signed_in
    def schedules(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        status = params.get("status") if params.get("status") in ("active", "paused") else None
        reply = api(session).call("GET", "/schedules", query={"status": status, "cursor": params.get("cursor"),
                                                              "limit": str(PAGE_SIZE)})
        if reply.status != 200:
            return api_error(session, reply)
        zone = zone_of(reply.body)
        rows = [{**item, "next": when(item.get("next_due_at"), zone),
                 "last": when(item.get("last_run_at"), zone), "rule": rule_text(item["recurrence"]),
                 "code": rule_code(item["recurrence"])}
                for item in reply.body["items"]]
        next_page = (f"{PREFIX}/schedules?" + urlencode({k: v for k, v in {
            "status": status, "cursor": reply.body.get("next_cursor")}.items() if v})
            if reply.body.get("next_cursor") else None)
        return page("schedules.html", session=session, rows=rows, status=status, next_page=next_page, zone=zone)

    zones: list[str] = []

    def rule_zones(session: Session) -> list[str]:
        """The zones a rule may name, as the API's document lists them (read once per
        execution environment; empty while the API does not say)."""
        if not zones:
            reply = api(session).call("GET", "/openapi.json")
            zones.extend(zone_enum(reply.body) if reply.status == 200 else [])
        return zones

    def schedule_page(session: Session, schedule_id: str, *, done: str | None = None, editor: str | None = None,
                      form: rule_form.RuleForm | None = None, submitted: str | None = None,
                      preview: dict[str, Any] | None = None, problem: dict[str, Any] | None = None,
                      http_status: int = 200) -> Response:
        """The schedule's page: its rule in words, the next ten occurrences, runs and history,
        and the rule editors: the structured ``form`` (the saved rule's when not given) and
        the JSON ``editor`` (the text typed), with the ``submitted`` one's ``preview`` or
        ``problem``."""
        reply = api(session).call("GET", f"/schedules/{schedule_id}", query={"upcoming": str(UPCOMING)})
        if reply.status != 200:
            return api_error(session, reply)
        detail = reply.body
        zone = detail["schedule"]["timezone"]
        # Instants in the workspace's zone, with UTC beside; occurrences in the rule's own zone.
        shown_zone = zone_of(detail)
        occurrences = occurrence_rows(detail["next_occurrences"])
        runs = [{**r, "queued": when(r["queued_at"], shown_zone), "finished": when(r.get("finished_at"), shown_zone),
                 "local": r["occurrence_local"].replace("T", " ")[:16],
                 "at": when(r.get("occurrence_at"), shown_zone)}
                for r in detail["history"]["runs"]]
        events = [{**e, "when": when(e["at"], shown_zone)} for e in detail["history"]["events"]]
        if editor is None:
            editor = json.dumps(detail["schedule"]["recurrence"], indent=2, sort_keys=True)
        saved_form = rule_form.form_of(detail["schedule"]["recurrence"], zone)
        if form is None:
            form = saved_form
        if preview is not None:
            preview = {**preview, "rows": occurrence_rows(preview["next_occurrences"]),
                       "json": json.dumps(preview.get("recurrence"), indent=2, sort_keys=True)}
        may_edit = session.has("schedules:write", "schedules:admin")
        zone_choices = rule_zones(session) if may_edit else []
        if form.timezone not in zone_choices:
            zone_choices = sorted({*zone_choices, form.timezone})
        return page("schedule.html", http_status, session=session, s=detail["schedule"], rule=rule_text(
            detail["schedule"]["recurrence"]), description=detail.get("description"), occurrences=occurrences,
            code=rule_code(detail["schedule"]["recurrence"]),
            runs=runs, events=events, done=done, run_key=str(uuid.uuid4()), editor=editor, preview=preview,
            notify_choices=NOTIFY_CHOICES,
            zone=shown_zone,
            problem=problem, may_edit=may_edit, form=form, unsupported=saved_form.unsupported,
            submitted=submitted, zones=zone_choices, rf=rule_form,
            problem_control=rule_form.control_for((problem or {}).get("field")) if submitted == "form" else None)

    @app.get(f"{PREFIX}/schedules/<schedule_id>")
    @signed_in
    def schedule(session: Session, schedule_id: str) -> Response:
        params = app.current_event.query_string_parameters or {}
        return schedule_page(session, schedule_id, done=_DONE.get(params.get("done", "")))

    @app.post(f"{PREFIX}/schedules/<schedule_id>/rule")
    @checked_post
    def edit_rule(session: Session, fields: dict[str, str], schedule_id: str) -> Response:
        """The rule editors: the structured form (``editor=form``: the rule its fields
        compose) or the JSON editor (the rule typed); "Preview" shows the rule's words and
        next occurrences (``POST /rules/preview``) on the page, "Save" changes it
        (``PATCH /schedules/{id}``)."""
        text: str | None = None
        form: rule_form.RuleForm | None = None
        if fields.get("editor") == "form":
            submitted = "form"
            form = rule_form.read_form(fields)
            try:
                recurrence = rule_form.compose(form)
            except rule_form.FormProblem as refused:
                return schedule_page(session, schedule_id, form=form, submitted=submitted,
                                     http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                                     problem={"field": refused.field, "message": refused.message})
        else:
            submitted = "json"
            text = fields.get("recurrence", "")[:20_000]
            try:
                recurrence = json_input.loads(text)
            except json.JSONDecodeError as refused:
                reason = f" ({refused.msg})" if refused.msg in json_input.REASONS else ""
                return schedule_page(session, schedule_id, editor=text, submitted=submitted,
                                     http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                                     problem={"field": "recurrence", "message": f"is not valid JSON{reason}"})
        client = api(session)
        if fields.get("intent") == "save":
            reply = client.call("PATCH", f"/schedules/{schedule_id}", body={"recurrence": recurrence})
            if reply.status == 200:
                return redirect(f"{PREFIX}/schedules/{quote(schedule_id, safe='')}?done=update")
        else:
            reply = client.call("POST", "/rules/preview", body={"recurrence": recurrence, "count": UPCOMING})
            if reply.status == 200:
                return schedule_page(session, schedule_id, editor=text, form=form, submitted=submitted,
                                     preview=reply.body)
        if reply.status == 422 and isinstance(reply.body, dict):
            return schedule_page(session, schedule_id, editor=text, form=form, submitted=submitted,
                                 http_status=HTTPStatus.UNPROCESSABLE_ENTITY,
                                 problem={"field": reply.body.get("field"), "message": reply.body.get("message")})
        return api_error(session, reply)

    @app.post(f"{PREFIX}/schedules/<schedule_id>/notices")
    @checked_post
    def choose_failure_notices(session: Session, fields: dict[str, str], schedule_id: str) -> Response:
        """Which failures the schedule's owner is told of (``notify_on``, one of
        :data:`NOTIFY_CHOICES`): ``PATCH /schedules/{id}``, then back to the page."""
        choice = fields.get("notify_on", "")
        if choice not in NOTIFY_CHOICES:
            return page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, session=session, title="Refused",
                        message="No such choice of failure notices.")
        reply = api(session).call("PATCH", f"/schedules/{schedule_id}", body={"notify_on": choice})
        if reply.status != 200:
            return api_error(session, reply)
        return redirect(f"{PREFIX}/schedules/{quote(schedule_id, safe='')}?done=update")

    @app.post(f"{PREFIX}/<kind>/<schedule_id>/<action>")
    @checked_post
    def schedule_action(session: Session, fields: dict[str, str], kind: str, schedule_id: str,
                        action: str) -> Response:
        if action not in _ACTIONS or kind not in _KINDS:
            return page("error.html", HTTPStatus.NOT_FOUND, session=session, title="Not found",
                        message="No such action.")
        headers = {"Idempotency-Key": fields["key"][:200]} if action == "run" and fields.get("key") else None
        reply = api(session).call("POST", f"{_KINDS[kind]}/{schedule_id}/{action}", headers=headers)
        if reply.status >= 300:
            return api_error(session, reply)
        return redirect(f"{PREFIX}/{kind}/{quote(schedule_id, safe='')}?done={action}")

    @app.get(f"{PREFIX}/deliveries")
    @signed_in
    def deliveries(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        reply = api(session).call("GET", "/query-schedules", query={"cursor": params.get("cursor"),
                                                                    "limit": str(PAGE_SIZE)})
        if reply.status != 200:
            return api_error(session, reply)
        zone = reply.body.get("timezone") or "UTC"
        rows = [{**item, "next": when(item.get("next_due_at"), zone)} for item in reply.body["items"]]
        cursor = reply.body.get("next_cursor")
        return page("deliveries.html", session=session, rows=rows,
                    next_page=f"{PREFIX}/deliveries?" + urlencode({"cursor": cursor}) if cursor else None)

    @app.get(f"{PREFIX}/deliveries/<schedule_id>")
    @signed_in
    def delivery(session: Session, schedule_id: str) -> Response:
        params = app.current_event.query_string_parameters or {}
        done = _ACTIONS.get(params.get("done", ""))
        client = api(session)
        reply = client.call("GET", f"/query-schedules/{schedule_id}")
        if reply.status != 200:
            return api_error(session, reply)
        history = client.call("GET", f"/query-schedules/{schedule_id}/runs", query={"cursor": params.get("cursor")})
        if history.status != 200:
            return api_error(session, history)
        zone = zone_of(reply.body)
        runs = [{**run, "when": when(run.get("occurrence_at"), zone), "finished": when(run.get("finished_at"), zone),
                 "deliveries": [{**d, "expires": when(d.get("link_expires_at"), zone)} for d in run["deliveries"]]}
                for run in history.body["items"]]
        cursor = history.body.get("next_cursor")
        trail = client.call("GET", f"/query-schedules/{schedule_id}/history")
        changes = [{**e, "when": when(e["at"], zone), "fields": _changed_fields(e.get("detail"))}
                   for e in trail.body["items"]] if trail.status == 200 else None
        return page("delivery.html", session=session, s={**reply.body, "next": when(reply.body.get("next_due_at"),
                                                                                     zone)},
                    zone=zone, runs=runs, done=done, changes=changes, run_key=str(uuid.uuid4()),
                    inv=invitation_of(session, schedule_id)[1],
                    next_page=f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}?" + urlencode({"cursor": cursor})
                    if cursor else None)

    def message_preview(session: Session, schedule_id: str) -> tuple[ApiReply, ApiReply | None]:
        """The schedule and the preview of the message its ``user_id`` parameter (default:
        its first recipient) would receive (``GET /query-schedules/{id}/message-preview``)."""
        client = api(session)
        schedule = client.call("GET", f"/query-schedules/{schedule_id}")
        if schedule.status != 200:
            return schedule, None
        user_id = (app.current_event.query_string_parameters or {}).get("user_id") or None
        return schedule, client.call("GET", f"/query-schedules/{schedule_id}/message-preview",
                                     query={"user_id": user_id})

    @app.get(f"{PREFIX}/deliveries/<schedule_id>/preview")
    @signed_in
    def delivery_preview(session: Session, schedule_id: str) -> Response:
        schedule, preview = message_preview(session, schedule_id)
        if preview is None or preview.status != 200:
            return api_error(session, preview or schedule)
        zone = zone_of(preview.body)
        return page("preview.html", session=session, s=schedule.body, p=preview.body, zone=zone,
                    expires=when(preview.body.get("link_expires_at"), zone),
                    frame=f"{public}/deliveries/{quote(schedule_id, safe='')}/preview/message?"
                    + urlencode({"user_id": preview.body["user_id"]}))

    @app.get(f"{PREFIX}/deliveries/<schedule_id>/preview/message")
    @signed_in
    def delivery_preview_message(session: Session, schedule_id: str) -> Response:
        """The preview's HTML part alone, for the preview page's sandboxed frame, under a
        policy of its own (:func:`message_preview_policy`)."""
        schedule, preview = message_preview(session, schedule_id)
        if preview is None or preview.status != 200:
            return api_error(session, preview or schedule)
        html = preview.body["html"]
        return Response(status_code=200, content_type="text/html; charset=utf-8", body=html,
                        headers={**security_headers, "Content-Security-Policy": message_preview_policy(html),
                                 "X-Frame-Options": "SAMEORIGIN", "Cache-Control": "no-store"})

    def opt_outs_page(session: Session, schedule_id: str, *, problem: str | None = None, done: str | None = None,
                      status_code: int = 200) -> Response:
        """A query schedule's opt-outs (``GET /query-schedules/{id}/opt-outs``): who opted
        out, when (UTC) and whether they were invited back, with the owner's Invite back."""
        client = api(session)
        reply = client.call("GET", f"/query-schedules/{schedule_id}")
        if reply.status != 200:
            return api_error(session, reply)
        found = client.call("GET", f"/query-schedules/{schedule_id}/opt-outs")
        if found.status != 200:
            return api_error(session, found)
        zone = zone_of(found.body)
        items = [{**o, "opted_out": when(o["opted_out_at"], zone), "invited": when(o.get("resubscribe_invited_at"),
                                                                                   zone)}
                 for o in found.body["items"]]
        return page("opt_outs.html", status_code, session=session, s=reply.body, items=items, problem=problem,
                    zone=zone, done=done, may_invite=session.has("queries:write", "queries:admin"))

    @app.get(f"{PREFIX}/deliveries/<schedule_id>/opt-outs")
    @signed_in
    def opt_outs(session: Session, schedule_id: str) -> Response:
        params = app.current_event.query_string_parameters or {}
        done = (f"{params['to']} is invited back: they receive the messages again once they accept."
                if params.get("done") == "invited" and params.get("to") else None)
        return opt_outs_page(session, schedule_id, done=done)

    @app.post(f"{PREFIX}/deliveries/<schedule_id>/opt-outs/invite")
    @checked_post
    def invite_back(session: Session, fields: dict[str, str], schedule_id: str) -> Response:
        user_id = fields.get("user_id", "").strip()
        # The API's path takes the user id as it is (its router does not decode a path
        # segment): one a segment cannot hold is no recipient of an opt-out it can name.
        if not user_id or any(c in user_id for c in "/?#\x00"):
            return opt_outs_page(session, schedule_id, problem="Refused: no such recipient (user_id).",
                                 status_code=HTTPStatus.UNPROCESSABLE_ENTITY)
        reply = api(session).call("POST", f"/query-schedules/{schedule_id}/opt-outs/{user_id}/invitation")
        if reply.status == 200:
            return redirect(f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}/opt-outs?"
                            + urlencode({"done": "invited", "to": user_id}))
        body = reply.body if isinstance(reply.body, dict) else {}
        if reply.status == 404 and body.get("field") != "user_id":
            return api_error(session, reply)  # the schedule itself: not found on every page
        text = f"Refused: {body.get('message') or 'the request was refused'}"
        return opt_outs_page(session, schedule_id, problem=text,
                             status_code=reply.status if 400 <= reply.status < 500 else 502)

    def invitation_of(session: Session, schedule_id: str) -> tuple[ApiReply, dict[str, Any] | None]:
        """The person's own standing with a delivery's messages (``GET
        /query-schedules/{id}/subscription``) for :file:`_invitation.html`, or None."""
        reply = api(session).call("GET", f"/query-schedules/{quote(schedule_id, safe='')}/subscription")
        if reply.status != 200 or not isinstance(reply.body, dict):
            return reply, None
        zone = zone_of(reply.body)
        return reply, {**reply.body, "opted": when(reply.body.get("opted_out_at"), zone),
                       "invited": when(reply.body.get("invited_at"), zone)}

    def invitation_page(session: Session, schedule_id: str, *, done: str | None = None, problem: str | None = None,
                        status_code: int = 200) -> Response:
        reply, inv = invitation_of(session, schedule_id)
        if inv is None:
            return api_error(session, reply)
        return page("invitation.html", status_code, session=session, inv=inv, done=done, problem=problem)

    @app.get(f"{PREFIX}/deliveries/<schedule_id>/invitation")
    @signed_in
    def invitation(session: Session, schedule_id: str) -> Response:
        """Where an invitation-back notice leads: the person's standing with the delivery's
        messages and, once its owner invited them back, Accept."""
        params = app.current_event.query_string_parameters or {}
        done = "You receive its messages again." if params.get("done") == "accepted" else None
        return invitation_page(session, schedule_id, done=done)

    @app.post(f"{PREFIX}/deliveries/<schedule_id>/invitation/accept")
    @checked_post
    def accept_invitation(session: Session, fields: dict[str, str], schedule_id: str) -> Response:
        reply = api(session).call("POST", f"/query-schedules/{quote(schedule_id, safe='')}/subscription")
        if reply.status == 200:
            return redirect(f"{PREFIX}/deliveries/{quote(schedule_id, safe='')}/invitation?done=accepted")
        body = reply.body if isinstance(reply.body, dict) else {}
        if 400 <= reply.status < 500:  # (a schedule that is not found is not found on the page either)
            return invitation_page(session, schedule_id, status_code=reply.status,
                                   problem=f"Refused: {body.get('message') or 'the request was refused'}")
        return api_error(session, reply)

    def closures_page(session: Session, *, problem: str | None = None, done: str | None = None,
                      typed: dict[str, str] | None = None, status_code: int = 200) -> Response:
        """The workspace's closures (``GET /closures``: closed local dates, by date), with
        the add and remove forms for ``schedules:admin``; ``typed`` keeps a refused form's text."""
        reply = api(session).call("GET", "/closures")
        if reply.status != 200:
            return api_error(session, reply)
        zone = zone_of(reply.body)
        items = [{**c, "created": when(c["created_at"], zone)} for c in reply.body["items"]]
        return page("closures.html", status_code, session=session, items=items, problem=problem, done=done, zone=zone,
                    typed=typed or {}, may_change=session.has("schedules:admin"))

    def closure_refused(session: Session, reply: ApiReply, typed: dict[str, str] | None = None) -> Response:
        body = reply.body if isinstance(reply.body, dict) else {}
        field_name = body.get("field")
        text = f"Refused: {body.get('message') or 'the request was refused'}" + (f" ({field_name})"
                                                                                 if field_name else "")
        return closures_page(session, problem=text, typed=typed,
                             status_code=reply.status if 400 <= reply.status < 500 else 502)

    @app.get(f"{PREFIX}/closures")
    @signed_in
    def closures(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        day, count = params.get("date", ""), params.get("recomputed", "")
        done = None
        if params.get("done") in ("added", "kept", "removed") and DATE_TEXT.fullmatch(day):
            done = {"added": f"{day} is closed", "kept": f"{day} was already closed: its first reason is kept",
                    "removed": f"{day} is open again"}[params["done"]]
            if count.isdigit() and params["done"] != "kept":
                done += f"; {count} business-day schedule{'s' if count != '1' else ''} recomputed."
            else:
                done += "."
        return closures_page(session, done=done)

    @app.post(f"{PREFIX}/closures/add")
    @checked_post
    def closure_add(session: Session, fields: dict[str, str]) -> Response:
        typed = {"date": fields.get("date", "").strip(), "reason": fields.get("reason", "").strip()}
        reply = api(session).call("POST", "/closures", body=typed)
        if reply.status in (200, 201):
            return redirect(f"{PREFIX}/closures?" + urlencode({
                "done": "added" if reply.body["changed"] else "kept", "date": reply.body["closure"]["date"],
                "recomputed": str(reply.body["schedules_recomputed"])}))
        return closure_refused(session, reply, typed)

    @app.post(f"{PREFIX}/closures/remove")
    @checked_post
    def closure_remove(session: Session, fields: dict[str, str]) -> Response:
        day = fields.get("date", "").strip()
        if not day:
            return closures_page(session, problem="Refused: no date named (date).",
                                 status_code=HTTPStatus.UNPROCESSABLE_ENTITY)
        reply = api(session).call("DELETE", f"/closures/{quote(day, safe='')}")
        if reply.status == 200:
            return redirect(f"{PREFIX}/closures?" + urlencode({
                "done": "removed", "date": reply.body["closure"]["date"],
                "recomputed": str(reply.body["schedules_recomputed"])}))
        return closure_refused(session, reply)

    @app.get(f"{PREFIX}/mail-suppressions")
    @signed_in
    def mail_suppressions(session: Session) -> Response:
        reply = api(session).call("GET", "/mail-suppressions")
        if reply.status != 200:
            return api_error(session, reply)
        zone = zone_of(reply.body)
        items = [{**s, "when": when(s["suppressed_at"], zone)} for s in reply.body["items"]]
        return page("mail_suppressions.html", session=session, items=items, zone=zone)

    def snapshot_readers(session: Session) -> set[tuple[str, str]] | None:
        """The snapshots (``(owner, type)``) the current version of one of the workspace's
        reports reads (its first 200 reports; each report's ``snapshot_sources``): where
        "Open a report over this month" leads somewhere. None when the API refuses the
        person the reports (e.g. their membership does not grant reading them)."""
        client = api(session)
        reply = client.call("GET", "/reports", query={"limit": "200"})
        if reply.status != 200 or not isinstance(reply.body, dict):
            return None
        read: set[tuple[str, str]] = set()
        for item in reply.body["items"]:
            detail = client.call("GET", f"/reports/{quote(str(item['id']), safe='')}")
            if detail.status == 200 and isinstance(detail.body, dict):
                read.update((s["owner"], s["snapshot_type"]) for s in detail.body.get("snapshot_sources") or [] if s)
        return read

    def periods_page(session: Session, *, workspace: str | None = None, problem: str | None = None,
                     done: str | None = None, status_code: int = 200) -> Response:
        """A workspace's periods: the person's own, or for staff the one ``workspace``
        names (else the page's ``workspace`` parameter). A status filter (``status``, one
        of :data:`PERIOD_FILTERS`) reads on through the API's pages until a page has
        periods to show or the listing ends; "More periods" is offered only when the API
        has more; an unknown filter is a 422 naming ``status``."""
        params = app.current_event.query_string_parameters or {}
        if workspace is None:
            workspace = params.get("workspace") or ""
        workspace = workspace.strip() if session.staff else ""
        if workspace:
            try:
                workspace = str(uuid.UUID(workspace))
            except ValueError:
                return page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, session=session, title="Refused",
                            message="The workspace must be a workspace id, a UUID (workspace).",
                            back=("/snapshots", "Back to the snapshots"))
        only = params.get("status") or ""
        refused = bool(only) and only not in PERIOD_FILTERS
        if refused:
            problem, status_code, only = (f"Refused: there is no status “{only[:40]}” to show (status); choose one "
                                          "from the list."), HTTPStatus.UNPROCESSABLE_ENTITY, ""
        path = f"/snapshots/workspaces/{workspace}/periods" if workspace else "/snapshots/periods"
        client = api(session)
        cursor, later = params.get("cursor"), bool(params.get("cursor"))
        raw: list[dict[str, Any]] = []
        body: dict[str, Any] = {}
        for _ in range(PERIOD_READS if only else 1):
            reply = client.call("GET", path, query={"cursor": cursor, "limit": "100"})
            if reply.status != 200:
                return api_error(session, reply)
            body = reply.body
            found = [item for item in body["items"]
                     if not only or (item["overdue"] if only == "overdue" else item["status"] == only)]
            raw.extend(found)
            cursor = body.get("next_cursor")
            if found or not cursor:
                break
        if refused:
            raw, cursor = [], None
        zone = body.get("timezone") or "UTC"
        locale = body.get("locale") or "en_US"
        may_render = workspace in ("", session.workspace_id) and session.has("reports:read")
        readers = snapshot_readers(session) if may_render and any(i["status"] == "published" for i in raw) else set()
        if readers is None:  # the API refuses them the reports: no action to offer
            may_render, readers = False, set()
        items = [{**item, "published": when(item.get("published_at"), zone),
                  "basis_lines": glossary.basis_lines(item.get("basis"), locale),
                  "read_by_report": (item["owner"], item["snapshot_type"]) in readers,
                  "link": f"{PREFIX}/snapshots/periods/{quote(item['owner'], safe='')}/"
                          f"{quote(item['snapshot_type'], safe='')}/{quote(item['period'], safe='')}"
                          + (f"?{urlencode({'workspace': workspace})}" if workspace else "")}
                 for item in raw]
        # The enabled types as the API lists them: the staff request form's choices.
        types = [(t["owner"], t["snapshot_type"]) for t in body.get("types") or []]
        query = {k: v for k, v in {"workspace": workspace, "status": only, "cursor": cursor}.items() if v}
        first = f"{PREFIX}/snapshots?" + urlencode({k: v for k, v in query.items() if k != "cursor"})
        return page("snapshots.html", status_code, session=session, items=items, zone=zone,
                    workspace=body.get("workspace_id"), chosen_workspace=workspace, only=only, later=later,
                    problem=problem, done=done, types=types, first_page=first.rstrip("?"),
                    next_page=f"{PREFIX}/snapshots?" + urlencode(query) if cursor else None, refused=refused,
                    # Renders are of the person's own workspace's reports (the API decides).
                    may_render=may_render)

    @app.get(f"{PREFIX}/snapshots")
    @signed_in
    def snapshots(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        return periods_page(session, done="Your request was recorded; it waits for admission."
                            if params.get("done") == "requested" else None)

    @app.get(f"{PREFIX}/snapshots/periods/<owner>/<snapshot_type>/<period>")
    @signed_in
    def period_versions(session: Session, owner: str, snapshot_type: str, period: str) -> Response:
        """One period's versions, newest first, with their attempts and failure codes (in
        words beside the code): the person's own workspace, or for staff the one the
        ``workspace`` parameter names (``GET /snapshots/workspaces/{id}/periods/...``)."""
        if not MONTH_PATTERN.fullmatch(period):
            return page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, session=session, title="Refused",
                        message="The month must be written YYYY-MM.")
        params = app.current_event.query_string_parameters or {}
        workspace = (params.get("workspace") or "").strip() if session.staff else ""
        target = workspace or session.workspace_id
        reply = api(session).call("GET", "/snapshots/workspaces/" + "/".join(
            quote(part, safe="") for part in (target, "periods", owner, snapshot_type, period)))
        if reply.status != 200:
            return api_error(session, reply)
        zone = reply.body.get("timezone") or "UTC"
        versions = [{**v, "created": when(v["created_at"], zone), "published": when(v.get("published_at"), zone),
                     "why": glossary.words(v.get("failure_code"))}
                    for v in reply.body["versions"]]
        back = f"{PREFIX}/snapshots" + (f"?{urlencode({'workspace': workspace})}" if workspace else "")
        return page("period.html", session=session, p=reply.body, versions=versions, zone=zone, back=back)

    @app.post(f"{PREFIX}/snapshots/requests")
    @checked_post
    def snapshot_request(session: Session, fields: dict[str, str]) -> Response:
        body = {name: fields.get(name, "").strip() for name in
                ("owner", "snapshot_type", "workspace_id", "period", "mode", "reason")}
        if fields.get("type"):  # the form's choice of a registered type: "<owner>:<type>"
            body["owner"], _, body["snapshot_type"] = fields["type"].strip().partition(":")
        reply = api(session).call("POST", "/snapshots/runs", body=body)
        if reply.status in (200, 201):
            return redirect(f"{PREFIX}/snapshots?" + urlencode({"workspace": body["workspace_id"],
                                                                "done": "requested"}))
        message = reply.body.get("message") if isinstance(reply.body, dict) else None
        field_name = reply.body.get("field") if isinstance(reply.body, dict) else None
        text = f"Refused: {message or 'the request was refused'}" + (f" ({field_name})" if field_name else "")
        return periods_page(session, workspace=body["workspace_id"], problem=text,
                            status_code=reply.status if 400 <= reply.status < 500 else 502)

    def picker_page(session: Session, *, owner: str, snapshot_type: str, month: str, problem: str | None = None,
                    status_code: int = 200) -> Response:
        """The reports a month's snapshot feeds: the workspace's reports (``GET /reports``,
        one page of up to 200) whose current version has a section reading ``owner``'s
        ``snapshot_type`` (the report's ``snapshot_sources``), each with a form that renders
        it over ``month`` (``YYYY-MM``); ``problem`` is a refusal to show."""
        client = api(session)
        reply = client.call("GET", "/reports", query={"limit": "200"})
        if reply.status != 200:
            return api_error(session, reply)
        reports = []
        for item in reply.body["items"]:
            detail = client.call("GET", f"/reports/{item['id']}")
            if detail.status != 200:
                continue  # deleted meanwhile, or refused: not one the person may render
            sources = detail.body.get("snapshot_sources") or []
            if any(s and s["owner"] == owner and s["snapshot_type"] == snapshot_type for s in sources):
                reports.append({**item, "title": detail.body["definition"]["title"],
                                "sections": sum(1 for s in sources if s)})
        return page("period_picker.html", status_code, session=session, owner=owner, snapshot_type=snapshot_type,
                    month=month, reports=reports, problem=problem, more=bool(reply.body.get("next_cursor")),
                    render_key=str(uuid.uuid4()))

    @app.get(f"{PREFIX}/snapshots/reports")
    @signed_in
    def period_picker(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        if not MONTH_TEXT.fullmatch(params.get("month", "")):
            return page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, session=session, title="Refused",
                        message="The month must be a month YYYY-MM (month).", back=way_back("/snapshots"))
        return picker_page(session, owner=params.get("owner", "")[:100], month=params.get("month", "")[:20],
                           snapshot_type=params.get("snapshot_type", "")[:100])

    @app.post(f"{PREFIX}/snapshots/renders")
    @checked_post
    def period_render(session: Session, fields: dict[str, str]) -> Response:
        """Render the chosen report over the month (``POST /reports/{id}/renders`` with
        ``{"month"}`` and the form's Idempotency-Key: a repeated click is the same render),
        then its page; a refusal is shown on the picker with the API's reason."""
        report_id, month = fields.get("report_id", "").strip(), fields.get("month", "").strip()
        headers = {"Idempotency-Key": fields["key"][:200]} if fields.get("key") else None
        reply = api(session).call("POST", f"/reports/{quote(report_id, safe='')}/renders", body={"month": month},
                                  headers=headers)
        if reply.status == 202 and isinstance(reply.body, dict):
            return redirect(f"{PREFIX}/reports/{quote(report_id, safe='')}/renders/"
                            f"{quote(str(reply.body['id']), safe='')}")
        body = reply.body if isinstance(reply.body, dict) else {}
        text = f"Refused: {body.get('message') or 'the render was refused'}" + (
            f" ({body['field']})" if body.get("field") else "")
        return picker_page(session, owner=fields.get("owner", "")[:100], month=month[:20], problem=text,
                           snapshot_type=fields.get("snapshot_type", "")[:100],
                           status_code=reply.status if 400 <= reply.status < 500 else 502)

    @app.get(f"{PREFIX}/reports/<report_id>/renders/<render_id>")
    @signed_in
    def render_page(session: Session, report_id: str, render_id: str) -> Response:
        """A render: its state, the picked month, per snapshot section the version it showed
        (type, month, version, publication time, choice) and, once it succeeded, its
        download link (valid 60 s: the page is reloaded for a new one)."""
        client = api(session)
        reply = client.call("GET", f"/reports/{quote(report_id, safe='')}/renders/{quote(render_id, safe='')}")
        if reply.status != 200:
            return api_error(session, reply)
        render = reply.body
        zone = zone_of(render)
        report = client.call("GET", f"/reports/{quote(report_id, safe='')}")
        name = report.body.get("name") if report.status == 200 and isinstance(report.body, dict) else None
        basis = [None if b is None else {**b, "published": when(b["published_at"], zone)}
                 for b in render.get("snapshot_basis") or []]
        source = next((b for b in render.get("snapshot_basis") or [] if b), None)
        picker = (f"{public}/snapshots/reports?" + urlencode({"owner": source["owner"], "month": render["month"],
                                                              "snapshot_type": source["snapshot_type"]})
                  if source and render.get("month") else None)
        return page("render.html", session=session, render=render, name=name, zone=zone, basis=basis, picker=picker,
                    requested=when(render["requested_at"], zone), finished=when(render.get("finished_at"), zone),
                    expires=when(render.get("download_expires_at"), zone))

    def operations_page(session: Session, *, problem: str | None = None, done: str | None = None,
                        status_code: int = 200) -> Response:
        """Staff's view of every workspace: the API's operations overview."""
        reply = api(session).call("GET", "/operations/overview", query={"limit": "100"})
        if reply.status != 200:
            return api_error(session, reply)
        body = reply.body
        zone = zone_of(body)
        queues = [{**q, "age": _age(q["oldest_age_s"]) if q.get("oldest_age_s") is not None else None}
                  for q in body["dead_letter_queues"]]
        schedules = [{**s, "changed": when(s["updated_at"], zone)} for s in body["schedules"]]
        runs = [{**r, "queued": when(r["queued_at"], zone), "why_text": _STRANDED.get(r["why"], r["why"])}
                for r in body["stranded_runs"]]
        actions = [{**a, "when": when(a["at"], zone)} for a in body.get("recent_actions", [])]
        overdue = [{**p, "due": when(p["due_at"], zone_of(p)), "month": p["period"][:7],
                    "hours": f"{p['overdue_hours']:.0f}"} for p in body.get("overdue_periods", [])]
        return page("operations.html", status_code, session=session, as_of=when(body["as_of"], zone), zone=zone,
                    queues=queues, schedules=schedules, runs=runs, actions=actions, problem=problem, done=done,
                    overdue=overdue, overdue_total=body.get("overdue_periods_total", len(overdue)))

    def operations_action(session: Session, path: str, reason: str, done: str) -> Response:
        reply = api(session).call("POST", path, body={"reason": reason.strip()})
        if 200 <= reply.status < 300:
            return redirect(f"{PREFIX}/operations?" + urlencode({"done": done}))
        message = reply.body.get("message") if isinstance(reply.body, dict) else None
        return operations_page(session, problem=f"Refused: {message or 'the action was refused'}",
                               status_code=reply.status if 400 <= reply.status < 500 else 502)

    @app.get(f"{PREFIX}/operations")
    @signed_in
    def operations_overview(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        return operations_page(session, done=_OPERATIONS_DONE.get(params.get("done", "")))

    @app.post(f"{PREFIX}/operations/redrive")
    @checked_post
    def operations_redrive(session: Session, fields: dict[str, str]) -> Response:
        queue = fields.get("queue", "")
        return operations_action(session, f"/operations/dead-letter-queues/{quote(queue, safe='')}/redrive",
                                 fields.get("reason", ""), "redriven")

    @app.post(f"{PREFIX}/operations/resume")
    @checked_post
    def operations_resume(session: Session, fields: dict[str, str]) -> Response:
        workspace, schedule = (quote(fields.get(k, "").strip(), safe="") for k in ("workspace_id", "schedule_id"))
        return operations_action(session, f"/operations/workspaces/{workspace}/schedules/{schedule}/resume",
                                 fields.get("reason", ""), "resumed")

    @app.get(f"{PREFIX}/notices")
    @signed_in
    def notices_page(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        unread_only = params.get("show") == "unread"
        reply = api(session).call("GET", "/notices", query={"unread": "true" if unread_only else None,
                                                            "before": params.get("before")})
        if reply.status != 200:
            return api_error(session, reply)
        zone = zone_of(reply.body)
        items = [{**n, "what": glossary.words(n["kind"]), "when": when(n["created_at"], zone),
                  "read": when(n.get("read_at"), zone),
                  "facts": {k: v for k, v in (n.get("detail") or {}).items() if k != "reason"}}
                 for n in reply.body["items"]]
        before = reply.body.get("next_before")
        query = {k: v for k, v in {"show": "unread" if unread_only else None, "before": before}.items() if v}
        mail = api(session).call("GET", "/notices/mail")
        if mail.status != 200:
            return api_error(session, mail)
        return page("notices.html", session=session, items=items, unread=reply.body["unread"], zone=zone,
                    unread_only=unread_only, done=params.get("done"),
                    mail=mail.body["mail"], mail_off_since=when(mail.body.get("opted_out_at"), zone),
                    next_page=f"{PREFIX}/notices?" + urlencode(query) if before else None)

    @app.post(f"{PREFIX}/notices/mail")
    @checked_post
    def notices_mail_on(session: Session, fields: dict[str, str]) -> Response:
        """Turn the person's notice e-mails of the workspace back on (after they followed
        the one-click opt-out link of one)."""
        reply = api(session).call("POST", "/notices/mail")
        if reply.status != 200:
            return api_error(session, reply)
        return redirect(f"{PREFIX}/notices?done=mail")

    @app.post(f"{PREFIX}/notices/read")
    @checked_post
    def notices_read(session: Session, fields: dict[str, str]) -> Response:
        raw = fields.get("id", "").strip()
        if raw and not (raw.isdigit() and 0 < int(raw) < 2**63):
            return page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, session=session, title="Refused",
                        message="No such notice.")
        reply = api(session).call("POST", "/notices/read", body={"ids": [int(raw)]} if raw else {})
        if reply.status != 200:
            return api_error(session, reply)
        return redirect(f"{PREFIX}/notices?done=read")

    @app.get(f"{PREFIX}/open/<schedule_id>")
    @signed_in
    def open_schedule(session: Session, schedule_id: str) -> Response:
        """A notice's link: the delivery page when the API knows the id as one of the
        person's query schedules, else the schedule page (which answers for itself)."""
        reply = api(session).call("GET", f"/query-schedules/{schedule_id}")
        kind = "deliveries" if reply.status == 200 else "schedules"
        return redirect(f"{PREFIX}/{kind}/{quote(schedule_id, safe='')}")

    def ownerless_page(session: Session, *, problem: str | None = None, done: str | None = None,
                       status_code: int = 200) -> Response:
        reply = api(session).call("GET", "/ownerless-schedules")
        if reply.status != 200:
            return api_error(session, reply)
        zone = zone_of(reply.body)
        items = [{**s, "paused": when(s["paused_at"], zone)} for s in reply.body["items"]]
        return page("ownerless.html", status_code, session=session, items=items, zone=zone, problem=problem,
                    done=done)

    @app.get(f"{PREFIX}/ownerless")
    @signed_in
    def ownerless(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        done = (f"Reassigned to {params['to']}: it stays paused until it is resumed."
                if params.get("done") == "reassigned" and params.get("to") else None)
        return ownerless_page(session, done=done)

    @app.post(f"{PREFIX}/ownerless/reassign")
    @checked_post
    def reassign(session: Session, fields: dict[str, str]) -> Response:
        schedule_id, owner = fields.get("schedule_id", "").strip(), fields.get("owner_user_id", "").strip()
        try:
            schedule_id = str(uuid.UUID(schedule_id))
        except ValueError:
            return ownerless_page(session, problem="Refused: no such schedule.", status_code=404)
        reply = api(session).call("POST", f"/ownerless-schedules/{schedule_id}/reassign",
                                  body={"owner_user_id": owner})
        if reply.status == 200:
            return redirect(f"{PREFIX}/ownerless?" + urlencode({"done": "reassigned", "to": owner}))
        body = reply.body if isinstance(reply.body, dict) else {}
        text = f"Refused: {body.get('message') or 'the request was refused'}"
        return ownerless_page(session, problem=text, status_code=reply.status if 400 <= reply.status < 500 else 502)

    def posting_jobs_page(session: Session, *, problem: str | None = None, done: bool = False,
                          status_code: int = 200) -> Response:
        reply = api(session).call("GET", "/posting-jobs/failed")
        if reply.status != 200:
            return api_error(session, reply)
        zone = zone_of(reply.body)
        items = [{**j, "created": when(j["created_at"], zone), "finished": when(j.get("finished_at"), zone)}
                 for j in reply.body["items"]]
        return page("posting_jobs.html", status_code, session=session, items=items, problem=problem, done=done,
                    zone=zone)

    @app.get(f"{PREFIX}/posting-jobs")
    @signed_in
    def posting_jobs(session: Session) -> Response:
        params = app.current_event.query_string_parameters or {}
        return posting_jobs_page(session, done=params.get("done") == "retried")

    @app.post(f"{PREFIX}/posting-jobs/retry")
    @checked_post
    def posting_job_retry(session: Session, fields: dict[str, str]) -> Response:
        try:
            job_id = str(uuid.UUID(fields.get("job_id", "").strip()))
        except ValueError:
            return posting_jobs_page(session, problem="Refused: no such posting job.", status_code=404)
        reply = api(session).call("POST", f"/posting-jobs/{job_id}/retry")
        if reply.status == 202:
            return redirect(f"{PREFIX}/posting-jobs?done=retried")
        body = reply.body if isinstance(reply.body, dict) else {}
        return posting_jobs_page(session, problem=f"Refused: {body.get('message') or 'the request was refused'}",
                                 status_code=reply.status if 400 <= reply.status < 500 else 502)

    @app.get(f"{PREFIX}/static/<name>")
    def static(name: str) -> Response:
        suffix = name[name.rfind("."):] if "." in name else ""
        if "/" in name or "\\" in name or name.startswith(".") or suffix not in _STATIC_TYPES:
            return page("error.html", HTTPStatus.NOT_FOUND, title="Not found", message="No such file.")
        try:
            text = resources.files("timekeeper.console").joinpath("static", name).read_text("utf-8")
        except (FileNotFoundError, IsADirectoryError):
            return page("error.html", HTTPStatus.NOT_FOUND, title="Not found", message="No such file.")
        return Response(status_code=200, content_type=_STATIC_TYPES[suffix], body=text,
                        headers={**security_headers, "Cache-Control": "public, max-age=300"})

    @app.not_found
    def not_found(_: Exception) -> Response:
        return page("error.html", HTTPStatus.NOT_FOUND, session=current_session(), title="Not found",
                    message="There is no such page.", back=way_back(app.current_event.path or ""))

    return app
