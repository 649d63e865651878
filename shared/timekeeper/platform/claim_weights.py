"""A workspace's claim weight: its tier in the dispatcher's fair claim.

When one workspace crowds a claim batch, the batch is shared between the workspaces with due
work in proportion to their weights (``workspaces.claim_weight``, 1-10, default 1: equal
shares; see docs/architecture.md "The fair claim"). Platform staff set it for any workspace;
each change is recorded in that workspace's audit log (``staff.claim_weight_changed``, the
weight before and after, the staff member's reason) in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_one
from timekeeper.platform import audit

SQL = load_queries("timekeeper.platform", "claim_weights.sql")

#: The weights a workspace may have (the column's check, migration 0080).
MIN_WEIGHT, MAX_WEIGHT = 1, 10
#: The most workspaces one listing returns.
MAX_LISTED = 1000


@dataclass(frozen=True)
class WorkspaceWeight:
    """A workspace's id, name, IANA zone, state (``active``, ...) and claim weight (1-10)."""

    id: UUID
    name: str
    timezone: str
    status: str
    claim_weight: int


def staff_weights(conn: psycopg.Connection, *, search: str | None = None, limit: int = 100) -> list[WorkspaceWeight]:
    """Every workspace's weight for staff, by name (case-insensitive; ``search``: a part of
    the name), at most ``limit`` (capped at :data:`MAX_LISTED`), through the narrow function
    of migration 0080 (no workspace needs to be entered)."""
    return fetch_all(conn, SQL["staff_weights"], {"search": search or None, "limit": min(limit, MAX_LISTED)},
                     WorkspaceWeight)


def set_claim_weight(conn: psycopg.Connection, *, workspace_id: UUID, weight: int, actor: str, reason: str,
                     now: datetime) -> tuple[WorkspaceWeight, bool] | None:
    """Set ``workspace_id``'s claim weight to ``weight`` (``MIN_WEIGHT``-``MAX_WEIGHT``) in
    the caller's transaction (an API connection must have that workspace entered), and record
    ``staff.claim_weight_changed`` in its audit log with the weight before and after,
    ``actor`` (the staff member's user id), ``reason`` and ``now`` (aware UTC). Returns
    ``(the workspace as it now is, changed)``: ``changed`` False when it already had that
    weight (nothing written, nothing recorded); None when there is no such workspace
    (nothing recorded). Raises ``ValueError`` for a weight outside the bounds."""
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise ValueError(f"claim_weight must be {MIN_WEIGHT}-{MAX_WEIGHT}")
    before = fetch_one(conn, SQL["lock_weight"], {"workspace_id": workspace_id}, WorkspaceWeight)
    if before is None:
        return None
    if before.claim_weight == weight:
        return before, False
    execute(conn, SQL["set_weight"], {"workspace_id": workspace_id, "weight": weight})
    audit.record_event(conn, workspace_id=workspace_id, actor=actor, kind="staff.claim_weight_changed",
                       subject_type="workspace", subject_id=None, before={"claim_weight": before.claim_weight},
                       after={"claim_weight": weight}, reason=reason, now=now)
    return WorkspaceWeight(id=before.id, name=before.name, timezone=before.timezone, status=before.status,
                           claim_weight=weight), True
