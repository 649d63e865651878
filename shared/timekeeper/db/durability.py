"""Commits that need not wait for the disk.

A transaction whose loss in a database crash is harmless (the work it records is redone,
and redoing it is idempotent) may commit without waiting for its WAL flush: it is
visible to everyone at once and durable a fraction of a second later, and any later
durable commit on the server flushes it too. The scheduling core uses it for records that
a crash may forget at no cost other than a repeat: a run's start (one uncounted attempt),
a claim (re-claimed; its published messages name a run that no longer exists and are
acknowledged as absent), and a publication record (the run is offered once more).
Outcomes and handler effects always commit durably.

A multi-statement transaction calls :func:`commit_without_flush_wait` (the dispatcher's
claim); a statement that commits on its own sets the same transaction-local setting in a
``set_config`` CTE of its own (the consumer's ``start_runs``, the ``mark_published`` record),
which keeps it one round trip.
"""

from __future__ import annotations

import psycopg

_NO_FLUSH_WAIT = "SELECT set_config('synchronous_commit', 'off', true)"


def commit_without_flush_wait(conn: psycopg.Connection) -> None:
    """Let the current transaction commit without waiting for its WAL flush
    (``synchronous_commit = off`` for this transaction only). Call inside a transaction."""
    conn.execute(_NO_FLUSH_WAIT)
