"""The access rule, in one place: may this person read (or change) this query or report now?

Every path that acts for a person asks here: the HTTP API for its caller, the export
consumer for the person who requested the export, scheduled delivery for the schedule's
owner (automatic runs) or for the person who clicked Run now. The rule reads the
directory as it is at the moment of asking, so access lost after a schedule was created
is seen by its next run:

1. the user exists and is ``active`` (else ``user_deactivated`` / ``not_a_member``);
2. the user is a current member of the workspace (never joined: ``not_a_member``; left:
   ``left_workspace``);
3. one of the membership's roles grants the permission (else ``missing_role``);
4. the object exists in that workspace and is not deleted (else ``not_found``).

Roles held in a workspace membership, and what each grants:

=====================  ======================================================
``workspace:admin``    every permission below, and administering the workspace
``queries:admin``      queries:read, queries:write, reports:read, reports:write
``queries:write``      queries:read, queries:write
``queries:read``       queries:read
``reports:write``      reports:read, reports:write
``reports:read``       reports:read
=====================  ======================================================

Reading a report needs ``reports:read`` only: the report's author chose its queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_rows, fetch_value
from timekeeper.platform.directory import member_with_user

SQL = load_queries("timekeeper.platform", "access.sql")

QUERIES_READ = "queries:read"
QUERIES_WRITE = "queries:write"
REPORTS_READ = "reports:read"
REPORTS_WRITE = "reports:write"
#: Administering the workspace: its ownerless schedules and their reassignment, failed
#: posting jobs, the staff reads of its data. Only ``workspace:admin`` grants it.
WORKSPACE_ADMIN = "workspace:admin"
PERMISSIONS = (QUERIES_READ, QUERIES_WRITE, REPORTS_READ, REPORTS_WRITE, WORKSPACE_ADMIN)

#: What each membership role grants. Unknown role names grant nothing.
ROLE_GRANTS: dict[str, frozenset[str]] = {
    "workspace:admin": frozenset(PERMISSIONS),
    "queries:admin": frozenset({QUERIES_READ, QUERIES_WRITE, REPORTS_READ, REPORTS_WRITE}),
    "queries:write": frozenset({QUERIES_READ, QUERIES_WRITE}),
    "queries:read": frozenset({QUERIES_READ}),
    "reports:write": frozenset({REPORTS_READ, REPORTS_WRITE}),
    "reports:read": frozenset({REPORTS_READ}),
}

#: Reasons a decision refuses, machine-readable (also the delivery rows' skip reasons).
NOT_A_MEMBER = "not_a_member"
LEFT_WORKSPACE = "left_workspace"
USER_DEACTIVATED = "user_deactivated"
MISSING_ROLE = "missing_role"
NOT_FOUND = "not_found"


@dataclass(frozen=True)
class Decision:
    """The rule's answer: ``allowed``, or the ``reason`` it is not (one of the constants
    above)."""

    allowed: bool
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = Decision(True)


class AccessDenied(Exception):
    """Raised by :func:`require`: ``reason`` is the refusing :class:`Decision`'s reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def grants(roles: list[str] | frozenset[str] | tuple[str, ...]) -> frozenset[str]:
    """The permissions ``roles`` grant together."""
    out: set[str] = set()
    for role in roles:
        out |= ROLE_GRANTS.get(role, frozenset())
    return frozenset(out)


def check_person(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, permission: str) -> Decision:
    """Rules 1-3 for ``user_id`` in ``workspace_id``: is the person an active, current
    member whose roles grant ``permission``? Raises ``ValueError`` for an unknown
    permission."""
    if permission not in PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    user, membership = member_with_user(conn, workspace_id=workspace_id, user_id=user_id)
    if user is None or membership is None:
        return Decision(False, NOT_A_MEMBER)
    if user.status != "active":
        return Decision(False, USER_DEACTIVATED)
    if not membership.current:
        return Decision(False, LEFT_WORKSPACE)
    if permission not in grants(membership.roles):
        return Decision(False, MISSING_ROLE)
    return ALLOWED


def check_member(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str) -> Decision:
    """Rules 1-2 for ``user_id`` in ``workspace_id``: an active user and a current member
    (what a schedule's owner must be when its work reads no Platform data)."""
    user, membership = member_with_user(conn, workspace_id=workspace_id, user_id=user_id)
    if user is None or membership is None:
        return Decision(False, NOT_A_MEMBER)
    if user.status != "active":
        return Decision(False, USER_DEACTIVATED)
    if not membership.current:
        return Decision(False, LEFT_WORKSPACE)
    return ALLOWED


