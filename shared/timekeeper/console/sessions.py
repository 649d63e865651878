"""The console's sessions: a signed cookie holding the signed-in person's claims (user,
workspace, roles) and a random session id, and the CSRF token of its forms (a signature
of that id). Both are signed with itsdangerous (HMAC-SHA-256) and last eight hours."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

from itsdangerous import BadSignature, URLSafeTimedSerializer

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


@dataclass(frozen=True)
class Session:
    """A signed-in person: the claims the API is called with, and the session's id (what
    its CSRF token signs)."""

    user_id: str
    workspace_id: str
    roles: str
    sid: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    #: The person's display name as the API gave it for this request ("" when unknown; not in the cookie).
    name: str = ""

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
