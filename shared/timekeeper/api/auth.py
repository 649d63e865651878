"""Identity from the API Gateway authorizer, and the roles the routes require (the tenant rule).

The API never authenticates anyone itself: API Gateway's Lambda authorizer (pointed by the
operator at their identity provider) does, and passes its verdict in the REST proxy event
as ``requestContext.authorizer`` (the authorizer's ``context`` map, whose values are
strings, plus ``principalId``). The claims read here:

* ``user_id`` (or ``principalId``): the acting user, recorded as the actor of history
  events and of manual runs. An opaque id, never an address.
* ``workspace_id``: the caller's workspace (a UUID). Every query of the request is scoped
  by it and the database walls it off a second time (row-level security).
* ``roles``: comma- or space-separated role names (a JSON list is accepted too).

The same keys are also read from ``requestContext.authorizer.claims`` (a Cognito or JWT
authorizer). A request without a user or a valid workspace is 401; a role that does not
allow the route's action is 403; another workspace's object is 404 (the scope never finds
it), so existence does not leak. Before routing, every authenticated request also passes
the membership rule (:func:`timekeeper.api.scope.member_check`): the user must be an
active, current member of the token's workspace in the directory, else 403.

Roles (each route needs exactly one):

====================  ===============================================================
``schedules:read``    list schedules, read one with its occurrences and history
``schedules:write``   create, update, pause, resume, delete
``schedules:run``     "Run now"
``schedules:admin``   all of the above, and the workspace's closures (add, remove)
``queries:read``      list and read saved queries and their versions, the catalogue; export a
                      saved query and read one's own exports
``queries:write``     create a saved query, add a version, delete
``queries:admin``     both queries roles
``reports:read``      list reports, read one, request a render and read it; accept the
                      invitation back to a report's schedule (a query's takes
                      ``queries:read``)
``reports:write``     create and edit reports (and everything reports:read allows)
``snapshots:read``    list the caller's own workspace's snapshot periods
``workspace:admin``   the workspace's ownerless schedules and their reassignment, failed
                      posting jobs and their retry, staff reads of its data, taking an
                      address off its suppression list (and the removals' records)
(any role above)      the caller's own notices (list, mark read)
====================  ===============================================================

Snapshot STAFF roles are not in this table: each snapshot type names the claims roles that
may request its re-runs and backfills (``SnapshotType.staff_roles``; the Platform's is
``platform:staff``), and a caller holding any registered type's staff role may read any
workspace's periods (:class:`timekeeper.api.scope.StaffScope`).

The roles say what the TOKEN allows. Routes over platform data (saved queries, reports)
then also apply the access rule of :mod:`timekeeper.platform.access` in the database: what
the person may do now (an active user, a current member whose membership roles grant it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from timekeeper.api.errors import FORBIDDEN, UNAUTHENTICATED, ApiError

READ = "schedules:read"
WRITE = "schedules:write"
RUN = "schedules:run"
ADMIN = "schedules:admin"
QUERIES_READ = "queries:read"
QUERIES_WRITE = "queries:write"
QUERIES_ADMIN = "queries:admin"
REPORTS_READ = "reports:read"
REPORTS_WRITE = "reports:write"
SNAPSHOTS_READ = "snapshots:read"
WORKSPACE_ADMIN = "workspace:admin"
#: Reading and marking one's own notices: allowed by every role of the table below.
OWN_NOTICES = "notices:own"

#: What each role allows. Unknown role names are ignored.
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    READ: frozenset({READ}),
    WRITE: frozenset({WRITE}),
    RUN: frozenset({RUN}),
    ADMIN: frozenset({READ, WRITE, RUN, ADMIN}),
    QUERIES_READ: frozenset({QUERIES_READ}),
    QUERIES_WRITE: frozenset({QUERIES_WRITE}),
    QUERIES_ADMIN: frozenset({QUERIES_READ, QUERIES_WRITE}),
    REPORTS_READ: frozenset({REPORTS_READ}),
    REPORTS_WRITE: frozenset({REPORTS_READ, REPORTS_WRITE}),
    SNAPSHOTS_READ: frozenset({SNAPSHOTS_READ}),
    WORKSPACE_ADMIN: frozenset({WORKSPACE_ADMIN}),
}
ROLE_PERMISSIONS = {role: allowed | {OWN_NOTICES} for role, allowed in ROLE_PERMISSIONS.items()}

#: The other role that allows a permission (named in 403 messages); a permission only its
#: own role allows has none.
_ADMIN_OF: dict[str, str] = {READ: ADMIN, WRITE: ADMIN, RUN: ADMIN,
                             QUERIES_READ: QUERIES_ADMIN, QUERIES_WRITE: QUERIES_ADMIN,
                             REPORTS_READ: REPORTS_WRITE}

_MAX_USER_ID = 200


@dataclass(frozen=True)
class Identity:
    """The authenticated caller: ``user_id`` (opaque), ``workspace_id`` and ``roles``."""

    user_id: str
    workspace_id: UUID
    roles: frozenset[str]

    @property
    def permissions(self) -> frozenset[str]:
        """The union of what the caller's roles allow."""
        out: set[str] = set()
        for role in self.roles:
            out |= ROLE_PERMISSIONS.get(role, frozenset())
        return frozenset(out)

    def require(self, permission: str) -> None:
        """Raise a 403 :class:`ApiError` unless a role allows ``permission``."""
        if permission not in self.permissions:
            alternative = _ADMIN_OF.get(permission)
            raise ApiError(403, FORBIDDEN, f"this action needs the role {permission}"
                           + (f" (or {alternative})" if alternative else ""))


def _roles(value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                return frozenset()
        else:
            return frozenset(part for part in text.replace(",", " ").split() if part)
    if isinstance(value, list | tuple):
        return frozenset(str(v).strip() for v in value if str(v).strip())
    return frozenset()


def identity_from_event(event: dict[str, Any]) -> Identity:
    """Read the caller from a REST proxy event's ``requestContext.authorizer``.

    Raises a 401 :class:`ApiError` when there is no authorizer context, no user id (or one
    longer than 200 characters or holding a NUL character), or no workspace id that is a UUID.
    """
    context = (event.get("requestContext") or {}).get("authorizer") or {}
    if not isinstance(context, dict):
        context = {}
    claims = context.get("claims") if isinstance(context.get("claims"), dict) else {}

    def claim(*names: str) -> Any:
        for source in (context, claims):
            for name in names:
                value = source.get(name)
                if value not in (None, ""):
                    return value
        return None

    user_id = claim("user_id", "principalId", "sub")
    workspace = claim("workspace_id")
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > _MAX_USER_ID or "\x00" in user_id:
        # (PostgreSQL text cannot hold a NUL: such an id could never be recorded as an actor)
        raise ApiError(401, UNAUTHENTICATED, "no authenticated user: sign in through the authorizer")
    try:
        workspace_id = UUID(str(workspace))
    except ValueError:
        raise ApiError(401, UNAUTHENTICATED, "the authorizer named no valid workspace") from None
    return Identity(user_id=user_id.strip(), workspace_id=workspace_id, roles=_roles(claim("roles")))