def check_people(conn: psycopg.Connection, *, workspace_id: UUID, user_ids: list[str],
                 permission: str) -> dict[str, Decision]:
    """Rules 1-3 of :func:`check_person` for many people at once (one query): the decision
    for each of ``user_ids``. Raises ``ValueError`` for an unknown permission."""
    if permission not in PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    rows = fetch_rows(conn, SQL["people_with_memberships"], (workspace_id, list(user_ids)))
    found = {r["id"]: r for r in rows}
    out: dict[str, Decision] = {}
    for user_id in user_ids:
        row = found.get(user_id)
        if row is None or not row["member"]:
            out[user_id] = Decision(False, NOT_A_MEMBER)
        elif row["status"] != "active":
            out[user_id] = Decision(False, USER_DEACTIVATED)
        elif row["left_at"] is not None:
            out[user_id] = Decision(False, LEFT_WORKSPACE)
        elif permission not in grants(row["roles"]):
            out[user_id] = Decision(False, MISSING_ROLE)
        else:
            out[user_id] = ALLOWED
    return out


def object_exists(conn: psycopg.Connection, kind: str, workspace_id: UUID, object_id: UUID) -> bool:
    """Rule 4: whether the ``kind`` (``query`` or ``report``) ``object_id`` exists in the
    workspace and is not deleted."""
    return _object_exists(conn, {"query": "saved_queries", "report": "reports"}[kind], workspace_id, object_id)


def _object_exists(conn: psycopg.Connection, table: str, workspace_id: UUID, object_id: UUID) -> bool:
    statement = {"saved_queries": SQL["saved_query_exists"], "reports": SQL["report_exists"]}[table]
    return fetch_value(conn, statement, (workspace_id, object_id)) is not None


def check_query(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, query_id: UUID,
                permission: str = QUERIES_READ) -> Decision:
    """May ``user_id`` use saved query ``query_id`` of ``workspace_id`` for ``permission``
    (default reading: running and exporting it)? Rules 1-4."""
    decision = check_person(conn, workspace_id=workspace_id, user_id=user_id, permission=permission)
    if decision and not _object_exists(conn, "saved_queries", workspace_id, query_id):
        return Decision(False, NOT_FOUND)
    return decision


def check_report(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, report_id: UUID,
                 permission: str = REPORTS_READ) -> Decision:
    """May ``user_id`` use report ``report_id`` of ``workspace_id`` for ``permission``
    (default reading: viewing and rendering it)? Rules 1-4."""
    decision = check_person(conn, workspace_id=workspace_id, user_id=user_id, permission=permission)
    if decision and not _object_exists(conn, "reports", workspace_id, report_id):
        return Decision(False, NOT_FOUND)
    return decision


#: The permission reading each source kind needs (``query``, ``report``).
READ_PERMISSION = {"query": QUERIES_READ, "report": REPORTS_READ}


def refusal_sentence(who: str, reason: str | None, kind: str) -> str:
    """Why ``who`` (a person as people know them: "Vic Viewer (vic)") may not read a
    ``kind`` (``query`` or ``report``), as a sentence for people: the refusal ``reason``
    (one of the rule's constants) in words, naming the role a missing role needs.
    ``refusal_sentence("Vic", "missing_role", "report")`` -> ``"Vic may not read the
    report: their roles in this workspace do not include reports:read (a workspace admin
    can give it)."``"""
    if reason == MISSING_ROLE:
        role = READ_PERMISSION.get(kind, kind)
        return (f"{who} may not read the {kind}: their roles in this workspace do not include {role} "
                "(a workspace admin can give it).")
    return {LEFT_WORKSPACE: f"{who} may not read the {kind}: they have left this workspace.",
            NOT_A_MEMBER: f"{who} may not read the {kind}: they are not a member of this workspace.",
            USER_DEACTIVATED: f"{who} may not read the {kind}: their account is deactivated.",
            NOT_FOUND: f"The {kind} no longer exists in this workspace."}.get(
        reason or NOT_FOUND, f"{who} may not read the {kind}.")


def require(decision: Decision, what: str) -> None:
    """Raise :class:`AccessDenied` (with the decision's reason) unless ``decision`` allows
    ``what`` (a phrase for the message, e.g. ``"read query 1f0..."``)."""
    if not decision:
        raise AccessDenied(decision.reason or NOT_FOUND, f"may not {what}: {decision.reason}")
