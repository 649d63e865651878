"""Erasing a person: what Timekeeper holds of one platform user goes, in every workspace,
at the person's request (a staff action; the platform's own directory is the platform's).

:func:`erase_person` runs the migration's ``timekeeper_erase_person`` function, in the
caller's transaction:

* the person comes off every query schedule's recipient list (each schedule gets an
  ``updated`` history event, reason ``person_erased``, with the list before and after);
* their opt-outs are deleted, of query schedules' messages and of workspaces' notice
  e-mails (there is nothing left to opt out of);
* the workspace suppression-list entries, and the admins' records of removing one, of an
  address of theirs (one they were sent at, or the platform directory's current address of
  theirs) or of a message of theirs that bounced or complained, are deleted;
* the address of every delivery row of theirs is erased (``address`` NULL,
  ``address_erased_at`` the erasure's instant); the rows stay with their outcomes, so every
  count, report and audit still adds up;
* the erasure is remembered by the SHA-256 digest of the user id (``person_erasures``),
  never the id: a delivery attempt of a run queued before the erasure and still sending
  writes its row without the address.

Snapshot rows name no platform user (they name the workspace's own members, the
association's customers), so a person's erasure has nothing to reach there. Erasing one
of those **members** is :func:`erase_member`: the platform calls it when it erases the
member from its business data, in the same transaction. It pseudonymises the member's rows
in every snapshot version, published ones included (the accounts-receivable aging: the
member id goes, the invoice id is replaced by a random one); every other column stays, so
each published version's counts, totals and bucket totals, and every report over it, are
unchanged (``0063_snapshot_personal_data.sql``; the database refuses any other change of a
published version's rows).

Nothing else of ours holds an address: the outbox, notices and their e-mails, message
states and events, opt-outs and recipient lists name people by the platform's user id, and
no message body is stored (each is built at send time). Repeating an erasure changes
nothing but its instant (every count is 0), so a retried request is safe.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import psycopg

from timekeeper.db.rows import fetch_one
from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.platform", "erasure.sql")


@dataclass(frozen=True)
class Erasure:
    """What one erasure removed: ``user_digest`` (hex SHA-256 of the user id),
    ``recipient_lists`` (query schedules the person was taken off), ``opt_outs`` deleted
    (schedules' and notice e-mails'), ``delivery_addresses`` erased, ``suppressions``
    deleted (suppression entries and their removal records)."""

    user_digest: str
    recipient_lists: int
    opt_outs: int
    delivery_addresses: int
    suppressions: int


def user_digest(user_id: str) -> str:
    """The hex SHA-256 digest of ``user_id`` (UTF-8) by which an erasure is remembered and
    audited (the database computes the same: ``encode(sha256(convert_to(id, 'UTF8')), 'hex')``)."""
    return hashlib.sha256(user_id.encode()).hexdigest()


def erase_person(conn: psycopg.Connection, *, user_id: str, actor: str, now: datetime) -> Erasure:
    """Erase ``user_id`` everywhere (see the module docstring) in the caller's transaction,
    as ``actor`` at ``now`` (aware UTC); returns the counts. Works on the API's walled
    connection (the function runs as the migration's owner) and on the owner's alike."""
    erased = fetch_one(conn, SQL["erase_person"], {"user_id": user_id, "actor": actor, "now": now}, Erasure)
    assert erased is not None  # the function returns one row
    return erased


def erase_member(conn: psycopg.Connection, *, workspace_id: UUID, member_id: UUID, now: datetime) -> int:
    """Pseudonymise member ``member_id`` of ``workspace_id`` in every snapshot version's rows
    (see the module docstring), in the caller's transaction, marking the rows erased at
    ``now`` (aware UTC); returns the rows changed (0 for a repeat, or a member no snapshot
    names). Works on the API's walled connection and on the workers' and owner's alike."""
    row = conn.execute(SQL["erase_member_snapshot_rows"],
                       {"workspace_id": workspace_id, "member_id": member_id, "now": now}).fetchone()
    return int(row["snapshot_rows"] if isinstance(row, dict) else row[0])


__all__ = ["Erasure", "erase_member", "erase_person", "user_digest"]
