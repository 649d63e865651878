"""What a console page is given: the console's shared parts (:class:`Console`: settings,
sessions, templates, the API resolver, the public path) and, per request, a
:class:`Request` holding the event, the signed-in session, the form and the helpers every
page uses (render a page, redirect, call the API as the person, show the API's refusal).

A page module's handlers are plain functions ``handler(ctx: Request, **path_parameters)
-> Response`` registered on the module's Powertools ``Router`` under one of the three
guards: :func:`signed_in` (a page for a signed-in person; others are sent to sign in),
:func:`checked_post` (a state-changing POST: the session and its CSRF token first, then
``ctx.fields``) or :func:`public` (no session). The guard builds the request's context
(:func:`current_request`, once per request) from the :class:`ConsoleResolver` answering it.

Every response carries a Content-Security-Policy without ``unsafe-inline`` (scripts and
styles come from ``/console/static/`` only; no code or font from another origin),
``frame-ancestors 'none'`` and ``nosniff``, and where cookies are ``Secure`` (HTTPS)
``Strict-Transport-Security``; every text is escaped by Jinja2's autoescape.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from timekeeper.console import glossary
from timekeeper.console.api_client import ApiClient, ApiReply, SessionUnknown
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import HOME, PREFIX, STAFF_ONLY, next_page, section_of, way_back
from timekeeper.console.sessions import SESSION_COOKIE, Session, Sessions
from timekeeper.console.sign_in import FlowCookies, IdentityProvider
from timekeeper.request_state import RequestScoped

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


def templates() -> Environment:
    """The console's Jinja2 templates (``console/templates``, autoescape on) with its
    filters: ``urlquote`` (one path segment), ``term`` and ``words`` (the glossary's), and
    the glossary's ``actor_words`` (actors that are no person, in words)."""
    env = Environment(loader=PackageLoader("timekeeper.console", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["urlquote"] = lambda value: quote(str(value), safe="")
    env.filters["term"] = glossary.term_html
    env.filters["named"] = glossary.named_html
    env.filters["words"] = glossary.words
    env.globals["actor_words"] = glossary.ACTORS
    return env


@dataclass(frozen=True)
class Console:
    """What every request of one console shares: its ``settings``, the API resolver it
    calls (``resolve_api(event, context)``), the session and sign-in flow cookies'
    signers, its templates, the browser's path of its pages (``public``: the stage, if
    any, then ``/console``), the headers of every response, and the zones a rule may name
    (read from the API once per execution environment). Raises ``ValueError`` for a
    session key shorter than 32 characters."""

    settings: ConsoleSettings
    resolve_api: Callable[[dict[str, Any], Any], dict[str, Any]]
    sessions: Sessions
    flows: FlowCookies
    templates: Environment
    public: str
    security_headers: dict[str, str]
    zones: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, resolve_api: Callable[[dict[str, Any], Any], dict[str, Any]], settings: ConsoleSettings) -> Console:
        """The console of ``settings`` calling the API through ``resolve_api``."""
        sessions = Sessions(settings.session_key, settings.older_session_keys)
        headers = {**_SECURITY_HEADERS, **({"Strict-Transport-Security": STRICT_TRANSPORT_SECURITY}
                                           if settings.secure_cookies else {})}
        # What the browser's addresses start with (the stage before /console when deployed).
        return cls(settings=settings, resolve_api=resolve_api, sessions=sessions, flows=FlowCookies(sessions.keys),
                   templates=templates(), public=settings.base_path.rstrip("/") + PREFIX, security_headers=headers)


#: ``page()``'s default: the request's own session.
_OWN_SESSION: Any = object()


class Request:
    """One console request as its page sees it: ``console`` (the shared parts), the
    Powertools ``event`` and ``lambda_context``, the signed-in ``session`` (None before a
    guard set it, and on public pages) and a POST's form ``fields``."""

    def __init__(self, console: Console, event: Any, lambda_context: Any) -> None:
        self.console, self.event, self.lambda_context = console, event, lambda_context
        self.session: Session | None = None
        self.fields: dict[str, str] = {}

    @property
    def settings(self) -> ConsoleSettings:
        """The console's settings."""
        return self.console.settings

    @property
    def public(self) -> str:
        """What the browser's addresses of console pages start with (``/v1/console``
        deployed, ``/console`` locally)."""
        return self.console.public

    @property
    def security_headers(self) -> dict[str, str]:
        """The headers every console response carries."""
        return self.console.security_headers

    @property
    def params(self) -> dict[str, str]:
        """The request's query parameters (the last of each name; empty without any)."""
        return self.event.query_string_parameters or {}

    @property
    def path(self) -> str:
        """The request's path (``/console/...``)."""
        return self.event.path or ""

    def api(self, session: Session | None = None) -> ApiClient:
        """The API as ``session``'s person (the request's own session by default)."""
        person = session or self.session
        assert person is not None, "an API call needs a signed-in person"
        return ApiClient(self.console.resolve_api, person.claims(), self.lambda_context)

    def unread_count(self, session: Session) -> int | None:
        """The person's unread notices (one API call), or None when the API does not say."""
        reply = self.api(session).call("GET", "/notices", query={"unread": "true", "limit": "1"})
        body = reply.body if reply.status == 200 and isinstance(reply.body, dict) else {}
        return body.get("unread") if isinstance(body.get("unread"), int) else None

    def page(self, template: str, http_status: int = 200, *, session: Session | None = _OWN_SESSION,
             **values: Any) -> Response:
        """``template`` rendered as an HTML page with status ``http_status``, for
        ``session`` (the request's own by default; None: a page without one): its CSRF
        token, the console's path and the navigation's unread count go in with ``values``."""
        if session is _OWN_SESSION:
            session = self.session
        if template == "error.html" and not values.get("back"):
            values["back"] = way_back(self.path)
        unread = values.pop("unread", None)
        if session is not None and unread is None:
            unread = self.unread_count(session)
        html = self.console.templates.get_template(template).render(
            session=session, csrf=self.console.sessions.csrf_token(session) if session else "", prefix=self.public,
            unread=unread, **values)
        return Response(status_code=int(http_status), content_type="text/html; charset=utf-8", body=html,
                        headers={**self.security_headers, "Cache-Control": "no-store"})

    def redirect(self, location: str, *, cookie: str | None = None, cookies: tuple[str, ...] = (),
                 external: bool = False) -> Response:
        """A 303 to ``location`` (a console path, given from ``/console``; an ``external``
        address as it is) setting ``cookie`` and ``cookies``."""
        if not external and location.startswith(PREFIX):
            location = self.public + location[len(PREFIX):]
        headers = {**self.security_headers, "Location": location, "Cache-Control": "no-store"}
        response = Response(status_code=HTTPStatus.SEE_OTHER, content_type="text/plain", body="",
                            headers=headers)
        for value in (*([cookie] if cookie is not None else []), *cookies):
            response.cookies.append(value)
        return response

    def cookie_header(self, value: str, *, max_age: int, name: str = SESSION_COOKIE) -> str:
        """A ``Set-Cookie`` value for the console's path (``HttpOnly``, ``SameSite=Lax``,
        ``Secure`` where the settings say), lasting ``max_age`` seconds (0 clears it)."""
        parts = [f"{name}={value}", f"Path={self.public}", f"Max-Age={max_age}", "HttpOnly", "SameSite=Lax"]
        if self.settings.secure_cookies:
            parts.append("Secure")
        return "; ".join(parts)

    def cookie(self, name: str) -> str | None:
        """The request's cookie ``name``, or None (absent, or a malformed Cookie header)."""
        jar = SimpleCookie()
        try:
            jar.load(self.event.headers.get("cookie") or "")
        except Exception:  # noqa: BLE001 - a malformed Cookie header holds no cookie
            return None
        morsel = jar.get(name)
        return morsel.value if morsel else None

    def current_session(self) -> Session | None:
        """The request's session: its cookie's, unless the server signed it out (the API's
        ``GET /sessions/{id}``, seen by every execution environment). Raises
        :class:`SessionUnknown` when the API cannot say."""
        session = self.console.sessions.read(self.cookie(SESSION_COOKIE))
        if session is None:
            return None
        reply = self.api(session).call("GET", f"/sessions/{quote(session.sid, safe='')}")
        if reply.status == 200 and isinstance(reply.body, dict):
            if reply.body.get("revoked_at") is not None:
                return None
            name = reply.body.get("display_name")
            return replace(session, name=name) if isinstance(name, str) and name else session
        if reply.status in (401, 422):
            return None
        raise SessionUnknown(reply)

    def form(self, max_fields: int = 50) -> dict[str, str]:
        """The request's urlencoded form (the first value of each field; empty when the
        body is no form or has more than ``max_fields`` fields: 50, more than a form of this
        console has, unless its handler names more)."""
        body = self.event.body or ""
        if self.event.is_base64_encoded:
            try:
                body = base64.b64decode(body).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return {}
        try:
            return {k: v[0] for k, v in parse_qs(body, max_num_fields=max_fields).items()}
        except ValueError:  # more fields than any form has: no form of this console
            return {}

    def requested_page(self) -> str:
        """The page asked for: its console path and query string, as the browser sent them."""
        event = self.event
        query = event.multi_value_query_string_parameters or {
            k: [v] for k, v in (event.query_string_parameters or {}).items()}
        return (event.path or "") + (f"?{urlencode(query, doseq=True)}" if query else "")

    def api_error(self, reply: ApiReply) -> Response:
        """The API's refusal ``reply`` as an error page (its status, message and code),
        leading back to the list the page belongs to (on a 403 of that list itself: the
        home page); a staff-only page refused to a non-staff person names the staff role. A
        410 ``schedule_deleted`` says when and by whom the schedule was deleted."""
        body = reply.body if isinstance(reply.body, dict) else {}
        status = reply.status if 400 <= reply.status < 600 else 502
        title = {404: "Not found", 403: "Not allowed", 401: "Signed out"}.get(status, "Refused")
        message, back = body.get("message") or "The request was refused.", way_back(self.path)
        if status == HTTPStatus.GONE and body.get("code") == "schedule_deleted":
            # A deleted schedule's address: when (local, UTC beside) and by whom; admins get the audit log.
            return self.page("schedule_gone.html", status, title="Schedule deleted", back=back,
                             deleted=when(body.get("deleted_at"), zone_of(body)), actor=body.get("deleted_by"),
                             by=body.get("deleted_by_name") or body.get("deleted_by"))
        if status == 403:
            # A refused page never leads back to a list refused the same way: home instead.
            section = section_of(self.path)
            if self.session is not None and not self.session.staff:
                message = STAFF_ONLY.get(section, message)
            if section_of(PREFIX + back[0]) == section:
                back = HOME
        return self.page("error.html", status, title=title, message=message, code=body.get("code"), back=back)


class ConsoleResolver(RequestScoped, APIGatewayRestResolver):
    """The console's Powertools resolver: while it answers an event, it is the one
    :func:`current_request` builds the request's context from (its event and request
    context are the request's own, :class:`~timekeeper.request_state.RequestScoped`)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        #: The console's shared parts.
        self.console = console

    def resolve(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Answer ``event`` (a REST proxy event) as the console."""
        token = _RESOLVING.set(self)
        try:
            return super().resolve(event, context)
        finally:
            _RESOLVING.reset(token)


#: The console resolver answering the current event (the API it calls is another resolver).
_RESOLVING: ContextVar[ConsoleResolver] = ContextVar("timekeeper_console_resolving")
#: Where a request's context is kept in its resolver's per-request context (which
#: Powertools clears after each event).
_REQUEST_KEY = "timekeeper_console_request"


def current_request() -> Request:
    """The context of the request the console answers now, made at its first use."""
    app = _RESOLVING.get()
    request = app.context.get(_REQUEST_KEY)
    if request is None:
        request = app.context[_REQUEST_KEY] = Request(app.console, app.current_event, app.lambda_context)
    return request


def public(handler: Callable[..., Response]) -> Callable[..., Response]:
    """A page anyone may open: ``handler(ctx, **path_parameters)`` without a session."""

    def wrapped(*args: Any, **kwargs: Any) -> Response:
        return handler(current_request(), *args, **kwargs)

    return wrapped


def signed_in(handler: Callable[..., Response]) -> Callable[..., Response]:
    """A page for a signed-in person (others are sent to sign in, with the page to come
    back to): ``handler(ctx, **path_parameters)`` with ``ctx.session`` set."""

    def wrapped(*args: Any, **kwargs: Any) -> Response:
        ctx = current_request()
        session = ctx.current_session()
        if session is None:
            asked = next_page(ctx.requested_page())
            return ctx.redirect(f"{PREFIX}/sign-in" + (f"?{urlencode({'next': asked})}" if asked else ""))
        ctx.session = session
        return handler(ctx, *args, **kwargs)

    return wrapped


def checked_post(handler: Callable[..., Response] | None = None, *, max_fields: int = 50) -> Any:
    """A state-changing request: a session and its CSRF token first (a 403 page without a
    valid one, and nothing done); ``handler(ctx, **path_parameters)`` with
    ``ctx.session`` and ``ctx.fields`` set. ``@checked_post(max_fields=n)``: a form of
    up to ``n`` fields (a range naming many workspaces; 50 otherwise)."""
    if handler is None:
        return lambda chosen: checked_post(chosen, max_fields=max_fields)

    def wrapped(*args: Any, **kwargs: Any) -> Response:
        ctx = current_request()
        session = ctx.current_session()
        if session is None:
            return ctx.redirect(f"{PREFIX}/sign-in")
        ctx.session, ctx.fields = session, ctx.form(max_fields)
        if not ctx.console.sessions.csrf_valid(session, ctx.fields.get("csrf")):
            return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Refused",
                            message="This form has expired or did not come from this console. Reload the page "
                                    "and try again.")
        return handler(ctx, *args, **kwargs)

    return wrapped
